#!/usr/bin/env bash
# Server-level throughput on the GPU machine (issue 23): `tandem run --mode agg --device cuda:0` on a
# random Qwen3-8B checkpoint (scripts/gpu/peer_check.py --make-only) with the bundled model's real
# Qwen3 tokenizer, swept by `tandem bench` (closed loop, completions, input 1024, output 256 with
# ignore_eos), beside cuda_engine_bench's decode tok/s at the same batches in the same call.
#
#   scripts/gpu-serve-bench.sh pack [BUILD_DIR]   here (nvcc, no GPU): scripts/gpu-e2e.sh pack (tandem)
#                                                 and scripts/gpu-check.sh pack (cuda_engine_bench)
#                                                 from BUILD_DIR (default build-cuda90, sm_90).
#   scripts/gpu-serve-bench.sh                    on the device (run tool, carry [".device-carry"]).
#
# Env: SERVE_CONCURRENCY (1 16 64 256), SERVE_INPUT_LEN (1024), SERVE_OUTPUT_LEN (256),
# SERVE_ENGINE_CONTEXT (context of the engine benchmark's decode steps; default input + output / 2,
# the HTTP run's mean), SERVE_SKIP_ENGINE=1, SERVE_SKIP_LOOP=1 (no closed-loop engine run: the
# levels' requests straight into Engine::Step at the server's budget, the 'engine loop' column), SERVE_BASE (a folder under the repository holding an
# earlier build's scripts/gpu-e2e.sh pack, e.g. .device-carry/base-e2e: its tandem is swept after
# this one's, same checkpoint, same engine column; its tarball may hold the tandem binary alone, which
# then runs with this pack's libraries, to stay within the carry limit); a try-out here without a pack: SERVE_MODEL=models/tiny-qwen3
# SERVE_DEVICE=cpu SERVE_SKIP_ENGINE=1 (SERVE_TANDEM: the binary, default build/tandem). Requests per level: 2 x concurrency, at least 8, and
# a warm-up of min(concurrency, 16). SERVE_RUN_ARGS: more `tandem run` arguments for every server.
# SERVE_ALT_ARGS (e.g. --async-scheduling): this build swept again with these `tandem run`
# arguments added (tag alt), beside the engine benchmark run again with SERVE_ENGINE_ALT_ARGS
# (default: SERVE_ALT_ARGS; set it empty for a flag only tandem run knows) so the alt rows' ratios
# compare like with like (none without that run). Never touches clocks,
# power or modes.
#
# The table (last): per concurrency the HTTP output tok/s, the engine's closed loop of the same work
# (same concurrency, requests, lengths and step budget, no HTTP) and their ratio, TTFT and ITL
# p50/p99, the engine's decode tok/s at that batch and the ratio, and the CPU seconds of the server's threads during the level by
# name (tandem-engine: the engine loop; tandem-forward: the model's thread under --async-scheduling;
# tandem-http: the frontend; other). Files in $OUT:
# serve-bench.log, serve-results.tar.gz (the reports: engine-bench.json, engine-bench-alt.json,
# engine-loop.json, engine-loop-alt.json, bench-TAG-cN.json,
# cpu-TAG.txt), server-TAG.log.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# CARRY, the NCCL settings; find_cublas, wait_health, setup_tiny, setup_8b
. "$ROOT/scripts/gpu/e2e_common.sh"

if [ "${1:-}" = pack ]; then
  build=${2:-build-cuda90}
  set -e
  bash scripts/gpu-e2e.sh pack "$build"
  GPU_CHECK_BUILD=$build GPU_CHECK_ARCHS=${GPU_CHECK_ARCHS:-90a-real} bash scripts/gpu-check.sh pack
  du -sh .device-carry
  exit 0
fi

