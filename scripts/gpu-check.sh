#!/usr/bin/env bash
# The one script for the GPU machine: CUDA op parity and timings (dev/kernels/cuda_op_check).
#
#   scripts/gpu-check.sh pack   on the dev machine (nvcc, no GPU): builds cuda_op_check and
#                               cuda_runner_check with the project's CMake (sm_90, OpenBLAS static)
#                               into build-cuda/ and packs them
#                               with libfmt/libcudart and the headers for a fallback build into
#                               .device-carry/ (ignored through .git/info/exclude).
#   scripts/gpu-check.sh build-device   only the kernels-only fallback build, into build-kernels/.
#   scripts/gpu-check.sh        on the device machine (run tool, carry [".device-carry"]): runs the
#                               carried binary, or builds one there from dev/kernels/CMakeLists.txt
#                               (kernels only: the device has CUDA and CMake but not gRPC, Boost...)
#                               when it is missing or cannot load; runs the full check, then
#                               compute-sanitizer (memcheck; racecheck on prefill) on the small
#                               shapes, then cuda_runner_check on the bundled tiny model. The
#                               summary table prints last.
# Env: GPU_CHECK_SANITIZE=0 skips compute-sanitizer; GPU_CHECK_BUILD_TEST=1 also tries the fallback
# build; GPU_CHECK_ARGS passes arguments to cuda_op_check (e.g. "--only decode").
# Logs go to $OUT when set (the device tool brings them back). Never touches clocks, power, modes.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=$ROOT/.device-carry
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

pack() {
  set -e
  grep -qxF '/.device-carry/' .git/info/exclude 2>/dev/null || echo '/.device-carry/' >> .git/info/exclude
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_CUDA=ON > /dev/null
  cmake --build build-cuda -j2 --target cuda_op_check cuda_runner_check
  rm -rf "$CARRY" && mkdir -p "$CARRY/lib" "$CARRY/include"
  for b in cuda_op_check cuda_runner_check; do
    strip -o "$CARRY/$b" "build-cuda/$b"
    xz -T2 -6 "$CARRY/$b"
  done
  for lib in $(ldd build-cuda/cuda_op_check build-cuda/cuda_runner_check | awk '/=>/ {print $3}' | sort -u); do
    case "$(basename "$lib")" in
      libfmt.so.*|libcudart.so.*) cp -L "$lib" "$CARRY/lib/" ;;
    esac
  done
  cp -r /usr/include/fmt "$CARRY/include/"
  cblas=$(dirname "$(find /usr/include -name cblas.h | head -1)")
  cp "$cblas"/cblas.h "$cblas"/openblas_config.h "$CARRY/include/" 2>/dev/null || true
  { echo "built $(date -u +%FT%TZ) on $(uname -n) from $(git rev-parse --short HEAD)"
    git status --short -- src/kernels dev/kernels | head -20; } > "$CARRY/BUILD_INFO"
  du -sh "$CARRY"; ls -la "$CARRY" "$CARRY/lib"
}

