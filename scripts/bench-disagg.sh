#!/usr/bin/env bash
# Aggregated vs disaggregated serving on this machine, side by side in one run (issue 5):
#   agg:    tandem frontend + 1 worker --mode agg
#   disagg: tandem frontend + 1 worker --mode prefill + 1 worker --mode decode
#           (--max-local-prefill-tokens $MAX_LOCAL, default 0: every prompt is prefilled remotely)
# For each topology, `tandem bench` runs a short-prompt and a long-prompt workload (same seeds);
# then `tandem bench compare` prints B/A (B = disagg) per metric. Reports land in $OUT.
# Usage: scripts/bench-disagg.sh [build dir]   (env: OUT, MAX_LOCAL, SHORT_*, LONG_*)
set -euo pipefail
BUILD=${1:-build}
T=$(realpath "$BUILD/tandem")
OUT=${OUT:-$BUILD/bench-disagg}
MAX_LOCAL=${MAX_LOCAL:-0}
SHORT_ARGS=${SHORT_ARGS:-"--input-len 64 --output-len 64 --concurrency 4 --num-requests 32 --warmup 4"}
LONG_ARGS=${LONG_ARGS:-"--input-len 2000 --output-len 32 --concurrency 2 --num-requests 10 --warmup 2"}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
export TANDEM_DISCOVERY_DIR="$OUT/discovery"
rm -rf "$TANDEM_DISCOVERY_DIR"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_health() {
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0
    sleep 0.2
  done
  echo "no healthy server on :$1" >&2; return 1
}

run_topology() {  # name, then the worker command lines (one string each)
  local name=$1; shift
  local port; port=$(free_port)
  PIDS=()
  for w in "$@"; do
    # shellcheck disable=SC2086
    $T worker $w --namespace "bench-$name" --port 0 > "$OUT/$name-worker-${#PIDS[@]}.log" 2>&1 &
    PIDS+=($!)
  done
  $T frontend --namespace "bench-$name" --port "$port" > "$OUT/$name-frontend.log" 2>&1 &
  PIDS+=($!)
  wait_health "$port"
  sleep 1  # every worker registered (the decode worker finds its prefill worker)
  for load in short long; do
    local args=SHORT_ARGS; [ $load = long ] && args=LONG_ARGS
    # shellcheck disable=SC2086
    $T bench --url "http://127.0.0.1:$port" --seed 7 ${!args} --no-progress \
      --output-json "$OUT/$name-$load.json" > "$OUT/$name-$load.txt"
  done
  cleanup
  PIDS=()
}

run_topology agg "--mode agg"
run_topology disagg "--mode prefill" "--mode decode --max-local-prefill-tokens $MAX_LOCAL --stats-interval-s 1"

for load in short long; do
  echo "== $load prompts: A = agg, B = disagg (1 prefill + 1 decode, max-local-prefill-tokens $MAX_LOCAL)"
  $T bench compare "$OUT/agg-$load.json" "$OUT/disagg-$load.json"
done
echo "== decode worker's last KV transfer lines"
grep -h 'KV Transfer metrics\|External prefix' "$OUT"/disagg-worker-1.log | tail -2
