#!/usr/bin/env bash
# `tandem generate --device cpu` in a CUDA-enabled build loads no cuBLAS (issue 29, memory: mapped,
# libcublasLt alone is ~134 MB resident). The binary must not name libcublas / libcublasLt as
# DT_NEEDED, and the run (the loader's own log, LD_DEBUG=files: every library it maps, at start or
# by dlopen) must not load them. Also checks that the log works (libc and libcudart are in it).
# Usage: cpu_generate_no_cublas.sh <tandem binary>
set -euo pipefail
bin=${1:?usage: $0 <tandem binary>}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if readelf -d "$bin" | grep -E 'NEEDED.*libcublas'; then
  echo "FAIL: $bin names cuBLAS as DT_NEEDED (it is loaded at start, even for --device cpu)"
  exit 1
fi
if ! LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld" "$bin" generate --device cpu --prompt "Hello, my name is" \
    --max-tokens 8 > "$tmp/out" 2>&1; then
  echo "FAIL: tandem generate --device cpu exited non-zero:"; tail -20 "$tmp/out"; exit 1
fi
cat "$tmp"/ld.* > "$tmp/ld"
for lib in libc.so.6 libcudart.so; do
  if ! grep -q "file=$lib" "$tmp/ld"; then
    echo "FAIL: the loader's log does not show $lib: LD_DEBUG=files did not work or this is no CUDA build"
    exit 1
  fi
done
if grep "file=libcublas" "$tmp/ld"; then
  echo "FAIL: tandem generate --device cpu loaded cuBLAS (above: the loader's log)"
  exit 1
fi
echo "ok: tandem generate --device cpu loaded $(grep -c 'calling init' "$tmp/ld") libraries, no libcublas"
