#!/usr/bin/env bash
# Builds abseil and gRPC with ThreadSanitizer, for `TSAN_DEPS=<prefix> scripts/sanitize.sh tsan`
# (issue 21, item 5; docs/robustness.md, TSan).
#
# Why: Debian's gRPC 1.51 and abseil are not built with -fsanitize=thread, so their locks
# (absl::Mutex on futexes) and atomics are invisible to TSan and every hand-off through gRPC
# reports in test_rpc, test_worker, test_router and test_events. This builds the SAME versions
# Debian 12 ships (libgrpc++1.51 1.51.1-3+b1, libabsl20220623 20220623.1-1+deb12u2) from Debian's
# sources with Debian's patches (so the sonames, abseil's inline namespace `debian3` and its
# absl::optional etc. options are Debian's), with `-fsanitize=thread -g -O1`, into a prefix outside
# the repo. Only the C++ libraries tandem links: absl (all of it, it is small), and of gRPC gpr,
# address_sorting, upb, grpc, grpc++ and grpc_cpp_plugin (tandem's CMakeLists takes the plugin
# from the gRPC package it finds; protoc stays Debian's). protobuf, zlib, c-ares, re2 and openssl
# stay Debian's (gRPC_*_PROVIDER=package); they make no locks of their own that TSan cannot see
# (pthread calls from any library go through TSan's interceptors).
#
#   scripts/tsan-deps.sh                  # -> ~/.cache/tandem/tsan-deps (idempotent: skips what is installed)
#
# Environment: TSAN_DEPS_PREFIX (~/.cache/tandem/tsan-deps), TSAN_DEPS_SRC (sources and build trees,
# <prefix>-src), TSAN_DEPS_JOBS (nproc), TSAN_DEPS_NICE (19), TSAN_DEPS_CC / TSAN_DEPS_CXX (cc, c++).
# Needs: curl, cmake, ninja, patch; Debian's libprotobuf-dev, protobuf-compiler, libprotoc-dev,
# libc-ares-dev, libre2-dev, libssl-dev, zlib1g-dev (tandem's own build already needs most).
# Time here (2-core machine shared with another session, 2026-12-07, gcc 12): 16 min (abseil 1-2,
# gRPC 14); docs/robustness.md (TSan) has what it found.
set -euo pipefail

PREFIX=${TSAN_DEPS_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem/tsan-deps}
SRC=${TSAN_DEPS_SRC:-$PREFIX-src}
JOBS=${TSAN_DEPS_JOBS:-$(nproc)}
NICE=${TSAN_DEPS_NICE:-19}
export CC=${TSAN_DEPS_CC:-cc} CXX=${TSAN_DEPS_CXX:-c++}
POOL=http://deb.debian.org/debian/pool/main
FLAGS="-fsanitize=thread -g -O1"
# Debian 12 (bookworm) source packages: the versions `dpkg -l` shows for libabsl-dev / libgrpc++-dev.
ABSL=abseil_20220623.1; ABSL_DSC=abseil_20220623.1-1+deb12u2.dsc; ABSL_DIR=abseil-20220623.1
GRPC=grpc_1.51.1;       GRPC_DSC=grpc_1.51.1-3.dsc;               GRPC_DIR=grpc-1.51.1

mkdir -p "$SRC" "$PREFIX"
cd "$SRC"

# Downloads the .dsc and the tarballs it names, checks each against its Checksums-Sha256.
fetch() {  # dir-in-pool dsc
  local pool=$1 dsc=$2
  [ -f "$dsc" ] || curl -fsSO "$POOL/$pool/$dsc"
  sed -n '/^Checksums-Sha256:/,/^[A-Z]/p' "$dsc" | awk 'NF == 3 {print $1 "  " $3}' > "$dsc.sha256"
  local f
  for f in $(awk '{print $2}' "$dsc.sha256"); do
    [ -f "$f" ] || curl -fsSO "$POOL/$pool/$f"
  done
  sha256sum -c "$dsc.sha256"
}

