#!/usr/bin/env bash
# GPU verification of the cuDNN path, run on the device machine from the repository root:
#
#     bash scripts/gpu_check.sh            # logs go to $OUT (or ./gpu-check-logs when $OUT is unset)
#
# Builds the extension into the current Python (no network: --no-build-isolation --no-deps, so the machine must
# already have jax with its CUDA plugin, nvidia-cudnn-cu13, scikit-build-core, pybind11, cmake and a CUDA toolkit),
# prints the versions that matter, runs every test marked `gpu`, the benchmark suite (`jax-cudnn-rnn bench`), the leak
# check, and compute-sanitizer's memcheck and racecheck over a subset of the GPU tests.
# Exit status: non-zero when the build or the GPU tests fail.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG_DIR="${OUT:-$PWD/gpu-check-logs}"
mkdir -p "$LOG_DIR"
PYTHON="${PYTHON:-python3}"

section() { printf '\n===== %s =====\n' "$1"; }

{
  section "versions"
  nvidia-smi || echo "nvidia-smi failed"
  "$PYTHON" --version
  "$PYTHON" - <<'PY'
import importlib.metadata as md
for name in ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt", "nvidia-cudnn-cu13", "scikit-build-core",
             "pybind11", "torch"):
    try:
        print(f"{name}: {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name}: not installed")
import jax
print("jax devices:", jax.devices())
PY
  command -v cmake >/dev/null && cmake --version | head -1 || echo "cmake: not on PATH"
  command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "nvcc: not on PATH"
} 2>&1 | tee "$LOG_DIR/versions.log"

section "build (JAX_CUDNN_RNN_CUDA=ON)"
if [ -z "${CUDAToolkit_ROOT:-}" ] && ! command -v nvcc >/dev/null && [ -d /usr/local/cuda ]; then
  export CUDAToolkit_ROOT=/usr/local/cuda
fi
JAX_CUDNN_RNN_CUDA=ON "$PYTHON" -m pip install -v --no-build-isolation --no-deps -e . 2>&1 | tee "$LOG_DIR/build.log"
build_status=${PIPESTATUS[0]}
if [ "$build_status" -ne 0 ]; then
  echo "BUILD FAILED (status $build_status); see $LOG_DIR/build.log"
  exit "$build_status"
fi

{
  section "extension"
  "$PYTHON" - <<'PY'
import jax_cudnn_rnn._extension as ext
print("extension_loaded:", ext.extension_loaded(), "| error:", ext.extension_error())
print("registered targets:", ext.registered_targets())
if ext.extension_loaded():
    m = ext.module()
    print("cuDNN runtime version:", m.cudnn_version(), "| built against:", m.CUDNN_BUILD_VERSION)
    print("module file:", m.__file__)
PY
} 2>&1 | tee "$LOG_DIR/extension.log"

section "pytest -m gpu"
# Collection errors in unrelated test files (a missing optional dependency) must not hide the GPU results.
JAX_CUDNN_RNN_REQUIRE_EXTENSION=1 "$PYTHON" -m pytest -m gpu -v -rs --continue-on-collection-errors \
  --junitxml="$LOG_DIR/pytest-gpu.xml" tests 2>&1 | tee "$LOG_DIR/pytest-gpu.log"
test_status=${PIPESTATUS[0]}
JAX_CUDNN_RNN_REQUIRE_EXTENSION=1 "$PYTHON" -m pytest -v tests/test_extension.py 2>&1 | tee "$LOG_DIR/pytest-extension.log"
extension_status=${PIPESTATUS[0]}

section "benchmarks"
# Every contender in one process per run: this op (cudnn, xla), Flax, jax.experimental.rnn, PyTorch's cuDNN RNN.
jax-cudnn-rnn bench --json "$LOG_DIR/bench.json" --plot "$LOG_DIR/bench.png" --markdown "$LOG_DIR/bench.md" \
  2>&1 | tee "$LOG_DIR/bench.log"
"$PYTHON" benchmarks/leak_check.py --calls 3000 --implementation cudnn 2>&1 | tee "$LOG_DIR/leak_check.log"

section "compute-sanitizer"
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 99 "$PYTHON" -m pytest -q -x tests/test_cudnn_gpu.py \
      -k "matches_xla and float32 and linear_input" 2>&1 | tee "$LOG_DIR/sanitizer-$tool.log"
    echo "compute-sanitizer $tool status: ${PIPESTATUS[0]}"
  done
else
  echo "compute-sanitizer: not on PATH"
fi

echo
echo "pytest -m gpu status: $test_status; test_extension status: $extension_status; logs in $LOG_DIR"
[ "$test_status" -eq 0 ] && [ "$extension_status" -eq 0 ]
