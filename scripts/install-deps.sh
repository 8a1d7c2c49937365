#!/usr/bin/env bash
# Installs the Debian 12 packages raio needs to build, test and run its examples.
# Idempotent: packages already present are skipped. Uses sudo when not root.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build ccache pkg-config git
  libboost-dev            # Boost 1.74 (Asio); never a second Boost: 1.81 would remove msgpack-cxx
  libprotobuf-dev protobuf-compiler libabsl-dev libmsgpack-cxx-dev
  libspdlog-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libhiredis-dev libeigen3-dev
  libssl-dev              # libcrypto: SHA-256 of job packages
  libarchive-dev          # the jobs API: working directories as zip archives (src/raio/jobs)
  redis-server            # the jobs API's Redis storage: its tests run a redis-server
  iproute2                # `ip`: tests/integration/test_hosts.h makes test hosts in network namespaces
  python3-sklearn         # ships the UCI digits CSV used by the main example
  bsdgames                # quiz(6) question/answer files: the LoRA example's data (examples/lora)
  clang libclang-rt-14-dev  # `make fuzz`: clang with libFuzzer and the sanitizer runtimes
  libtorch-dev libsentencepiece-dev  # src/raio/llm: model runtime (CPU libtorch 1.13.1), tokenizer
  libgloo-dev             # src/raio/train: c10d's ProcessGroupGloo.hpp includes Gloo's headers
  libopenblas0-serial     # libtorch calls the system BLAS: OpenBLAS, single-threaded, not netlib
  curl python3-requests python3-aiohttp  # tests/llm/server_test.py drives the LLM server
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
