#!/usr/bin/env bash
# The KV host tier off vs on, side by side in one run (issue 26): `tandem run` twice with the same
# small KV pool, --kv-offload-host-gib 0 and then OFFLOAD_GIB, and the same multi-turn chat
# workload (`tandem bench`, same seed) against each. Each turn resends the conversation so far;
# the sessions in flight together hold more history than the pool, so without the tier a returning
# turn finds its history evicted and prefills it again, and with it the evicted blocks come back
# from host memory. Prints each run's table (prefix hit % = usage cached_tokens / prompt tokens;
# TTFT of first and returning turns), `tandem bench compare` (B = on over A = off) and the server's
# kv offload metrics. Reports in $OUT. CPU and the bundled tiny model unless MODEL / DEVICE are set;
# MODE agg (default: one process) or disagg (tandem run's prefill + decode workers: the decode
# worker's tier serves the returning turns); TOKENIZER: the model directory whose tokenizer.json
# the bench builds prompts with (default: tandem bench's, the bundled model).
# DISK_GIB (default unset): a third run, the host tier plus a disk tier of that size in $OUT/kv-disk
# (started empty), compared with the host tier alone; give OFFLOAD_GIB a host tier smaller than the
# workload's history so that blocks must come back from the disk.
# REF_KV_BLOCKS (default unset): one more run, "ref", the tier off with a pool of that many blocks,
# large enough that nothing is evicted: every returning turn reuses the K/V its history first wrote,
# as the on run's onboarded blocks do, so with one request at a time (--concurrency 1, and
# --sessions-per-client N for evictions) the on run's greedy replies must equal ref's exactly, on a
# GPU too (the off run recomputes histories, whose K/V round differently).
# Usage: scripts/bench-offload.sh [build dir]   (env: OUT, MODEL, DEVICE, MODE, TOKENIZER,
# NUM_KV_BLOCKS, OFFLOAD_GIB, DISK_GIB, BENCH_ARGS, CONTROL, REF_KV_BLOCKS, ONBOARD_MODES, ON_VARIANTS). Last: how many greedy
# replies of each run equal the off run's (and the ref run's).
set -euo pipefail
BUILD=${1:-build}
T=$(realpath "$BUILD/tandem")
OUT=${OUT:-$BUILD/bench-offload}
# 64 blocks of 16 tokens = 1024 tokens: one session's history (6 turns of 120 + 24 tokens, ~870)
# fits, the 4 sessions in flight do not.
NUM_KV_BLOCKS=${NUM_KV_BLOCKS:-64}
OFFLOAD_GIB=${OFFLOAD_GIB:-1}
BENCH_ARGS=${BENCH_ARGS:-"--dataset synthetic --num-turns 6 --input-len 120 --output-len 24 \
  --concurrency 4 --num-requests 96 --warmup 0 --seed 7"}
SERVER_ARGS=(--mode "${MODE:-agg}")
CLIENT_ARGS=()
[ -n "${TOKENIZER:-}" ] && CLIENT_ARGS+=(--tokenizer "$TOKENIZER")
[ -n "${MODEL:-}" ] && SERVER_ARGS+=(--model "$MODEL")
[ -n "${DEVICE:-}" ] && SERVER_ARGS+=(--device "$DEVICE")
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT

