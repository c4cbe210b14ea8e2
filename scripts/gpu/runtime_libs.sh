#!/usr/bin/env bash
# The shared libraries the given binaries need, one path a line: what ldd reports, plus those that
# tandem opens itself when a feature is used and so are not in ldd's list (not DT_NEEDED): UCX
# (libucp.so.0) and libfabric (libfabric.so.1) for those transfer backends (src/transfer/
# ucx_loader.h, libfabric_loader.h), each with its own dependencies, when a binary names it and
# this machine has it. cuBLAS, also opened on first use (kernels/cuda/cublas_loader.h), is not
# added: the CUDA machine brings its own. The callers filter out the C runtime and CUDA.
# Used by the pack steps (scripts/gpu-e2e.sh, scripts/gpu-transfer.sh, deploy/docker/Dockerfile).
# Usage: scripts/gpu/runtime_libs.sh BINARY...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
opened=()
for so in libucp.so.0 libfabric.so.1; do
  grep -qaF "$so" "$@" || continue
  path=$(ldconfig -p | awk -v so="$so" '$1 == so && /x86-64/ {print $NF; exit}')
  [ -n "$path" ] && opened+=("$path")
done
{ ldd "$@" "${opened[@]}" | awk '/=> \// {print $3}'; printf '%s\n' "${opened[@]}"; } | sort -u
