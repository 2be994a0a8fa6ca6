#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs every Debian package ShapeVM's build, tests and benchmarks need (Debian 12).
# Idempotent; skips apt when everything is already installed.
set -euo pipefail
packages=(
  cmake ninja-build g++ clang-19 libclang-rt-19-dev libomp-19-dev clang-format pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev libreadline-dev tmux
  libzip-dev zlib1g-dev
  libprotobuf-dev protobuf-compiler libonnx-dev
  llvm-19-dev libdnnl-dev libopenblas0-pthread
  python3 python3-dev pybind11-dev python3-numpy python3-pytest python3-onnx python3-torch python3-torchvision
  python3-matplotlib python3-distributed python3-dask
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
