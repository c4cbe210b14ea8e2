#!/usr/bin/env bash
# test_transfer_cuda on the GPU machine: the device-memory transfer suite (device_memory_test.cc)
# on real GPU memory through the CUDA copier (tcp staging through pinned buffers, local copies).
#
#   tests/unit/transfer/cuda/device_run.sh pack [build-dir]   here (nvcc, no GPU): builds
#       test_transfer_cuda in build-dir (default build-h4, configured with -DTANDEM_CUDA=ON) and
#       packs it, stripped, with the shared libraries it loads (all but glibc's and the driver's)
#       into .device-carry-xfer/ (ignored through .git/info/exclude).
#   tests/unit/transfer/cuda/device_run.sh                    on the device machine (run tool,
#       carry [".device-carry-xfer"]): runs it; the log goes to $OUT/test_transfer_cuda.log.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
CARRY=$PWD/.device-carry-xfer

if [ "${1:-}" = pack ]; then
  build=${2:-build-h4}
  grep -qxF '/.device-carry-xfer/' .git/info/exclude 2>/dev/null || echo '/.device-carry-xfer/' >> .git/info/exclude
  cmake --build "$build" -j2 --target test_transfer_cuda
  rm -rf "$CARRY" && mkdir -p "$CARRY/lib"
  strip -o "$CARRY/test_transfer_cuda" "$build/tests/test_transfer_cuda"
  for lib in $(ldd "$build/tests/test_transfer_cuda" | awk '/=>/ {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libcuda.so.*) ;;
      *) cp -L "$lib" "$CARRY/lib/" ;;
    esac
  done
  echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)" > "$CARRY/BUILD_INFO"
  du -sh "$CARRY"
  exit 0
fi

out=${OUT:-/tmp/test-transfer-cuda}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/gpu.txt"
cat "$CARRY/BUILD_INFO" 2>/dev/null || true
export LD_LIBRARY_PATH="$CARRY/lib:${LD_LIBRARY_PATH:-}"
set +e
"$CARRY/test_transfer_cuda" 2>&1 | tee "$out/test_transfer_cuda.log"
rc=${PIPESTATUS[0]}
echo "test_transfer_cuda exit code: $rc" | tee -a "$out/test_transfer_cuda.log"
exit "$rc"
