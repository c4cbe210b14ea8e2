#!/usr/bin/env bash
# `tandem generate --device cpu` loads none of the given libraries (issue 29, memory): cuBLAS in a
# CUDA-enabled build (libcublasLt alone is ~134 MB resident once mapped), UCX and libfabric (the
# transfer backends: ~2 MB with their dependencies). Each is opened by tandem on first use
# (kernels/cuda/cublas_loader.h, transfer/ucx_loader.h, transfer/libfabric_loader.h): the binary
# must not name it as DT_NEEDED, and the run (the loader's own log, LD_DEBUG=files: every library
# it maps, at start or by dlopen) must not load it. Also checks that the log works (libc is in it).
# Usage: cpu_generate_unloaded.sh <tandem binary> <library name prefix>...  (e.g. libcublas libucp)
set -euo pipefail
bin=${1:?usage: $0 <tandem binary> <library name prefix>...}
shift
[ $# -gt 0 ] || { echo "usage: $0 <tandem binary> <library name prefix>..."; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for lib in "$@"; do
  if readelf -d "$bin" | grep -E "NEEDED.*\[$lib"; then
    echo "FAIL: $bin names $lib as DT_NEEDED (it is loaded at start, even for generate --device cpu)"
    exit 1
  fi
done
if ! LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld" "$bin" generate --device cpu --prompt "Hello, my name is" \
    --max-tokens 8 > "$tmp/out" 2>&1; then
  echo "FAIL: tandem generate --device cpu exited non-zero:"; tail -20 "$tmp/out"; exit 1
fi
cat "$tmp"/ld.* > "$tmp/ld"
if ! grep -q "file=libc.so.6" "$tmp/ld"; then
  echo "FAIL: the loader's log does not show libc.so.6: LD_DEBUG=files did not work"
  exit 1
fi
for lib in "$@"; do
  if grep "file=$lib" "$tmp/ld"; then
    echo "FAIL: tandem generate --device cpu loaded $lib (above: the loader's log)"
    exit 1
  fi
done
echo "ok: tandem generate --device cpu loaded $(grep -c 'calling init' "$tmp/ld") libraries, none of: $*"
