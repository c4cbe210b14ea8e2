#!/usr/bin/env bash
# Builds cuda_op_check (or, with EMU_TARGET=runner, cuda_runner_check: the CUDA ModelRunner
# against the CPU runner on the bundled tiny model) against the CPU emulation (cuda_emu.h) and runs
# it (cuda_op_check on the small shapes): kernels, launchers and harness checked on a machine with
# no GPU (slow: a fiber per CUDA thread). Set EMU_ORDER=reverse to schedule lanes last-first.
# Usage: dev/kernels/emu/run.sh [address|none] [program args...]
#   address (default): ASan + UBSan, catches out-of-bounds indexing in the kernels.
set -euo pipefail
cd "$(dirname "$0")/../../.."
SAN=${1:-address}
shift || true
OUT=${EMU_OUT:-build-emu-$SAN}  # EMU_OUT: a build directory of your own
mkdir -p "$OUT"
case "$SAN" in
  address) FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer" ;;
  none) FLAGS="" ;;
  *) echo "usage: $0 [address|none] [args]" >&2; exit 2 ;;
esac
CBLAS_INC=$(dirname "$(find /usr/include -name cblas.h | head -1)")
KERNELS="src/kernels/cuda/*.cu src/kernels/cuda/*.cc src/kernels/cpu/*.cc src/common/status.cc src/common/cpu_cores.cc"
if [ "${EMU_TARGET:-op_check}" = runner ]; then
  SRCS="$KERNELS src/model/*.cc src/common/file_util.cc dev/kernels/runner/runner_check.cc"
  BIN=cuda_runner_check_emu
else
  SRCS="$KERNELS dev/kernels/*.cc dev/kernels/*.cu"
  BIN=cuda_op_check_emu
  set -- --small "$@"
fi
objs=()
for f in $SRCS; do
  o="$OUT/$(echo "$f" | tr / _).o"
  objs+=("$o")
  if [ ! -e "$o" ] || [ "$f" -nt "$o" ] || [ dev/kernels/emu/cuda_emu.h -nt "$o" ] || \
     [ -n "$(find src/kernels/cuda src/kernels/cpu dev/kernels -name '*.h' -newer "$o" -o -name '*.cuh' -newer "$o" | head -1)" ]; then
    echo "compile $f"
    # shellcheck disable=SC2086
    g++ -std=c++20 -O1 -g $FLAGS -x c++ -include dev/kernels/emu/cuda_emu.h -DTANDEM_CUDA_EMU \
        -DTANDEM_HAVE_CUDA -DTANDEM_DEFAULT_MODEL_DIR="\"$PWD/models/tiny-qwen3\"" \
        -Isrc -Idev/kernels -I/usr/local/cuda/include -I"$CBLAS_INC" -w -c "$f" -o "$o" &
    while [ "$(jobs -r | wc -l)" -ge "$(nproc)" ]; do wait -n; done
  fi
done
wait
# shellcheck disable=SC2086
g++ $FLAGS "${objs[@]}" -o "$OUT/$BIN" -lopenblas -lfmt -lpthread
"$OUT/$BIN" "$@"
