#!/usr/bin/env bash
# Installs every Debian package that the build and the tests need (idempotent: apt-get update,
# then install, which skips what is present) and builds Release into build/.
# Works on a fresh Debian 12 root with nothing preinstalled. Extra CMake arguments may be given in
# CKPTDB_CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  librocksdb-dev capnproto libcapnp-dev libxxhash-dev libzstd-dev libisal-dev
  libopenmpi-dev openmpi-bin libgloo-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-numpy python3-mpi4py python3-pytest python3-torch
  python3-torchvision
  libcli11-dev nlohmann-json3-dev libfmt-dev libdlpack-dev libzip-dev
)
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
start=$SECONDS
echo "setup: apt-get update"
$sudo apt-get update -q >/dev/null
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" >/dev/null
fi

echo "setup: packages ready in $((SECONDS - start)) s"
start=$SECONDS
echo "setup: building Release into build/"
# shellcheck disable=SC2086
# Warnings are errors with the compiler these scripts install (Debian 12's g++).
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 \
  -DCKPTDB_WERROR=ON ${CKPTDB_CMAKE_ARGS:-} >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: build done in $((SECONDS - start)) s"
