#!/usr/bin/env bash
# End to end on the GPU machine: the real `tandem` binary with --device cuda:0, aggregated and
# disaggregated (1 prefill + 1 decode on the same GPU, KV staged through host memory by the tcp
# backend), against the golden file (Hugging Face's greedy outputs for the bundled tiny model).
#
#   scripts/gpu-e2e.sh pack [BUILD_DIR]   here (nvcc, no GPU): strips and packs BUILD_DIR/tandem (a
#                                         TANDEM_CUDA=ON build; default build-cuda) with the shared
#                                         libraries the device machine lacks, and the golden files,
#                                         into .device-carry/e2e/ (ignored).
#   scripts/gpu-e2e.sh                    on the device (run tool, carry [".device-carry"]): unpacks,
#                                         starts `tandem run --device cuda:0` (agg, then disagg with
#                                         every prompt prefilled remotely), sends every golden prompt
#                                         (greedy) and prints a table: prompts whose text equals HF's,
#                                         the first differing token position otherwise, KV transfers.
#   scripts/gpu-e2e.sh ttft2gpu           on the two-GPU device (kind nvidia-h200-x2): TTFT of 2k-token
#                                         prompts, agg on cuda:0 vs deploy/disagg-1p1d-2gpu.yaml (layer-
#                                         wise and whole KV writes), random Qwen3-8B weights, greedy
#                                         outputs compared (issue 7's goal). ttft1gpu: the same with
#                                         deploy/disagg-1p1d-gpu.yaml (both workers on cuda:0).
#   scripts/gpu-e2e.sh structured         on the device: structured outputs (issue 24): the schema
#                                         suite through tandem run on the tiny model and the random
#                                         Qwen3-8B (outputs come back for both validators), and
#                                         batch-64 decode throughput with and without a schema.
#   scripts/gpu-e2e.sh offload            on the device: the KV host tier off vs on through tandem
#                                         run on the random Qwen3-8B (scripts/bench-offload.sh),
#                                         onboard bandwidth beside torch's pinned H2D (issue 26).
#   scripts/gpu-e2e.sh l40s               on the device: the random Qwen3-8B in an L40S's budget
#                                         (L40S_BUDGET_GIB, default 44) through `tandem run`, agg and
#                                         disagg, every golden prompt answered (issue 19).
# Env: E2E_MODES="agg disagg serve" (serve: deploy/disagg-1p1d-gpu.yaml, KV sized from free memory);
# E2E_RUN_ARGS: more arguments for `tandem run` (e.g. "--quantization fp8"); E2E_KV_BLOCKS: its
# --num-kv-blocks (2048); E2E_GOLDEN_ARGS: more for scripts/gpu/e2e_golden.py (--repeat-long: with a
# small pool and "--kv-offload-host-gib 1" the long prompts come back from the host tier, and in
# disagg mode their remote prefills are admitted into blocks just evicted). Logs go to $OUT. Never
# touches clocks, power or modes.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# CARRY, the NCCL settings; find_cublas, wait_health, setup_tiny, setup_8b
. "$ROOT/scripts/gpu/e2e_common.sh"

pack() {
  set -e
  local build=${1:-build-cuda}
  grep -qxF '/.device-carry/' .git/info/exclude 2>/dev/null || echo '/.device-carry/' >> .git/info/exclude
  [ -x "$build/tandem" ] || { echo "no $build/tandem: build it with -DTANDEM_CUDA=ON first"; exit 1; }
  rm -rf "$CARRY" && mkdir -p "$CARRY/lib"
  strip -o "$CARRY/tandem" "$build/tandem"
  # Every shared library except the C/C++ runtime and the CUDA libraries the device has (its own
  # CUDA 13.0 toolkit / driver): gRPC, Abseil, re2, c-ares, spdlog, fmt, yaml-cpp, UCX ... are
  # missing there or in other versions. UCX and libfabric are opened at run time, not in ldd's list:
  # scripts/gpu/runtime_libs.sh adds them.
  for lib in $(scripts/gpu/runtime_libs.sh "$build/tandem"); do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
      libcuda.so.*|libcublas*.so.*|libcudart.so.*|libnvidia*) ;;
      *) cp -L "$lib" "$CARRY/lib/" ;;
    esac
  done
  tar -C "$CARRY" -cf - tandem lib | xz -T2 -6 > "$CARRY/tandem-e2e.tar.xz"
  rm -rf "$CARRY/tandem" "$CARRY/lib"
  mkdir -p "$CARRY/golden"
  cp "$ROOT"/tests/golden/tiny-qwen3.json "$ROOT"/tests/golden/tiny-qwen3-long.json "$CARRY/golden/"
  echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD) ($build)" > "$CARRY/BUILD_INFO"
  du -sh "$CARRY"; ls -la "$CARRY"
}

