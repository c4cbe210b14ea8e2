#!/usr/bin/env bash
# Builds cuda_op_check against the CPU emulation (cuda_emu.h) and runs it on the small shapes:
# the kernels, their launchers and the harness checked on a machine with no GPU (slow: one thread
# per CUDA thread). Usage: dev/kernels/emu/run.sh [address|thread|none] [cuda_op_check args...]
#   address (default): ASan + UBSan, catches out-of-bounds indexing in the kernels.
#   thread: TSan, flags shared-memory accesses missing a __syncthreads/__syncwarp.
set -euo pipefail
cd "$(dirname "$0")/../../.."
SAN=${1:-address}
shift || true
OUT=build-emu-$SAN
mkdir -p "$OUT"
case "$SAN" in
  address) FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer" ;;
  thread) FLAGS="-fsanitize=thread" ;;
  none) FLAGS="" ;;
  *) echo "usage: $0 [address|thread|none] [args]" >&2; exit 2 ;;
esac
CBLAS_INC=$(dirname "$(find /usr/include -name cblas.h | head -1)")
SRCS="src/kernels/cuda/*.cu src/kernels/cuda/*.cc src/kernels/cpu/*.cc dev/kernels/*.cc dev/kernels/*.cu src/common/status.cc"
objs=()
for f in $SRCS; do
  o="$OUT/$(echo "$f" | tr / _).o"
  objs+=("$o")
  if [ ! -e "$o" ] || [ "$f" -nt "$o" ] || [ dev/kernels/emu/cuda_emu.h -nt "$o" ] || \
     [ -n "$(find src/kernels/cuda dev/kernels -name '*.h' -newer "$o" -o -name '*.cuh' -newer "$o" | head -1)" ]; then
    echo "compile $f"
    # shellcheck disable=SC2086
    g++ -std=c++20 -O1 -g $FLAGS -x c++ -include dev/kernels/emu/cuda_emu.h -DTANDEM_CUDA_EMU \
        -Isrc -Idev/kernels -I/usr/local/cuda/include -I"$CBLAS_INC" -w -c "$f" -o "$o" &
    while [ "$(jobs -r | wc -l)" -ge "$(nproc)" ]; do wait -n; done
  fi
done
wait
# shellcheck disable=SC2086
g++ $FLAGS "${objs[@]}" -o "$OUT/cuda_op_check_emu" -lopenblas -lfmt -lpthread
"$OUT/cuda_op_check_emu" --small "$@"
