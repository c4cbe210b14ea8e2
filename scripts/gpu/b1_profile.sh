#!/usr/bin/env bash
# Batch-1 decode of Qwen3-8B shapes (random weights): where the time of a step goes (issue 6).
# On the device after `scripts/gpu-check.sh pack` here (run tool, carry [".device-carry"]):
#   bash scripts/gpu/b1_profile.sh
# Runs cuda_engine_bench at batch 1 as is and with each of the decode-path switches off
# (TANDEM_GEMV=0: cuBLAS for the projections; TANDEM_DECODE_SPLITS=fill; TANDEM_CUDA_GRAPHS=0),
# then, when nsys is there, the kernel time summary of one run. Never touches clocks or modes.
set -uo pipefail
cd "$(dirname "$0")/../.."
CARRY=$PWD/.device-carry
BIN=/tmp/b1-profile
mkdir -p "$BIN"
python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
  "$CARRY/cuda_engine_bench.xz" "$BIN/cuda_engine_bench" && chmod +x "$BIN/cuda_engine_bench"
export LD_LIBRARY_PATH="$CARRY/lib:${LD_LIBRARY_PATH:-}"
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; p = list(nvidia.__path__)[0]; print(" ".join(r for r, _, f in os.walk(p) if "libcublas.so.13" in f))' 2>/dev/null); do
  [ -e "$d/libcublas.so.13" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
work=/dev/shm/tandem-b1
ckpt=$work/qwen3-8b
[ -e "$ckpt/config.json" ] || python3 scripts/gpu/peer_check.py --model 8b --make-only --keep --workdir "$work" > /dev/null 2>&1
args=("$ckpt" --batches 1 --prefill 512 --steps 64)
for v in "TANDEM_NOTHING=1" "TANDEM_GEMV=0" "TANDEM_DECODE_SPLITS=fill" "TANDEM_CUDA_GRAPHS=0"; do
  echo "== $v"
  env "$v" "$BIN/cuda_engine_bench" "${args[@]}" 2>&1 | grep -iE "decode|B=1" | head -4
done
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  "$NSYS" profile -o /tmp/b1prof --force-overwrite true "$BIN/cuda_engine_bench" "${args[@]}" > /dev/null 2>&1
  "$NSYS" stats -q --report cuda_gpu_kern_sum --format csv /tmp/b1prof.nsys-rep 2>/dev/null | head -25 | cut -c1-220
else
  echo "no nsys on this machine"
fi
rm -rf "$work"
