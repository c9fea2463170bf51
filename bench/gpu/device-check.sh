#!/usr/bin/env bash
# GPU checks for one short session on a machine with an NVIDIA GPU.
#
#   bench/gpu/device-check.sh prepare   # here: CUDA build + runtime libraries
#   bench/gpu/device-check.sh           # there: gpu tests + device benchmark
#
# The GPU machine has the driver but not RocksDB, Cap'n Proto or MPI, so
# `prepare` builds with CUDA into build-gpu/ and unpacks the Debian packages
# the binaries load into .device-libs/ (both git-ignored, carried along with
# the device tool: carry ["build-gpu", ".device-libs"]). The run itself takes
# a few minutes: the gpu-labelled tests, then ckpt-gpu-bench (device save/load
# vs pinned cudaMemcpy of the same bytes).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

if [[ "${1:-}" == prepare ]]; then
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCKPTDB_WITH_CUDA=ON \
    -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
  cmake --build build-gpu -j"$(nproc)" --target gpu_test ckpt-gpu-bench
  bins=(build-gpu/tests/gpu_test build-gpu/bench/ckpt-gpu-bench)
  # Every shared library they load, outside libc and the CUDA toolkit, by package.
  mapfile -t pkgs < <(ldd "${bins[@]}" | awk '/=> \// {print $3}' |
    grep -v -e /usr/local/cuda -e 'libc\.so' -e 'libm\.so' -e ld-linux | sort -u |
    xargs -r realpath | xargs -r dpkg -S 2>/dev/null | cut -d: -f1 | sort -u)
  rm -rf .device-libs && mkdir -p .device-libs/debs
  (cd .device-libs/debs && apt-get download "${pkgs[@]}" >/dev/null)
  for deb in .device-libs/debs/*.deb; do dpkg -x "$deb" .device-libs; done
  rm -rf .device-libs/debs .device-libs/usr/share
  echo "prepared: build-gpu/ and .device-libs/ (${#pkgs[@]} packages: ${pkgs[*]})"
  exit 0
fi

# libnccl.so.2 (218 MB) is too large to carry: use the machine's own, from the
# CUDA toolkit or from the nvidia-nccl / nvidia-cuda-runtime Python wheels.
extra=/usr/local/cuda/lib64
for mod in nvidia.nccl nvidia.cuda_runtime; do
  dir=$(python3 -c "import os, $mod as m; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null) || continue
  extra="$extra:$dir"
done
export LD_LIBRARY_PATH="$root/.device-libs/usr/lib/x86_64-linux-gnu:$root/.device-libs/lib/x86_64-linux-gnu:$extra:${LD_LIBRARY_PATH:-}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ldd build-gpu/tests/gpu_test | grep -E "nccl|cudart|not found" || true
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
echo "== gpu tests"
build-gpu/tests/gpu_test --gtest_brief=0 2>&1 | tee "$out/gpu_test.log" | tail -20
echo "== device save/load vs pinned cudaMemcpy"
dir=/dev/shm/ckptdb-gpu-bench
build-gpu/bench/ckpt-gpu-bench --dir "$dir" --gib 2 --repeat 3 2>&1 | tee "$out/gpu_bench.log"
build-gpu/bench/ckpt-gpu-bench --dir "$dir" --gib 8 --tensors 128 --repeat 2 2>&1 | tee -a "$out/gpu_bench.log"
