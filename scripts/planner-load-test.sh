#!/usr/bin/env bash
# The SLA planner's load test (issue 27): on this machine's CPU with the bundled tiny model, one
# phased load from `tandem bench --phases` against two graphs served one after the other by
# `tandem serve`, each worker one engine thread (--threads 1) with an FP8 KV cache (a quarter of the
# fp32 bytes for the prefill worker to write into the decode worker's cache: with fp32, moving the
# 6 MB of a 1024-token prompt took longer than its prefill here):
#   planner  1 prefill + 1 decode to start; the planner (deploy/graph_planner.h) sizes each pool in
#            1..2 within a budget of 3 workers, from a profile `tandem profile --threads 1`
#            measures here first, every $INTERVAL s
#   fixed    1 prefill + 1 decode (deploy/disagg-1p1d.yaml's topology), nothing scales
# Phases (PHASES): long prompts and short outputs (one prefill worker overloaded), short prompts
# (prefilled on the decode worker) and long outputs (one decode worker overloaded), then a lull.
# Same seed, so both graphs get the same requests at the same times. Then a table per phase and
# graph (SLO met %, ok / failed, TTFT and ITL p50 / p99, replicas, scale events) and the issue's
# done-when checks (scripts/planner_load_table.py). Loopback only; file discovery and the embedded
# event plane (no etcd or NATS). Everything started is stopped on exit. About 7 minutes (more when
# a phase overloads both graphs: a backlog is served before the run ends).
#
# Usage: scripts/planner-load-test.sh [OUT]   (default /tmp/planner-load-test; env: BUILD, PHASES,
#        SLO_TTFT_MS, SLO_ITL_MS, INTERVAL, KV_DTYPE, SEED, PROFILE: a profile JSON to use instead of measuring)
# OUT gets: profile.json, <mode>.yaml, <mode>-serve.log, <mode>.json (every request, scrapes),
# <mode>.txt (bench's tables), <mode>-svg/ (ttft_over_time, itl_over_time, replicas_over_time .svg),
# table.md (the final table).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
T=$(realpath "$BUILD/tandem")
OUT=${1:-/tmp/planner-load-test}
SLO_TTFT_MS=${SLO_TTFT_MS:-500}
SLO_ITL_MS=${SLO_ITL_MS:-80}
INTERVAL=${INTERVAL:-10}
KV_DTYPE=${KV_DTYPE:-fp8}
# The default rates suit a 2-core x86 machine (AVX2) where `tandem profile --threads 1` prefills 1024
# tokens in ~310 ms and one decode worker serves ~4 requests/s of 128 tokens within the ITL target:
# long prompts at ~0.7 / (one prefill's time) overload one prefill worker but not two; long outputs
# above one decode worker's capacity but within two's. Elsewhere set PHASES to match.
PHASES=${PHASES:-"long-prompts:input=1024,output=4,rate=2.2,duration=60;long-outputs:input=32,output=128,rate=5,duration=80;lull:input=64,output=16,rate=0.2,duration=50"}
SEED=${SEED:-27}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
rm -rf "$OUT"/*-svg "$OUT"/discovery-*

SERVE_PID=""
stop_serve() {
  [ -n "$SERVE_PID" ] || return 0
  kill -TERM "$SERVE_PID" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$SERVE_PID" 2>/dev/null; then  # serve stops its workers on SIGTERM; past 30 s, its group
    kill -KILL -- "-$SERVE_PID" 2>/dev/null || true
  fi
  wait "$SERVE_PID" 2>/dev/null || true
  SERVE_PID=""
}
trap stop_serve EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

if [ -n "${PROFILE:-}" ]; then
  cp "$PROFILE" "$OUT/profile.json"
else
  echo "== tandem profile --threads 1 (this machine, now)"
  "$T" profile --threads 1 --kv-cache-dtype "$KV_DTYPE" --prompt-lens 32,128,512,1024 --contexts 256,1024 --batches 1,4,8,16 \
    -o "$OUT/profile.json" 2>/dev/null
fi

write_graph() {  # mode port metrics_port
  local mode=$1 port=$2 mport=$3
  {
    echo "name: plt-$mode"
    echo "namespace: plt-$mode"
    echo "frontend: {host: 127.0.0.1, port: $port, request_timeout_s: 600}"
    echo "workers:"
    local engine="engine: {threads: 1, kv_cache_dtype: $KV_DTYPE}"
    echo "  - {mode: prefill, replicas: 1, device: cpu, $engine}"
    echo "  - {mode: decode, replicas: 1, device: cpu, max_local_prefill_tokens: 64, $engine}"
    if [ "$mode" = planner ]; then
      echo "planner: {profile: profile.json, ttft_ms: $SLO_TTFT_MS, itl_ms: $SLO_ITL_MS, interval_s: $INTERVAL,"
      echo "          prefill: {min: 1, max: 2}, decode: {min: 1, max: 2}, budget: 3, predictor: constant,"
      echo "          scale_down_intervals: 1, cooldown_s: $((4 * INTERVAL)), drain_timeout_s: 120,"
      echo "          metrics_port: $mport}"
    fi
    echo "restart: {max_restarts: 3, backoff_ms: 500}"
    echo "startup_timeout_s: 120"
    echo "shutdown_grace_s: 10"
  } > "$OUT/$mode.yaml"
}

run_mode() {  # planner | fixed
  local mode=$1 port mport
  port=$(free_port)
  mport=$(free_port)
  write_graph "$mode" "$port" "$mport"
  echo "== $mode: tandem serve $OUT/$mode.yaml (frontend :$port)"
  mkdir -p "$OUT/discovery-$mode"
  TANDEM_DISCOVERY_DIR="$OUT/discovery-$mode" setsid "$T" serve "$OUT/$mode.yaml" > "$OUT/$mode-serve.log" 2>&1 &
  SERVE_PID=$!
  local ok=0
  for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then ok=1; break; fi
    kill -0 "$SERVE_PID" 2>/dev/null || break
    sleep 0.2
  done
  if [ $ok != 1 ]; then echo "$mode: serve did not become healthy" >&2; tail -20 "$OUT/$mode-serve.log" >&2; exit 1; fi
  # Warm-up (not measured): a long prompt through the prefill worker, a short one on decode.
  "$T" bench --url "http://127.0.0.1:$port" --endpoint completions --no-progress --seed 1 \
    --input-len 1024 --output-len 4 --num-requests 2 > /dev/null
  "$T" bench --url "http://127.0.0.1:$port" --endpoint completions --no-progress --seed 1 \
    --input-len 32 --output-len 16 --num-requests 2 > /dev/null
  local scrape=()
  [ "$mode" = planner ] && scrape=(--scrape-metrics "http://127.0.0.1:$mport/metrics" --scrape-interval 1)
  echo "   phases: $PHASES"
  "$T" bench --url "http://127.0.0.1:$port" --endpoint completions --no-progress --seed "$SEED" \
    --timeout 300 --phases "$PHASES" --slo "ttft=${SLO_TTFT_MS}ms,itl=${SLO_ITL_MS}ms" "${scrape[@]}" \
    --output-json "$OUT/$mode.json" --output-svg "$OUT/$mode-svg" > "$OUT/$mode.txt"
  stop_serve
  rm -rf "$OUT/discovery-$mode"
}

start=$(date +%s)
run_mode planner
run_mode fixed
echo "== done in $(( $(date +%s) - start )) s; reports in $OUT"
python3 "$ROOT/scripts/planner_load_table.py" --interval "$INTERVAL" --out "$OUT" | tee "$OUT/table.md"