device() {
  local out=${OUT:-/tmp/gpu-e2e-out} work=/tmp/tandem-e2e
  mkdir -p "$out" "$work"
  cat "$CARRY/BUILD_INFO"
  xz -dc "$CARRY/tandem-e2e.tar.xz" | tar -C "$work" -xf -
  export LD_LIBRARY_PATH="$work/lib:${LD_LIBRARY_PATH:-}"
  find_cublas
  if ! "$work/tandem" --help > /dev/null 2> "$out/loader.txt"; then
    echo "tandem does not start here:"; cat "$out/loader.txt"; ldd "$work/tandem" | grep 'not found'
    return 1
  fi
  mkdir -p "$work/models" && tar -C "$work/models" -xJf models/tiny-qwen3.tar.xz
  local model
  model=$(dirname "$(find "$work/models" -name config.json | head -1)")
  local rc=0
  for mode in ${E2E_MODES:-agg disagg serve}; do
    local port=18000 log="$out/run-$mode.log" extra=()
    [ "$mode" = disagg ] && extra=(--max-local-prefill-tokens 0 --log-dir "$out/run-$mode")
    if [ "$mode" = serve ]; then
      # The one-GPU graph: KV pools sized from free memory (--gpu-memory-utilization 0.45 each).
      echo "== tandem serve deploy/disagg-1p1d-gpu.yaml"
      TANDEM_DISCOVERY_DIR="$work/discovery-$mode" "$work/tandem" serve deploy/disagg-1p1d-gpu.yaml \
        --model "$model" --port $port --namespace e2e-serve --log-dir "$out/run-$mode" > "$log" 2>&1 &
    else
      echo "== tandem run --mode $mode --device cuda:0"
      # shellcheck disable=SC2086
      TANDEM_DISCOVERY_DIR="$work/discovery-$mode" "$work/tandem" run --mode "$mode" --device cuda:0 \
        --model "$model" --port $port --num-kv-blocks "${E2E_KV_BLOCKS:-2048}" "${extra[@]}" ${E2E_RUN_ARGS:-} > "$log" 2>&1 &
    fi
    local pid=$!
    # shellcheck disable=SC2086
    python3 scripts/gpu/e2e_golden.py --base "http://127.0.0.1:$port" --mode "$mode" \
      --golden "$CARRY/golden" --out "$out/e2e-$mode.json" ${E2E_GOLDEN_ARGS:-} || rc=1
    # The decode worker logs its KV transfer totals every 5 s (--stats-interval-s): wait for the
    # line that counts every transfer of the run (bytes per transfer: FP8 KV against bf16).
    [ "$mode" = disagg ] && sleep 6
    kill -TERM "$pid" 2>/dev/null; sleep 2; kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    grep -h "KV transfer backend\|KV Transfer metrics\|External prefix\|KV cache\|weights" "$log" | tail -8
    echo "remote prefills: $(grep -c 'remote prefill:' "$log"), failed: $(grep -c 'remote prefill failed' "$log")"
  done
  echo "== summary"
  python3 scripts/gpu/e2e_golden.py --summarize "$out"/e2e-*.json
  if [ -e "$out/e2e-agg.json" ] && [ -e "$out/e2e-disagg.json" ]; then
    # Disaggregated output against aggregated (the same kernels on both sides: equal text expected,
    # also where both differ from HF's golden, e.g. with E2E_RUN_ARGS="--quantization fp8").
    python3 -c 'import json, sys
a, d = (json.load(open(p))["prompts"] for p in sys.argv[1:3])
same = sum(x["text"] == y["text"] for x, y in zip(a, d))
print("disagg text equals agg text: %d of %d prompts" % (same, len(a)))' "$out/e2e-agg.json" "$out/e2e-disagg.json"
  fi
  return $rc
}

