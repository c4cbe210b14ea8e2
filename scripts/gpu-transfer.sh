#!/usr/bin/env bash
# KV transfer on the two-GPU machine (issue 7): test_transfer_cuda (the device-memory transfer
# suite on real GPU memory for local, tcp staged and cuda_ipc, and cuda_ipc between two processes)
# and transfer_bench (1, 16, 128, 1800 tokens of Qwen3-8B KV per backend; cuda_ipc and tcp staged
# from cuda:0 to cuda:1 in another process; the raw cudaMemcpyPeer bandwidth in the same run and
# the ratio), a short table last.
#
#   scripts/gpu-transfer.sh pack [build-dir]   here (nvcc, no GPU): builds test_transfer_cuda and
#       transfer_bench in build-dir (default build-h4, configured with -DTANDEM_CUDA=ON), strips and
#       xz-compresses them into .device-carry-xfer/ (ignored through .git/info/exclude) with the
#       shared libraries they load but the C/C++ runtime and the driver (fmt, spdlog, yaml-cpp,
#       cudart, UCX with its transport modules, libfabric, ...: the device has other versions or
#       none).
#   scripts/gpu-transfer.sh                    on the device machine (run tool, kind nvidia-h200-x2,
#       carry [".device-carry-xfer"]): both, logs in $OUT (gpu-transfer.log, test_transfer_cuda.log,
#       transfer_bench.log, summary.txt), the summary last.
# Env: GPU_TRANSFER_DEADLINE (seconds for the whole call, default 560), GPU_TRANSFER_BENCH_ARGS
# (e.g. "--min-seconds 1" or "--only cuda_ipc,tcp"), GPU_TRANSFER_STAGES (default "test,bench";
# also "p2p": dev/transfer/p2p_copy_bench, the copy methods side by side; "sweep": transfer_bench
# --only cuda_ipc once per cuda_ipc parameter setting in GPU_TRANSFER_SWEEP, default
# "sm_ctas_peer=0 sm_ctas_peer=16 sm_ctas_peer=32 sm_ctas_peer=64 sm_ctas_peer=132"; a setting may
# name several, comma-separated: "sm_ctas=0,poll_us=1").
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=$ROOT/.device-carry-xfer
BINS="test_transfer_cuda transfer_bench"

