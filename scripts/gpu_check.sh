#!/usr/bin/env bash
# GPU verification of the cuDNN path, run on the device machine from the repository root:
#
#     bash scripts/gpu_check.sh            # logs go to $OUT (or ./gpu-check-logs when $OUT is unset)
#
# Logs (at most eight files, what the device tool brings back): env.log, build.log, pytest-gpu.log, bench.{log,json,md,png},
# sanitizer.log.
#
# Builds the extension into the current Python (no network: --no-build-isolation --no-deps, so the machine must
# already have jax with its CUDA plugin, nvidia-cudnn-cu13, scikit-build-core, pybind11, cmake and a CUDA toolkit),
# prints the versions that matter, runs every test marked `gpu` (the leak and determinism checks among them), the
# benchmark suite (`jax-cudnn-rnn bench`), and compute-sanitizer's memcheck and racecheck over a subset of the GPU
# tests.
#
# Knobs (environment), so that one device session can spend its few long calls where they are needed:
#   GPU_CHECK_STAGES  stages to run, in this order (default "build tests bench sanitizer")
#   PYTEST_SELECT     the pytest -m expression (default "gpu"; e.g. "gpu and not slow")
#   PYTEST_EXTRA      more pytest arguments (e.g. "-k lstm" or a test file)
#   PYTEST_WHOLE      test files run whole, unfiltered by marker, on the GPU (implementation=None picks cuDNN there)
#   FUZZ_EXAMPLES     examples of the GPU fuzz property in tests/test_fuzz.py (default 100; CI's CPU run draws 12)
#   PYTEST_WORKERS    pytest-xdist workers (default 4; a crashing test then costs one worker, not the run)
#   BENCH_ARGS        arguments of `jax-cudnn-rnn bench` (default: every GPU configuration, f32 and bf16)
#   SANITIZER_TOOLS   compute-sanitizer tools (default "memcheck racecheck")
#   SANITIZER_SELECT  the pytest -k expression they run (default "matches_xla and float32 and linear_input")
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
} 2>&1 | tee "$LOG_DIR/env.log"

STAGES="${GPU_CHECK_STAGES:-build tests bench sanitizer}"
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }

if has_stage build; then
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
} 2>&1 | tee -a "$LOG_DIR/env.log"

test_status=0
JAX_CUDNN_RNN_REQUIRE_EXTENSION=1 "$PYTHON" -m pytest -q tests/test_extension.py 2>&1 | tee -a "$LOG_DIR/env.log"
extension_status=${PIPESTATUS[0]}

if has_stage tests; then
  section "pytest -m ${PYTEST_SELECT:-gpu}"
  plugins=()
  "$PYTHON" -c "import xdist" 2>/dev/null && plugins+=(-n "${PYTEST_WORKERS:-4}")
  "$PYTHON" -c "import pytest_timeout" 2>/dev/null && plugins+=(--timeout 600)
  # Workers share the GPU: no preallocation. Collection errors in unrelated test files (a missing optional
  # dependency) must not hide the GPU results.
  # Every comparison of test_cudnn_gpu.py records its error and bound (JSON lines, appended to the log below).
  errors="$LOG_DIR/gpu-errors.jsonl"
  rm -f "$errors"
  # shellcheck disable=SC2086
  XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_CUDNN_RNN_REQUIRE_EXTENSION=1 JAX_CUDNN_RNN_REQUIRE_GPU=1 \
    JAX_CUDNN_RNN_GPU_ERRORS="$errors" JAX_CUDNN_RNN_FUZZ_EXAMPLES="${FUZZ_EXAMPLES:-100}" \
    "$PYTHON" -m pytest -m "${PYTEST_SELECT:-gpu}" \
    "${plugins[@]}" -rfEs --continue-on-collection-errors \
    ${PYTEST_EXTRA:-tests} 2>&1 | tee "$LOG_DIR/pytest-gpu.log"
  test_status=${PIPESTATUS[0]}
  # The module, demo and example tests leave implementation=None, which is cuDNN on a GPU: run them whole here too.
  section "pytest ${PYTEST_WHOLE:-tests/test_flax_modules.py tests/test_demo.py tests/test_examples.py}" \
    | tee -a "$LOG_DIR/pytest-gpu.log"
  # shellcheck disable=SC2086
  XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_CUDNN_RNN_REQUIRE_EXTENSION=1 JAX_CUDNN_RNN_REQUIRE_GPU=1 \
    "$PYTHON" -m pytest "${plugins[@]}" -rfEs \
    ${PYTEST_WHOLE:-tests/test_flax_modules.py tests/test_demo.py tests/test_examples.py} 2>&1 \
    | tee -a "$LOG_DIR/pytest-gpu.log"
  whole_status=${PIPESTATUS[0]}
  [ "$test_status" -eq 0 ] && test_status=$whole_status
  if [ -f "$errors" ]; then
    section "measured errors (test, quantity, error, bound)" | tee -a "$LOG_DIR/pytest-gpu.log"
    cat "$errors" >> "$LOG_DIR/pytest-gpu.log"
    rm -f "$errors"
  fi
fi

if has_stage bench; then
  section "benchmarks"
  # Every contender in one process per run: this op (cudnn, xla), Flax, jax.experimental.rnn, PyTorch's cuDNN RNN.
  # shellcheck disable=SC2086
  jax-cudnn-rnn bench ${BENCH_ARGS:-} --json "$LOG_DIR/bench.json" --plot "$LOG_DIR/bench.png" \
    --markdown "$LOG_DIR/bench.md" 2>&1 | tee "$LOG_DIR/bench.log"
fi

if has_stage sanitizer && command -v compute-sanitizer >/dev/null; then
  section "compute-sanitizer"
  for tool in ${SANITIZER_TOOLS:-memcheck racecheck}; do
    XLA_PYTHON_CLIENT_PREALLOCATE=false compute-sanitizer --tool "$tool" --error-exitcode 99 "$PYTHON" -m pytest -q -x \
      tests/test_cudnn_gpu.py -k "${SANITIZER_SELECT:-matches_xla and float32 and linear_input}" 2>&1 \
      | tee -a "$LOG_DIR/sanitizer.log"
    echo "compute-sanitizer $tool status: ${PIPESTATUS[0]}"
  done
elif has_stage sanitizer; then
  echo "compute-sanitizer: not on PATH" | tee -a "$LOG_DIR/sanitizer.log"
fi

echo
echo "pytest -m gpu status: $test_status; test_extension status: $extension_status; logs in $LOG_DIR"
[ "$test_status" -eq 0 ] && [ "$extension_status" -eq 0 ]