# Issue 7: TTFT of 2k-token prompts, aggregated on cuda:0 vs disaggregated under GRAPH (default
# deploy/disagg-1p1d-2gpu.yaml: prefill cuda:0, decode cuda:1; ttft1gpu: deploy/disagg-1p1d-gpu.yaml,
# both on cuda:0), KV moved GPU to GPU (cuda_ipc), random Qwen3-8B weights
# (scripts/gpu/peer_check.py --make-only) served with the real Qwen3 tokenizer of the bundled
# model; greedy outputs compared request by request (scripts/gpu/ttft_compare.py). A third run
# repeats the disaggregated one with --kv-transfer-layerwise false (one write after the prefill).
ttft() {
  local graph=$1 tag=$2
  local out=${OUT:-/tmp/gpu-e2e-out} work=/tmp/tandem-e2e
  local ckdir=/dev/shm/tandem-ttft
  setup_8b "$out" "$work" "$ckdir" "$ckdir/qwen3-8b" || return 1
  local ckpt=$CKPT
  local bench=(--endpoint completions --tokenizer "$ckpt" --dataset synthetic --input-len "${TTFT_INPUT_LEN:-2048}"
    --output-len 16 --prefix-len 0 --concurrency 1 --num-requests "${TTFT_REQUESTS:-12}" --warmup 4 --seed 7)
  local rc=0 pid
  echo "== agg: tandem run --device cuda:0 (random Qwen3-8B)"
  TANDEM_DISCOVERY_DIR="$work/discovery-ttft-agg" "$work/tandem" run --mode agg --device cuda:0 \
    --model "$ckpt" --port 18000 > "$out/ttft-agg.log" 2>&1 &
  pid=$!
  if wait_health 18000 120; then
    "$work/tandem" bench --url http://127.0.0.1:18000 "${bench[@]}" --output-json "$out/ttft-agg.json" || rc=1
  else rc=1; tail -20 "$out/ttft-agg.log"; fi
  kill -TERM "$pid" 2>/dev/null; sleep 2; kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  # The graph again with the prefill worker sending everything after the prefill.
  sed 's/^  - mode: prefill$/  - mode: prefill\n    args: [--kv-transfer-layerwise, "false"]/' "$graph" > "$work/whole.yaml"
  # TTFT_PARAM_RUN=BACKEND.KEY=VALUE: one more disaggregated run, the prefill worker with that
  # --kv-transfer-param (e.g. cuda_ipc.sm_ctas=0: the copy engines instead of the copy kernel).
  local runs=("$tag" "$tag-whole")
  if [ -n "${TTFT_PARAM_RUN:-}" ]; then
    sed "s/^  - mode: prefill\$/  - mode: prefill\n    args: [--kv-transfer-param, \"$TTFT_PARAM_RUN\"]/" "$graph" > "$work/param.yaml"
    runs+=("$tag-param")
  fi
  local run port=18001
  for run in "${runs[@]}"; do
    local g=$graph
    [ "$run" = "$tag-whole" ] && g=$work/whole.yaml
    [ "$run" = "$tag-param" ] && g=$work/param.yaml
    echo "== disagg ($run): tandem serve $g"
    TANDEM_DISCOVERY_DIR="$work/discovery-ttft-$run" "$work/tandem" serve "$g" \
      --model "$ckpt" --port $port --namespace "e2e-$run" --log-dir "$out/run-$run" > "$out/ttft-$run.log" 2>&1 &
    pid=$!
    if wait_health $port 180; then
      sleep 3  # decode's discovery watch sees the prefill worker
      "$work/tandem" bench --url http://127.0.0.1:$port "${bench[@]}" --output-json "$out/ttft-$run.json" || rc=1
    else rc=1; tail -20 "$out/ttft-$run.log"; fi
    kill -TERM "$pid" 2>/dev/null; sleep 3; kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    grep -rh "KV transfer backend\|KV Transfer metrics" "$out/ttft-$run.log" "$out/run-$run" 2>/dev/null | tail -3
    echo "remote prefills: $(grep -rh 'remote prefill:' "$out/ttft-$run.log" "$out/run-$run" 2>/dev/null | wc -l)," \
      "failed: $(grep -rh 'remote prefill failed' "$out/ttft-$run.log" "$out/run-$run" 2>/dev/null | wc -l)"
    port=$((port + 1))
  done
  [ -n "${TTFT_PARAM_RUN:-}" ] && echo "($tag-param: prefill with --kv-transfer-param $TTFT_PARAM_RUN)"
  for run in "${runs[@]}"; do
    echo "== summary: TTFT, agg on cuda:0 vs disagg $run"
    python3 scripts/gpu/ttft_compare.py "$out/ttft-agg.json" "$out/ttft-$run.json" --json "$out/ttft-compare-$run.json" || rc=1
  done
  [ "${GPU_E2E_KEEP:-0}" = 1 ] || rm -rf "$ckdir"
  return $rc
}