# CPU seconds of each thread group of process $1: "engine forward http other" (clock ticks /
# CLK_TCK; forward: --async-scheduling's thread that runs the model).
cpu_by_name() {
  local pid=$1 tck
  tck=$(getconf CLK_TCK)
  for t in /proc/"$pid"/task/*; do
    # comm may hold spaces: the fields after the closing parenthesis.
    sed -e 's/^.*(\(.*\)) \(.*\)$/\1|\2/' "$t/stat" 2>/dev/null
  done | awk -F'|' -v tck="$tck" '{
      split($2, f, " "); ticks = f[12] + f[13];
      if ($1 == "tandem-engine") e += ticks; else if ($1 == "tandem-forward") w += ticks;
      else if ($1 == "tandem-http") h += ticks; else o += ticks
    } END { printf "%.2f %.2f %.2f %.2f\n", e / tck, w / tck, h / tck, o / tck }'
}

# One server (binary $2, tagged $1) swept over the levels; reports into $res.
sweep() {
  local tag=$1 bin=$2 port=18000 rc=0 extra=${SERVE_RUN_ARGS:-}
  [ "$tag" = alt ] && extra="$extra ${SERVE_ALT_ARGS:-}"
  echo "== $tag: tandem run --mode agg --device ${SERVE_DEVICE:-cuda:0} $extra ($CKPT)"
  # shellcheck disable=SC2086
  TANDEM_DISCOVERY_DIR="$work/discovery-$tag" "$bin" run --mode agg --device "${SERVE_DEVICE:-cuda:0}" \
    --model "$CKPT" --port $port --max-num-seqs 256 $extra > "$out/server-$tag.log" 2>&1 &
  local pid=$!
  if ! wait_health $port 240; then tail -20 "$out/server-$tag.log"; kill -KILL $pid; return 1; fi
  : > "$res/cpu-$tag.txt"
  local c n w before after
  for c in $levels; do
    n=$((2 * c)); ((n < 8)) && n=8
    w=$c; ((w > 16)) && w=16
    # The warm-up first, unmeasured (CUDA graphs of this batch, the GEMMs' first calls).
    "$bin" bench --url "http://127.0.0.1:$port" --endpoint completions --tokenizer "$CKPT" \
      --dataset synthetic --input-len "$in_len" --output-len "$out_len" --prefix-len 0 \
      --concurrency "$c" --num-requests "$w" --seed 99 --no-progress > /dev/null 2>&1
    before=$(cpu_by_name $pid)
    echo "== $tag: tandem bench --concurrency $c --num-requests $n"
    "$bin" bench --url "http://127.0.0.1:$port" --endpoint completions --tokenizer "$CKPT" \
      --dataset synthetic --input-len "$in_len" --output-len "$out_len" --prefix-len 0 \
      --concurrency "$c" --num-requests "$n" --seed $((7 + c)) --no-progress \
      --output-json "$res/bench-$tag-c$c.json" | tail -2 || rc=1
    after=$(cpu_by_name $pid)
    echo "$c $before $after" >> "$res/cpu-$tag.txt"
  done
  kill -TERM $pid 2>/dev/null; sleep 2; kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
  grep -h "KV cache\|weights" "$out/server-$tag.log" | tail -2
  return $rc
}

main() {
  local out=${OUT:-/tmp/gpu-serve-bench-out} work=/tmp/tandem-serve ckdir=/dev/shm/tandem-serve
  mkdir -p "$out"
  exec > >(tee "$out/serve-bench.log") 2>&1
  if [ -n "${SERVE_MODEL:-}" ]; then  # a try-out without the pack: any model, any device
    CKPT=$SERVE_MODEL
    mkdir -p "$work" && cp "${SERVE_TANDEM:-build/tandem}" "$work/tandem"
  else
    setup_8b "$out" "$work" "$ckdir" "$ckdir/qwen3-8b" || return 1
  fi
  local in_len=${SERVE_INPUT_LEN:-1024} out_len=${SERVE_OUTPUT_LEN:-256}
  local levels=${SERVE_CONCURRENCY:-1 16 64 256}
  local ctx=${SERVE_ENGINE_CONTEXT:-$((in_len + out_len / 2))}
  local rc=0

  # 1. The engine benchmark first (the server would hold the GPU memory).
  if [ "${SERVE_SKIP_ENGINE:-0}" != 1 ]; then
    local bin=$work/bin
    mkdir -p "$bin"
    if xz -dc "$ROOT/.device-carry/cuda_engine_bench.xz" > "$bin/cuda_engine_bench" 2>/dev/null; then
      chmod +x "$bin/cuda_engine_bench"
      # engine_bench JSON [ARGS...]: decode at the levels' batches, one prefill of the input length.
      engine_bench() {
        local json=$1
        shift
        echo "== cuda_engine_bench $* (decode, context $ctx)"
        LD_LIBRARY_PATH="$ROOT/.device-carry/lib:${LD_LIBRARY_PATH:-}" timeout 240 "$bin/cuda_engine_bench" \
          "$CKPT" --batches "$(echo "$levels" | tr ' ' ',')" --context "$ctx" --prefill "$in_len" --steps 32 \
          --json "$json" "$@"
      }
      # engine_loop JSON [ARGS...]: the HTTP levels' closed loops straight into the engine, with
      # the server's step budget (tandem run's default, 2048 tokens); its max_num_seqs is the
      # largest level, so no level waits for a slot (nor does one under the server's 256).
      engine_loop() {
        local json=$1
        shift
        echo "== cuda_engine_bench --closed-loop $* (input $in_len, output $out_len)"
        LD_LIBRARY_PATH="$ROOT/.device-carry/lib:${LD_LIBRARY_PATH:-}" timeout 300 "$bin/cuda_engine_bench" \
          "$CKPT" --batches "" --prefill "" --budget 2048 --closed-loop "$(echo "$levels" | tr ' ' ',')" \
          --input-len "$in_len" --output-len "$out_len" --json "$json" "$@"
      }
      engine_bench "$out/engine-bench.json" || rc=1
      [ "${SERVE_SKIP_LOOP:-0}" = 1 ] || engine_loop "$out/engine-loop.json" || rc=1
      # shellcheck disable=SC2086
      if [ -n "${SERVE_ALT_ARGS:-}" ]; then
        engine_bench "$out/engine-bench-alt.json" ${SERVE_ENGINE_ALT_ARGS-$SERVE_ALT_ARGS} || rc=1
        [ "${SERVE_SKIP_LOOP:-0}" = 1 ] || engine_loop "$out/engine-loop-alt.json" ${SERVE_ENGINE_ALT_ARGS-$SERVE_ALT_ARGS} || rc=1
      fi
    else
      echo "no .device-carry/cuda_engine_bench.xz (scripts/gpu-serve-bench.sh pack)"; rc=1
    fi
  fi

  # 2. The server, swept: this build, then the base build's tandem when SERVE_BASE names its pack.
  local tags=new
  if [ -n "${SERVE_BASE:-}" ]; then
    if [ -e "$ROOT/$SERVE_BASE/tandem-e2e.tar.xz" ]; then
      mkdir -p "$work/base" && xz -dc "$ROOT/$SERVE_BASE/tandem-e2e.tar.xz" | tar -C "$work/base" -xf -
      echo "base: $(cat "$ROOT/$SERVE_BASE/BUILD_INFO")"
      tags="new base"
    else
      echo "no $SERVE_BASE/tandem-e2e.tar.xz: no base run"; rc=1
    fi
  fi
  [ -n "${SERVE_ALT_ARGS:-}" ] && tags="$tags alt"
  local res=$work/results tag
  rm -rf "$res" && mkdir -p "$res"
  local f
  for f in engine-bench.json engine-bench-alt.json engine-loop.json engine-loop-alt.json; do [ -e "$out/$f" ] && mv "$out/$f" "$res/"; done
  for tag in $tags; do
    local bin=$work/tandem
    [ "$tag" = base ] && bin=$work/base/tandem
    sweep "$tag" "$bin" || rc=1
  done
  [ -n "${SERVE_ALT_ARGS:-}" ] && echo "alt: SERVE_ALT_ARGS=$SERVE_ALT_ARGS (engine: ${SERVE_ENGINE_ALT_ARGS-$SERVE_ALT_ARGS})"

  echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); input $in_len, output $out_len; engine decode at context $ctx)"
  python3 - "$res" $tags <<'PY' || rc=1
import json, os, sys
res, tags = sys.argv[1], sys.argv[2:]
def load_engine(name, loop_name):
    engine, prefill_s, loop = {}, None, {}
    try:
        for r in json.load(open(os.path.join(res, name)))["results"]:
            if r["kind"] == "decode":
                engine[r["batch"]] = (r["tok_s"], 1000 * r["median_step_s"])
            elif r["kind"] == "prefill":
                prefill_s = r["median_s"]  # one prompt of the input length, alone
    except (OSError, ValueError, KeyError):
        pass
    try:  # the closed loops: the HTTP levels' work straight into the engine
        for r in json.load(open(os.path.join(res, loop_name)))["results"]:
            if r["kind"] == "closed_loop":
                loop[r["concurrency"]] = r["tok_s"]
    except (OSError, ValueError, KeyError):
        pass
    return engine, prefill_s, loop
# The alt sweep beside the engine benchmark run with the same flags, when there is one.
engines = {"": load_engine("engine-bench.json", "engine-loop.json"),
           "alt": load_engine("engine-bench-alt.json", "engine-loop-alt.json")}
# bound: the engine's own time for the HTTP run's work done back to back, prefills (one at a time,
# at the engine benchmark's time for one prompt) then decode at the level's batch:
# n * out / (n * prefill_s + n * out / engine tok/s).
# loop: the same closed loop through Engine::Step in one process (cuda_engine_bench --closed-loop).
print("| build | conc | HTTP tok/s | engine loop tok/s | HTTP / loop | engine decode tok/s | ratio | serial bound tok/s | HTTP / bound | TTFT p50 / p99 ms | ITL p50 / p99 ms | engine ms/step | ok / err | CPU s engine / forward / http / other |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for tag in tags:
    # alt rows only against the engine run with the alt flags: none, no ratios ("-").
    engine, prefill_s, loop = engines["alt" if tag == "alt" else ""]
    cpu = {}
    for line in open(os.path.join(res, f"cpu-{tag}.txt")):
        f = line.split()
        c = int(f[0]); b = list(map(float, f[1:5])); a = list(map(float, f[5:9]))
        cpu[c] = [y - x for x, y in zip(b, a)]
    for c in sorted(cpu):
        try:
            run = json.load(open(os.path.join(res, f"bench-{tag}-c{c}.json")))["runs"][0]
        except (OSError, ValueError, KeyError, IndexError):
            print(f"| {tag} | {c} | (no report) |"); continue
        tok = run["output_throughput"]; e, step = engine.get(c, (None, None))
        ratio = f"{100 * tok / e:.0f}%" if e else "-"
        es = f"{e:.0f}" if e else "-"
        ss = f"{step:.2f}" if step else "-"
        n, outs = run["num_ok"], run["total_output_tokens"]
        bound = outs / (n * prefill_s + outs / e) if e and prefill_s and n else None
        bs = f"{bound:.0f}" if bound else "-"
        br = f"{100 * tok / bound:.0f}%" if bound else "-"
        t, i = run["ttft_ms"], run["itl_ms"]
        lp = loop.get(c)
        ls, lr = (f"{lp:.0f}", f"{100 * tok / lp:.0f}%") if lp else ("-", "-")
        print(f"| {tag} | {c} | {tok:.0f} | {ls} | {lr} | {es} | {ratio} | {bs} | {br} | {t['p50']:.1f} / {t['p99']:.1f} | "
              f"{i['p50']:.2f} / {i['p99']:.2f} | {ss} | {run['num_ok']} / {run['num_errors']} | "
              f"{cpu[c][0]:.1f} / {cpu[c][1]:.1f} / {cpu[c][2]:.1f} / {cpu[c][3]:.1f} |")
PY
  tar -C "$res" -czf "$out/serve-results.tar.gz" .
  return $rc
}

main