# Adds directories that hold libcublas.so.13 (CUDA toolkit, or PyTorch's pip wheels) to the path.
find_cublas() {
  local dirs="/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib"
  dirs="$dirs $(python3 -c 'import nvidia, os; p = list(nvidia.__path__)[0]; print(" ".join(os.path.join(r) for r, _, f in os.walk(p) if "libcublas.so.13" in f))' 2>/dev/null)"
  for d in $dirs; do
    [ -e "$d/libcublas.so.13" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  done
  export LD_LIBRARY_PATH
}

build_on_device() {
  echo "== building cuda_op_check on this machine (dev/kernels/CMakeLists.txt, kernels only)"
  cmake -S dev/kernels -B build-kernels -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DTANDEM_EXTRA_INCLUDE="$CARRY/include" \
        -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
    && cmake --build build-kernels -j"$(nproc)" --target cuda_op_check
}

device() {
  local out=${OUT:-/tmp/gpu-check-out}
  mkdir -p "$out"
  echo "== $(date -u +%FT%TZ) gpu-check on $(uname -n)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,power.draw,power.limit,temperature.gpu \
    --format=csv 2>&1 | tee "$out/gpu.txt"
  export LD_LIBRARY_PATH="$CARRY/lib:${LD_LIBRARY_PATH:-}"
  find_cublas
  local bin="" built_here=0
  if [ -e "$CARRY/cuda_op_check.xz" ]; then
    mkdir -p /tmp/gpu-check && python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$CARRY/cuda_op_check.xz" /tmp/gpu-check/cuda_op_check && chmod +x /tmp/gpu-check/cuda_op_check
    cat "$CARRY/BUILD_INFO" 2>/dev/null
    # A loader problem (a missing library, an old libstdc++) shows before main prints its usage.
    local probe
    probe=$(/tmp/gpu-check/cuda_op_check --probe 2>&1 || true)  # exits 2 after the usage line
    if grep -q "^usage:" <<< "$probe"; then
      bin=/tmp/gpu-check/cuda_op_check
    else
      echo "carried binary cannot start:"; head -5 <<< "$probe"
      ldd /tmp/gpu-check/cuda_op_check | grep "not found"
    fi
  fi
  if [ -z "$bin" ]; then
    build_test "$out" && bin=$ROOT/build-kernels/cuda_op_check
    built_here=1
  fi
  [ -n "$bin" ] || { echo "no cuda_op_check to run"; return 2; }
  echo "== cuda_op_check ${GPU_CHECK_ARGS:-} ($bin)"
  # shellcheck disable=SC2086
  timeout 300 "$bin" ${GPU_CHECK_ARGS:-} > "$out/op_check.log" 2>&1
  local rc=$?
  grep -v "^ok " "$out/op_check.log" | sed '/==== cuda_op_check summary/,$d'  # failures, notes, timings

  local sanitize="skipped"
  if [ "${GPU_CHECK_SANITIZE:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$bin" --small --seed 1 \
      > "$out/memcheck.log" 2>&1
    local mem_rc=$?
    timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 "$bin" --small --only prefill \
      > "$out/racecheck.log" 2>&1
    local race_rc=$?
    sanitize="memcheck rc $mem_rc ($(grep -m1 'ERROR SUMMARY' "$out/memcheck.log")), racecheck prefill rc $race_rc ($(grep -m1 'RACECHECK SUMMARY\|ERROR SUMMARY' "$out/racecheck.log"))"
  fi
  if [ "${GPU_CHECK_BUILD_TEST:-0}" = 1 ] && [ "$built_here" = 0 ]; then build_test "$out"; fi

  # The CUDA ModelRunner against the CPU runner on the bundled tiny model (carried binary only).
  local runner_rc=skipped
  if [ -e "$CARRY/cuda_runner_check.xz" ]; then
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$CARRY/cuda_runner_check.xz" /tmp/gpu-check/cuda_runner_check && chmod +x /tmp/gpu-check/cuda_runner_check
    mkdir -p /tmp/gpu-check/models && tar xJf models/tiny-qwen3.tar.xz -C /tmp/gpu-check/models
    timeout 120 /tmp/gpu-check/cuda_runner_check /tmp/gpu-check/models/tiny-qwen3 --steps 8 \
      > "$out/runner_check.log" 2>&1
    runner_rc=$?
  fi

  echo
  sed -n '/==== cuda_op_check summary/,$p' "$out/op_check.log"
  [ "$rc" = 124 ] && echo "cuda_op_check TIMED OUT (300 s); log tail:" && tail -5 "$out/op_check.log"
  [ -e "$out/runner_check.log" ] && cat "$out/runner_check.log"
  echo "cuda_runner_check exit $runner_rc (0: the CUDA runner matches the CPU runner)"
  echo "sanitizers (small shapes, rc 0 = clean): $sanitize"
  echo "cuda_op_check exit $rc (0 pass, 1 parity failure, 2 CUDA error)"
  return "$rc"
}

# The kernels-only fallback build on the device, timed, log to $1/device-build.log.
build_test() {
  local t0=$SECONDS
  if timeout 150 "$ROOT/scripts/gpu-check.sh" build-device > "$1/device-build.log" 2>&1; then
    echo "== kernels-only build on this machine: ok ($((SECONDS - t0)) s)"
  else
    echo "== kernels-only build on this machine FAILED ($((SECONDS - t0)) s):"; tail -15 "$1/device-build.log"
    return 1
  fi
}

case "${1:-device}" in
  pack) pack ;;
  build-device) build_on_device ;;
  device) device ;;
  *) echo "usage: $0 [pack|device]" >&2; exit 2 ;;
esac