# Issue 19: the seed lab's L40S (48 GB) rehearsed on the H200: the random Qwen3-8B checkpoint
# served by `tandem run` with --gpu-memory-utilization set so that the workers' share is
# L40S_BUDGET_GIB (default 44) of this GPU's memory and the kernels planned for 99 KiB of shared
# memory per block (L40S_SMEM_KIB): aggregated, then disaggregated (1 prefill + 1 decode, half the
# budget each, every prompt prefilled remotely; L40S_MODES picks), each sent every golden prompt
# (the texts cannot equal HF's tiny-model ones: random weights; what counts is that every request
# is answered). Prints the KV pool each worker sized and the GPU memory the processes held.
l40s() {
  local out=${OUT:-/tmp/gpu-e2e-out} work=/tmp/tandem-e2e ckdir=/dev/shm/tandem-ttft
  # L40S_CKPT: a random Qwen3-8B checkpoint already made (scripts/gpu-check.sh with GPU_CHECK_KEEP=1
  # leaves one in /dev/shm/tandem-peer/qwen3-8b).
  setup_8b "$out" "$work" "$ckdir" "${L40S_CKPT:-$ckdir/qwen3-8b}" || return 1
  local ckpt=$CKPT
  local total_mib util budget=${L40S_BUDGET_GIB:-44} rc=0 mode
  total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  util=$(python3 -c "print(f'{$budget * 1024 / $total_mib:.4f}')")
  # The kernels an L40S takes (99 KiB of shared memory per block: device_limits.h).
  export TANDEM_CUDA_SMEM_LIMIT_KIB=${L40S_SMEM_KIB:-99}
  echo "== L40S rehearsal: ${budget} GiB of ${total_mib} MiB: --gpu-memory-utilization $util" \
    "(disagg: half each), TANDEM_CUDA_SMEM_LIMIT_KIB=$TANDEM_CUDA_SMEM_LIMIT_KIB"
  for mode in ${L40S_MODES:-agg disagg}; do
    local port=18100 log="$out/l40s-$mode.log" extra=() peak=0 used each=$util
    if [ "$mode" = disagg ]; then
      # Both workers on the one card: the budget is theirs together.
      each=$(python3 -c "print(f'{$util / 2:.4f}')")
      extra=(--max-local-prefill-tokens 0 --log-dir "$out/l40s-$mode")
    fi
    TANDEM_DISCOVERY_DIR="$work/discovery-l40s-$mode" "$work/tandem" run --mode "$mode" \
      --device cuda:0 --model "$ckpt" --port $port --gpu-memory-utilization "$each" \
      --max-model-len 8192 "${extra[@]}" > "$log" 2>&1 &
    local pid=$!
    python3 scripts/gpu/e2e_golden.py --base "http://127.0.0.1:$port" --mode "l40s-$mode-${budget}GiB" \
      --golden "$CARRY/golden" --out "$out/e2e-l40s-$mode.json" &
    local client=$!
    while kill -0 "$client" 2>/dev/null; do
      used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
      [ "${used:-0}" -gt "$peak" ] && peak=$used
      sleep 0.5
    done
    wait "$client" || rc=1
    kill -TERM "$pid" 2>/dev/null; sleep 2; kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    grep -rh "cuda:0: \|kernels on cuda\|KV cache from device memory\|weights: \|do not fit" "$log" \
      "$out/l40s-$mode" 2>/dev/null | cut -c1-400 | head -14
    # The budget covers what the workers allocate; each process's CUDA context comes on top, as
    # on the real card, whose 46068 MiB (cudaMemGetInfo's total on an L40S) is the hard limit.
    echo "l40s-$mode: peak GPU memory used (nvidia-smi, whole device) ${peak} MiB; budget" \
      "$((budget * 1024)) MiB; an L40S has 46068 MiB"
    [ "$peak" -le 46068 ] || { echo "l40s-$mode: MORE THAN AN L40S HAS"; rc=1; }
  done
  echo "== summary (random weights: 'equal' cannot hold; every prompt must be answered)"
  python3 scripts/gpu/e2e_golden.py --summarize "$out"/e2e-l40s-*.json
  [ "${GPU_E2E_KEEP:-0}" = 1 ] || rm -rf "$ckdir"
  return $rc
}