MODES="off on"
[ -n "${DISK_GIB:-}" ] && MODES="off on disk"
# CONTROL=1: the off run twice (off, off-again): how many replies two runs without the tier share
# is the baseline for the on run's count (batched GPU steps need not repeat their roundings).
[ "${CONTROL:-0}" = 1 ] && MODES="off off-again ${MODES#off }"
[ -n "${REF_KV_BLOCKS:-}" ] && MODES="$MODES ref"
# ONBOARD_MODES="compute land" (default unset): one more run per mode, "on-<mode>", the tier on with
# TANDEM_KV_ONBOARD=<mode> (a GPU runner's onboarding: compute = on the compute stream ahead of the
# step, land = on a side stream with the requests waiting until it landed; the on run has the
# default, layer = on a side stream, each layer of the step waiting for its own copies).
declare -A RUN_ENV=()
for m in ${ONBOARD_MODES:-}; do MODES="$MODES on-$m"; RUN_ENV[on-$m]="TANDEM_KV_ONBOARD=$m"; done
# ON_VARIANTS="engines:TANDEM_KV_COPY=engines evict-ahead:TANDEM_KV_EVICT_LAYERED_MIN=0" (default
# unset): one more run per variant, "on-<name>", the tier on with those environment variables
# (comma-separated assignments after the colon).
for v in ${ON_VARIANTS:-}; do MODES="$MODES on-${v%%:*}"; RUN_ENV[on-${v%%:*}]="${v#*:}"; done
gib_of() { case $1 in off|off-again|ref) echo 0 ;; *) echo "$OFFLOAD_GIB" ;; esac; }
blocks_of() { [ "$1" = ref ] && echo "$REF_KV_BLOCKS" || echo "$NUM_KV_BLOCKS"; }
for mode in $MODES; do
  gib=$(gib_of "$mode")
  extra=()
  if [ "$mode" = disk ]; then
    rm -rf "$OUT/kv-disk"
    extra=(--kv-offload-disk-dir "$OUT/kv-disk" --kv-offload-disk-gib "$DISK_GIB")
  fi
  onboard=()
  [ -n "${RUN_ENV[$mode]:-}" ] && IFS=, read -r -a onboard <<< "${RUN_ENV[$mode]}"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  env "${onboard[@]}" "$T" run --host 127.0.0.1 --port "$port" "${SERVER_ARGS[@]}" --num-kv-blocks "$(blocks_of "$mode")" \
    --kv-offload-host-gib "$gib" \
    "${extra[@]}" > "$OUT/server-$mode.log" 2>&1 &
  PID=$!
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && break
    kill -0 "$PID" 2>/dev/null || { echo "tandem run exited:"; tail -20 "$OUT/server-$mode.log"; exit 1; }
    sleep 0.2
  done
  # shellcheck disable=SC2086
  "$T" bench --url "http://127.0.0.1:$port" $BENCH_ARGS "${CLIENT_ARGS[@]}" --no-progress \
    --output-json "$OUT/bench-$mode.json" > "$OUT/bench-$mode.txt" 2>&1
  curl -s "http://127.0.0.1:$port/metrics" | grep -E "^tandem_(kv_offload|kv_offloaded|kv_onboard|prefix_cache)" \
    > "$OUT/metrics-$mode.txt" || true
  kill "$PID"
  wait "$PID" 2>/dev/null || true
  PID=""
done

for mode in $MODES; do
  echo "== host tier $mode (--mode ${MODE:-agg} --num-kv-blocks $(blocks_of "$mode"), --kv-offload-host-gib $(gib_of "$mode")$([ $mode = disk ] && echo ", --kv-offload-disk-gib $DISK_GIB"))"
  grep -E "^\||TTFT first" "$OUT/bench-$mode.txt"
  cat "$OUT/metrics-$mode.txt"
done
echo "== compare: B (host tier on) over A (off)"
"$T" bench compare "$OUT/bench-off.json" "$OUT/bench-on.json"
for mode in $MODES; do
  case $mode in on-*) ;; *) continue ;; esac
  echo "== compare: B ($mode: ${RUN_ENV[$mode]}) over A (the on run, the defaults)"
  "$T" bench compare "$OUT/bench-on.json" "$OUT/bench-$mode.json"
done
if [ -n "${DISK_GIB:-}" ]; then
  echo "== compare: B (host + disk tier) over A (host tier alone)"
  "$T" bench compare "$OUT/bench-on.json" "$OUT/bench-disk.json"
fi
# Greedy replies of each run against the off run's, by (conversation, turn): a returning turn whose
# history came back from a tier must say what it says when the history was prefilled again (equal
# but near-ties: a recomputed history's K/V round differently from the K/V its turn first wrote).
echo "== replies against the off run's (greedy, same seed)"
python3 - "$OUT" $MODES <<'PY'
import json, os, sys
out, modes = sys.argv[1], sys.argv[2:]
def texts(mode):
    run = json.load(open(os.path.join(out, f"bench-{mode}.json")))["runs"][0]
    return {(r["item_id"], r["turn"]): r["output_text"] for r in run["requests"] if r["error"] is None}
def compare(mode, against):
    a, t = texts(against), texts(mode)
    both = sorted(set(a) & set(t))
    diff = [k for k in both if a[k] != t[k]]
    first = min(diff, key=lambda k: (k[1], k[0])) if diff else None
    print(f"{mode}: {len(both) - len(diff)} of {len(both)} replies equal the {against} run's"
          + (f" (earliest differing turn {first[1]} of conversation {first[0]})" if first else ""))
for mode in modes[1:]:
    compare(mode, modes[0])
if "ref" in modes:
    for mode in modes:
        if mode not in ("ref", "off", "off-again"):
            compare(mode, "ref")
PY
