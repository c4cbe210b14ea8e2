#!/usr/bin/env bash
# KV-aware routing vs round-robin over 4 decode workers, side by side in one run (issue 8):
#   the same system twice: tandem frontend --router-mode kv | round-robin, 1 prefill worker and
#   4 decode workers (CPU, the bundled tiny model unless MODEL is set), embedded discovery;
#   the same multi-turn chat workload (`tandem bench`, same seed) against each, one after the other.
# Each turn resends the conversation so far, so a conversation's later turns find its history in
# the prefix cache of the decode worker that served the earlier turns, if the router sends them
# there. Prints each run's table (prefix hit % = usage.prompt_tokens_details.cached_tokens / prompt
# tokens, i.e. the decode workers' own prefix cache), `tandem bench compare` (B = round-robin over
# A = kv), the frontend's router metrics and each decode worker's last KV transfer line (remote
# prefills: the prompts whose uncached part exceeded --max-local-prefill-tokens). Reports in $OUT.
# Usage: scripts/bench-router.sh [build dir]   (env: OUT, MODEL, BENCH_ARGS, NUM_DECODE)
set -euo pipefail
BUILD=${1:-build}
T=$(realpath "$BUILD/tandem")
OUT=${OUT:-$BUILD/bench-router}
NUM_DECODE=${NUM_DECODE:-4}
# 16 conversations of 6 turns, 300 new prompt tokens and 8 output tokens a turn: histories grow to
# about 1.8k tokens, so where a turn lands decides whether its history is prefilled again (locally,
# or remotely past the decode worker's --max-local-prefill-tokens, 1000 by default).
BENCH_ARGS=${BENCH_ARGS:-"--dataset synthetic --num-turns 6 --input-len 300 --output-len 8 \
  --concurrency 4 --num-requests 96 --warmup 0"}
MODEL_ARGS=()
[ -n "${MODEL:-}" ] && MODEL_ARGS=(--model "$MODEL")
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_workers() {  # port, number of workers the frontend must see
  for _ in $(seq 1 600); do
    local n
    n=$(curl -sf "http://127.0.0.1:$1/metrics" | awk '$1=="tandem_workers"{print $2}' || true)
    [ "${n:-0}" = "$2" ] && return 0
    sleep 0.2
  done
  echo "the frontend on :$1 never saw $2 workers" >&2; return 1
}

run_router() {  # router mode
  local mode=$1 port ns="bench-router-$1"
  port=$(free_port)
  export TANDEM_DISCOVERY_DIR="$OUT/discovery-$mode"
  rm -rf "$TANDEM_DISCOVERY_DIR"
  PIDS=()
  $T worker --mode prefill --namespace "$ns" --port 0 "${MODEL_ARGS[@]}" \
    > "$OUT/$mode-prefill.log" 2>&1 &
  PIDS+=($!)
  for i in $(seq 0 $((NUM_DECODE - 1))); do
    $T worker --mode decode --namespace "$ns" --port 0 --metrics-port 0 --stats-interval-s 5 \
      "${MODEL_ARGS[@]}" > "$OUT/$mode-decode-$i.log" 2>&1 &
    PIDS+=($!)
  done
  $T frontend --namespace "$ns" --port "$port" --router-mode "$mode" "${MODEL_ARGS[@]}" \
    > "$OUT/$mode-frontend.log" 2>&1 &
  PIDS+=($!)
  wait_workers "$port" "$NUM_DECODE"
  sleep 1  # the decode workers find the prefill worker; the router its workers' events
  # shellcheck disable=SC2086
  $T bench --url "http://127.0.0.1:$port" --seed 7 $BENCH_ARGS --no-progress \
    --output-json "$OUT/$mode.json" > "$OUT/$mode.txt"
  curl -sf "http://127.0.0.1:$port/metrics" | grep '^tandem_router' > "$OUT/$mode-router-metrics.txt" || true
  cleanup
  PIDS=()
}

run_router kv
run_router round-robin

echo "== workload: $BENCH_ARGS"
for mode in kv round-robin; do
  echo "== router $mode: 1 prefill + $NUM_DECODE decode workers"
  cat "$OUT/$mode.txt"
  grep -v '_bucket' "$OUT/$mode-router-metrics.txt" || true
  for i in $(seq 0 $((NUM_DECODE - 1))); do
    printf 'decode worker %d: ' "$i"
    grep -h 'KV Transfer metrics' "$OUT/$mode-decode-$i.log" | tail -1 | sed 's/.*KV Transfer/KV Transfer/' || echo
  done
done
echo "== A = kv, B = round-robin"
$T bench compare "$OUT/kv.json" "$OUT/round-robin.json"