# Issue 24: structured outputs on the GPU. `tandem run --mode agg --device cuda:0` on the bundled
# tiny model, every schema of tests/grammar/schemas.json x STRUCTURED_SEEDS (2)
# (scripts/gpu/structured_e2e.py suite: $OUT/structured-tiny.jsonl and -stop.jsonl, validated on
# the dev machine with tests/tools/validate_json.py and validate_ajv.mjs); then on the random
# Qwen3-8B the decode throughput at batch 64 (STRUCTURED_OUTPUT_LEN, 128 tokens each) with and
# without a constraint. STRUCTURED_MODELS="tiny 8b" picks (in that order); STRUCTURED_MAX_TOKENS
# (512) bounds the suite's outputs.
structured() {
  local out=${OUT:-/tmp/gpu-e2e-out} work=/tmp/tandem-e2e ckdir=/dev/shm/tandem-structured
  if [[ " ${STRUCTURED_MODELS:-tiny 8b} " == *" 8b "* ]]; then
    setup_8b "$out" "$work" "$ckdir" "$ckdir/qwen3-8b" || return 1
  else
    setup_tiny "$out" "$work"
  fi
  local rc=0 pid model port=18000 tag
  for tag in ${STRUCTURED_MODELS:-tiny 8b}; do
    model=$TINY; [ "$tag" = 8b ] && model=$CKPT
    echo "== structured ($tag): tandem run --mode agg --device cuda:0"
    TANDEM_DISCOVERY_DIR="$work/discovery-structured-$tag" "$work/tandem" run --mode agg --device cuda:0 \
      --model "$model" --port $port > "$out/structured-$tag.log" 2>&1 &
    pid=$!
    if wait_health $port 180; then
      if [ "$tag" = tiny ]; then
        python3 scripts/gpu/structured_e2e.py suite --base "http://127.0.0.1:$port" \
          --seeds "${STRUCTURED_SEEDS:-2}" --max-tokens "${STRUCTURED_MAX_TOKENS:-512}" \
          --out "$out/structured-$tag.jsonl" || rc=1
      else
        python3 scripts/gpu/structured_e2e.py throughput --base "http://127.0.0.1:$port" \
          --batch 64 --output-len "${STRUCTURED_OUTPUT_LEN:-128}" || rc=1
      fi
    else rc=1; tail -20 "$out/structured-$tag.log"; fi
    kill -TERM "$pid" 2>/dev/null; sleep 2; kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    port=$((port + 1))
  done
  [ "${GPU_E2E_KEEP:-0}" = 1 ] || rm -rf "$ckdir"
  return $rc
}

