#!/usr/bin/env bash
# Installs the Debian packages tandem needs to build and test, when any is missing.
# Runs as root (or through sudo). Idempotent and quiet when everything is present.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache xz-utils
  nlohmann-json3-dev libfmt-dev libspdlog-dev libcli11-dev
  libpcre2-dev libutf8proc-dev libxxhash-dev libopenblas-dev
  libboost1.81-dev libyaml-cpp-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev curl libssl-dev
  libucx-dev libfabric-dev
  etcd-server nats-server libnats-dev
  python3 python3-jinja2 python3-yaml python3-jsonschema python3-prometheus-client nodejs npm
  clang libclang-rt-dev  # scripts/fuzz.sh: libFuzzer, ASan/UBSan (CI's bounded fuzz run)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # nodejs/npm may come from outside Debian's packages; a working node and npm are enough.
    case "$p" in
      nodejs) command -v node >/dev/null && continue ;;
      npm) command -v npm >/dev/null && continue ;;
    esac
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