pack() {
  set -e
  local build=${1:-build-h4}
  grep -qxF '/.device-carry-xfer/' .git/info/exclude 2>/dev/null || echo '/.device-carry-xfer/' >> .git/info/exclude
  nice -n 10 cmake --build "$build" -j2 --target $BINS
  rm -rf "$CARRY" && mkdir -p "$CARRY/lib"
  strip -o "$CARRY/test_transfer_cuda" "$build/tests/test_transfer_cuda"
  strip -o "$CARRY/transfer_bench" "$build/bench/transfer_bench"
  # What ldd lists, plus UCX and libfabric (opened at run time: scripts/gpu/runtime_libs.sh).
  for lib in $(scripts/gpu/runtime_libs.sh "$build/tests/test_transfer_cuda" "$build/bench/transfer_bench"); do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
      libcuda.so.*|libnvidia*) ;;
      *) cp -L "$lib" "$CARRY/lib/" ;;
    esac
  done
  # UCX loads its transports (and their libraries) at run time.
  if [ -d /usr/lib/x86_64-linux-gnu/ucx ]; then
    mkdir -p "$CARRY/lib/ucx"
    cp -L /usr/lib/x86_64-linux-gnu/ucx/*.so.0 "$CARRY/lib/ucx/" 2>/dev/null || true
  fi
  # The copy-method experiment (dev/transfer/p2p_copy_bench.cu), standalone.
  nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o "$CARRY/p2p_copy_bench" dev/transfer/p2p_copy_bench.cu
  for b in $BINS p2p_copy_bench; do xz -T2 -6 "$CARRY/$b"; done
  { echo "built $(date -u +%FT%TZ) on $(uname -n) from $(git rev-parse --short HEAD) ($build)"
    git status --short -- src/transfer bench tests/unit/transfer | head -20; } > "$CARRY/BUILD_INFO"
  du -sh "$CARRY"; ls -la "$CARRY" "$CARRY/lib"
}

if [ "${1:-}" = pack ]; then
  pack "${2:-}"
  exit $?
fi

OUT=${OUT:-/tmp/gpu-transfer}
mkdir -p "$OUT"
DEADLINE=$((SECONDS + ${GPU_TRANSFER_DEADLINE:-560}))
STAGES=${GPU_TRANSFER_STAGES:-test,bench}
LOG=$OUT/gpu-transfer.log
exec > >(tee -a "$LOG") 2>&1

left() { echo $((DEADLINE - SECONDS)); }
BIN=/tmp/gpu-transfer-bin
mkdir -p "$BIN"
for b in $BINS p2p_copy_bench; do
  if [ -f "$CARRY/$b.xz" ]; then xz -dc "$CARRY/$b.xz" > "$BIN/$b" && chmod +x "$BIN/$b"; fi
done
export LD_LIBRARY_PATH="$CARRY/lib:${LD_LIBRARY_PATH:-}"
export UCX_MODULE_DIR="$CARRY/lib/ucx"
echo "== $(date -u +%FT%TZ) $(cat "$CARRY/BUILD_INFO" 2>/dev/null | head -1)"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1
nvidia-smi topo -m 2>&1 | head -8

test_line="not run"
if [[ ,$STAGES, == *,test,* ]]; then
  echo "== test_transfer_cuda ($(left) s left)"
  timeout $(( $(left) > 300 ? 300 : $(left) )) "$BIN/test_transfer_cuda" > "$OUT/test_transfer_cuda.log" 2>&1
  rc=$?
  tail -25 "$OUT/test_transfer_cuda.log"
  passed=$(grep -c '^\[       OK \]' "$OUT/test_transfer_cuda.log")
  failed=$(grep -c '^\[  FAILED  \].*(' "$OUT/test_transfer_cuda.log")
  skipped=$(grep -c '^\[  SKIPPED \].*(' "$OUT/test_transfer_cuda.log")
  test_line="exit $rc: $passed passed, $failed failed, $skipped skipped"
  echo "test_transfer_cuda $test_line"
fi

bench_rc="not run"
if [[ ,$STAGES, == *,bench,* ]] && [ "$(left)" -gt 30 ]; then
  echo "== transfer_bench ${GPU_TRANSFER_BENCH_ARGS:-} ($(left) s left)"
  # shellcheck disable=SC2086
  timeout $(( $(left) - 10 )) "$BIN/transfer_bench" ${GPU_TRANSFER_BENCH_ARGS:-} > "$OUT/transfer_bench.log" 2> "$OUT/transfer_bench.err"
  bench_rc=$?
  tail -5 "$OUT/transfer_bench.err"
fi

p2p_rc="not run"
if [[ ,$STAGES, == *,p2p,* ]] && [ "$(left)" -gt 30 ]; then
  echo "== p2p_copy_bench ($(left) s left)"
  timeout $(( $(left) > 200 ? 200 : $(left) - 10 )) "$BIN/p2p_copy_bench" > "$OUT/p2p_copy_bench.log" 2>&1
  p2p_rc=$?
fi

if [[ ,$STAGES, == *,sweep,* ]]; then
  for setting in ${GPU_TRANSFER_SWEEP:-sm_ctas_peer=0 sm_ctas_peer=16 sm_ctas_peer=32 sm_ctas_peer=64 sm_ctas_peer=132}; do
    [ "$(left)" -gt 40 ] || break
    echo "== transfer_bench --only cuda_ipc --param cuda_ipc.$setting ($(left) s left)" | tee -a "$OUT/sweep.log"
    params=()
    for kv in ${setting//,/ }; do params+=(--param "cuda_ipc.$kv"); done
    TANDEM_CUDA_IPC_TRACE=1 timeout 60 "$BIN/transfer_bench" --only cuda_ipc "${params[@]}" >> "$OUT/sweep.log" 2>&1
    echo "exit $?" >> "$OUT/sweep.log"
  done
fi

{
  echo "== summary (gpu-transfer.sh, $(date -u +%FT%TZ))"
  echo "test_transfer_cuda: $test_line"
  grep -h '^\[  FAILED  \].*(' "$OUT/test_transfer_cuda.log" 2>/dev/null | head -10
  grep -h "cuda_ipc across processes" "$OUT/test_transfer_cuda.log" 2>/dev/null
  echo "transfer_bench: exit $bench_rc"
  sed -n '/^KV transfer, Qwen3-8B/,$p' "$OUT/transfer_bench.log" 2>/dev/null
  if [ "$p2p_rc" != "not run" ]; then echo "p2p_copy_bench: exit $p2p_rc"; cat "$OUT/p2p_copy_bench.log"; fi
  if [ -f "$OUT/sweep.log" ]; then grep -E "^== transfer_bench|1800|^raw device|trace, (2359296|266600448)" "$OUT/sweep.log"; fi
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