# The KV host tier (issue 26) on the random Qwen3-8B: the pinned host-to-device bandwidth (torch,
# one 1 GiB copy, best of 5), then scripts/bench-offload.sh with this tandem on cuda:0 (the tier
# off vs on, same multi-turn workload; ONBOARD_MODES="compute land" adds the tier with the other
# ways to onboard, ON_VARIANTS other settings), and a table last: each run's returning turns, and
# the tier's onboard and offload bandwidths against the pinned ones. The on run copies on a side
# stream, layer by layer, each copy timed by device events (the TTFTs as served). A run with
# the copies on the compute stream times them only with OFFLOAD_TIME_ONBOARD=1
# (TANDEM_KV_OFFLOAD_TIME_ONBOARD: the step waits for them).
offload() {
  local out=${OUT:-/tmp/gpu-e2e-out} work=/tmp/tandem-e2e ckdir=/dev/shm/tandem-offload
  setup_8b "$out" "$work" "$ckdir" "$ckdir/qwen3-8b" || return 1
  local h2d d2h
  # Both directions in one process: "<h2d> <d2h>" GB/s.
  read -r h2d d2h < <(python3 -c '
import torch, time
n = 1 << 30
h = torch.empty(n, dtype=torch.uint8).pin_memory(); d = torch.empty(n, dtype=torch.uint8, device="cuda")
def best(dst, src):
    b = 0
    for _ in range(5):
        torch.cuda.synchronize(); t = time.perf_counter(); dst.copy_(src, non_blocking=True); torch.cuda.synchronize()
        b = max(b, n / (time.perf_counter() - t) / 1e9)
    return b
print(f"{best(d, h):.2f} {best(h, d):.2f}")')
  echo "pinned host-to-device (torch, 1 GiB, best of 5): $h2d GB/s; device-to-host $d2h GB/s"
  mkdir -p "$work/bench-build" && ln -sf "$work/tandem" "$work/bench-build/tandem"
  OUT="$out/offload" MODEL=$CKPT DEVICE=cuda:0 TOKENIZER=$TINY NUM_KV_BLOCKS=${OFFLOAD_KV_BLOCKS:-1024} \
    OFFLOAD_GIB=${OFFLOAD_GIB:-32} TANDEM_KV_OFFLOAD_TIME_ONBOARD=${OFFLOAD_TIME_ONBOARD:-0} \
    BENCH_ARGS=${OFFLOAD_BENCH_ARGS:-"--dataset synthetic --num-turns 6 --input-len 1000 --output-len 32 \
      --concurrency 8 --num-requests 192 --warmup 0 --seed 7"} \
    bash scripts/bench-offload.sh "$work/bench-build" || { [ "${GPU_E2E_KEEP:-0}" = 1 ] || rm -rf "$ckdir"; return 1; }
  if [ "${OFFLOAD_TIME_ONBOARD:-0}" = 0 ] && ! grep -q "on a side stream" "$out/offload/server-on.log"; then
    echo "onboard: not timed (OFFLOAD_TIME_ONBOARD=0)"; [ "${GPU_E2E_KEEP:-0}" = 1 ] || rm -rf "$ckdir"; return 0
  fi
  # The table last: each run's returning turns, and each tier run's copies (device-timed on a side
  # stream) against the pinned bandwidths.
  python3 - "$out/offload" "$h2d" <<'PY'
import glob, os, re, sys
out, h2d = sys.argv[1], float(sys.argv[2])
print(f"| run | returning TTFT mean ms | p50 ms | req/s | onboard GB | GB/s | % of H2D {h2d:.1f} | offload GB |")
print("|---|---|---|---|---|---|---|---|")
runs = sorted(glob.glob(os.path.join(out, "bench-*.txt")), key=os.path.getmtime)
for path in runs:
    mode = os.path.basename(path)[len("bench-"):-len(".txt")]
    text = open(path).read()
    r = re.search(r"returning turns mean ([0-9.]+) ms, p50 ([0-9.]+) ms", text)
    row = [l for l in text.splitlines() if l.startswith("| c=")]
    rps = row[0].split("|")[4].strip() if row else "?"
    cells = [mode, r.group(1) if r else "?", r.group(2) if r else "?", rps]
    mpath = os.path.join(out, f"metrics-{mode}.txt")
    m = dict(l.split()[:2] for l in open(mpath) if l.strip()) if os.path.exists(mpath) else {}
    log = os.path.join(out, f"server-{mode}.log")
    b = float(m.get("tandem_kv_onboarded_bytes_total", 0))
    t = float(m.get("tandem_kv_onboard_seconds_total", 0))
    bw = b / t / 1e9 if t > 0 else 0
    # Device-timed only on a side stream (else the seconds are the enqueueing's, or the step's).
    timed = os.path.exists(log) and "side stream" in open(log, errors="replace").read()
    cells += [f"{b / 1e9:.2f}"] + ([f"{bw:.1f}", f"{100 * bw / h2d:.0f}%"] if timed else ["-", "-"]) if b > 0 else ["-", "-", "-"]
    # Evicted blocks out: bytes only (the few-block copies ahead of a step are not device-timed).
    cells.append(f"{float(m.get('tandem_kv_offloaded_bytes_total', 0)) / 1e9:.2f}")
    print("| " + " | ".join(cells) + " |")
PY
  [ "${GPU_E2E_KEEP:-0}" = 1 ] || rm -rf "$ckdir"
}

case "${1:-device}" in
  pack) shift; pack "$@" ;;
  offload) offload ;;
  structured) structured ;;
  device) device ;;
  ttft2gpu) ttft deploy/disagg-1p1d-2gpu.yaml 2gpu ;;
  ttft1gpu) ttft deploy/disagg-1p1d-gpu.yaml 1gpu ;;
  l40s) l40s ;;
  *) echo "usage: $0 [pack [BUILD_DIR]|device|ttft1gpu|ttft2gpu|l40s|structured]"; exit 2 ;;
esac
