# Helpers of the device-side scripts (scripts/gpu-e2e.sh, scripts/gpu-serve-bench.sh), sourced
# after they set ROOT (the repository). Sets CARRY, the folder holding tandem-e2e.tar.xz and
# BUILD_INFO (scripts/gpu-e2e.sh pack), and keeps NVLink multicast off.
CARRY=$ROOT/.device-carry/e2e
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

find_cublas() {
  local dirs="/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib"
  dirs="$dirs $(python3 -c 'import nvidia, os; p = list(nvidia.__path__)[0]; print(" ".join(r for r, _, f in os.walk(p) if "libcublas.so.13" in f or "libcudart.so.13" in f))' 2>/dev/null)"
  for d in $dirs; do
    { [ -e "$d/libcublas.so.13" ] || [ -e "$d/libcudart.so.13" ]; } && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  done
  export LD_LIBRARY_PATH
}

wait_health() {  # PORT SECONDS
  local i
  for ((i = 0; i < $2 * 2; i++)); do
    curl -sf "http://127.0.0.1:$1/health" > /dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "no /health on :$1 after $2 s"; return 1
}

# The carried tandem unpacked into $2 (on the path) and the bundled model beside it. Sets TINY.
setup_tiny() {
  local out=$1 work=$2
  mkdir -p "$out" "$work"
  cat "$CARRY/BUILD_INFO"
  xz -dc "$CARRY/tandem-e2e.tar.xz" | tar -C "$work" -xf -
  export LD_LIBRARY_PATH="$work/lib:${LD_LIBRARY_PATH:-}"
  find_cublas
  mkdir -p "$work/models" && tar -C "$work/models" -xJf models/tiny-qwen3.tar.xz
  TINY=$(dirname "$(find "$work/models" -name config.json | head -1)")
}

# setup_tiny, and a random Qwen3-8B checkpoint with the bundled model's tokenizer at $4 (made
# under $3 when missing; log in $1). Sets TINY and CKPT.
setup_8b() {
  local out=$1 work=$2 ckdir=$3
  CKPT=$4
  mkdir -p "$ckdir"
  setup_tiny "$out" "$work"
  [ -e "$CKPT/config.json" ] || python3 scripts/gpu/peer_check.py --model 8b --make-only --keep \
    --workdir "$ckdir" > "$out/make-8b.log" 2>&1 || { tail -5 "$out/make-8b.log"; return 1; }
  local f
  for f in tokenizer.json tokenizer_config.json generation_config.json; do
    [ -e "$TINY/$f" ] && cp "$TINY/$f" "$CKPT/"
  done
  return 0
}