# Unpacks the orig tarball and applies Debian's patches in their series order (once).
unpack() {  # name dir
  local name=$1 dir=$2
  [ -f "$dir/.debian-patched" ] && return 0
  rm -rf "$dir" debian
  tar xzf "$name.orig.tar.gz"
  tar xJf "$name"-*.debian.tar.xz
  rm -rf "$dir/debian"; mv debian "$dir/"
  local p
  grep -v '^\s*#' "$dir/debian/patches/series" | while read -r p; do
    [ -n "$p" ] && patch -d "$dir" -p1 -s < "$dir/debian/patches/$p"
  done
  touch "$dir/.debian-patched"
}

common=(-G Ninja -DCMAKE_BUILD_TYPE= -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS"
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread
  -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_PREFIX_PATH="$PREFIX"
  -DCMAKE_INSTALL_RPATH="$PREFIX/lib" -DBUILD_SHARED_LIBS=ON -DCMAKE_CXX_STANDARD=17)

# ---- abseil (as Debian: C++17, shared, soname 20220623) ----
if [ ! -f "$PREFIX/.abseil-done" ]; then
  start=$SECONDS
  fetch a/abseil "$ABSL_DSC"
  unpack "$ABSL" "$ABSL_DIR"
  cmake -S "$ABSL_DIR" -B build-abseil "${common[@]}" -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_TESTING=OFF
  nice -n "$NICE" cmake --build build-abseil -j "$JOBS"
  cmake --install build-abseil > /dev/null
  touch "$PREFIX/.abseil-done"
  echo "tsan-deps: abseil built in $(( (SECONDS - start) / 60 )) min"
fi

# ---- gRPC (C++ libraries and grpc_cpp_plugin only) ----
if [ ! -f "$PREFIX/.grpc-done" ]; then
  start=$SECONDS
  fetch g/grpc "$GRPC_DSC"
  unpack "$GRPC" "$GRPC_DIR"
  # The install rules name every library; drop those tandem does not link (grpc_unsecure alone
  # would compile gRPC's core a second time), and keep them out of `all`.
  if [ ! -f "$GRPC_DIR/.trimmed" ]; then
    python3 - "$GRPC_DIR/CMakeLists.txt" <<'EOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
for t in ["grpc_unsecure", "grpc++_unsecure", "grpc++_alts", "grpc++_error_details",
          "grpc++_reflection", "grpcpp_channelz"]:
    e = re.escape(t)
    text, n1 = re.subn(r"install\(TARGETS " + e + r" EXPORT gRPCTargets\n(.*\n)*?  \)\n", "", text, count=1)
    text, n2 = re.subn(r"add_library\(" + e + r"\n", "add_library(" + t + " EXCLUDE_FROM_ALL\n", text, count=1)
    assert n1 == 1 and n2 == 1, t
open(path, "w").write(text)
EOF
    touch "$GRPC_DIR/.trimmed"
  fi
  cmake -S "$GRPC_DIR" -B build-grpc "${common[@]}" -DgRPC_INSTALL=ON -DgRPC_BUILD_TESTS=OFF \
    -DgRPC_ABSL_PROVIDER=package -DgRPC_CARES_PROVIDER=package -DgRPC_PROTOBUF_PROVIDER=package \
    -DgRPC_RE2_PROVIDER=package -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package \
    -DgRPC_BACKWARDS_COMPATIBILITY_MODE=OFF -DgRPC_BUILD_CSHARP_EXT=OFF \
    -DgRPC_BUILD_GRPC_CPP_PLUGIN=ON -DgRPC_BUILD_GRPC_CSHARP_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_NODE_PLUGIN=OFF -DgRPC_BUILD_GRPC_OBJECTIVE_C_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_PHP_PLUGIN=OFF -DgRPC_BUILD_GRPC_PYTHON_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_RUBY_PLUGIN=OFF
  nice -n "$NICE" cmake --build build-grpc -j "$JOBS"
  cmake --install build-grpc > /dev/null
  touch "$PREFIX/.grpc-done"
  echo "tsan-deps: gRPC built in $(( (SECONDS - start) / 60 )) min"
fi
echo "tsan-deps: $PREFIX (TSAN_DEPS=$PREFIX scripts/sanitize.sh tsan)"
