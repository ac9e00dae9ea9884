#!/usr/bin/env bash
# GPU verification of the cuDNN path, on the device machine, from the repository root, in stages that each fit one
# device command (the device tool stops a command after 10 minutes and may start a fresh, bare machine for the next):
#
#     bash scripts/gpu_check.sh [--dry-run] [--wheel DIR] STAGE... [-- PYTEST_ARG...]
#
# lab/gpu-verification.md's runbook gives the five commands that verify the backlog, what proves most first, with their
# expected durations (estimates: no stage of this script has been timed on a GPU yet).
#
# Getting the extension there without rebuilding in every command:
#   --wheel DIR  installs the jax_cudnn_rnn wheel in DIR that is built for this Python (pip --no-deps --no-index
#                --force-reinstall) before the stages run, e.g. a wheel carried in dist/ (git-ignored: name it in the
#                device tool's `carry`). It must match the device's Python (cp312 on the lent machines): build it on
#                the CPU machine with `PYTHON=python3.12 bash scripts/build_wheel.sh dist` (an isolated build: the
#                pinned oldest jaxlib's FFI headers and cuDNN's, as a user's wheel is built).
#   wheel        builds a wheel here (pip wheel --no-build-isolation --no-deps, JAX_CUDNN_RNN_CUDA=ON) into the log
#                directory, so that it comes back with $OUT to be carried by later commands, and installs it. It
#                compiles against this machine's jaxlib, not the pinned oldest one: a fallback, not the user's build.
#   build        builds in place instead (pip install --no-build-isolation --no-deps -e .), as before.
#   CUDNN_HEADERS=DIR  the wheel and build stages compile against the cuDNN headers in DIR (e.g. 9.12's, carried in
#                dist/: the binary an isolated build makes) and link this machine's libcudnn.so.9.
# Every test command runs with PYTHONSAFEPATH=1, so the installed package is imported and not the source checkout.
#
# Stages, run in the order given (none given: $GPU_CHECK_STAGES, else "load"):
#   first      a lending's first command (issue 52): the most proof in at most 8 minutes, each part under a hard cap
#              (coreutils timeout; FIRST_CAPS) so that the command always returns its logs: nvidia-smi, `jax-cudnn-rnn
#              info`, tests/cudnn/test_extension.py and implementation=None picking cuDNN, the float32 matrix against
#              the xla implementation (values and gradients, LSTM/GRU/tanh/relu, both directions, 2 layers, lengths,
#              resets, projection) with one bfloat16 case, then bench config F in float32 and bfloat16 against PyTorch
#   rule       issue 62's command, at most 8 minutes whatever hangs: its parts share one deadline (RULE_SECONDS after
#              the script started, default 465; the carried wheel's install counts), each under a hard cap (its own
#              bound, RULE_CAPS, or what is left, whichever is less; skipped when under 20 s are left), the tune and
#              the benches budgeted (--budget-seconds) so that they stop in time and still write their JSON:
#              nvidia-smi, `info`, the tests touching item 1 (test_algorithm.py, test_gpu_rule.py, the frontends'
#              module tests, cuDNN on single-bias spaces), the extension and a GPU checked, `tune
#              --platform gpu` into this GPU's table (gpu-table.json), `info` again (what decided), the float32 forward
#              traces of configs A and F, ours and PyTorch's (trace-summary.json, traces.tar.gz), bench F in 2 rounds
#              (bench-f.json) and then A-E and G (bench.json) with jcr-default, jcr-flax and PyTorch in float32 and
#              bfloat16, each contender in a process of its own. 7 files come back (the tool's limit is 8)
#   load       nvidia-smi, `jax-cudnn-rnn info` (versions, extension, devices, choices), tests/cudnn/test_extension.py and
#              the test that implementation=None picks cuDNN on this GPU
#   core       the plan, handle pool, donation, platform-choice and export GPU tests, the float32 matrix
#              (test_matches_xla), threads, determinism, and the modules, seed classes and checkpoint on cuDNN
#   features   resets, empty and long sequences (both 65,535-step calls included), lengths, dropout, options,
#              persistent algorithms, TF32, and the GPU fuzz property (FUZZ_EXAMPLES, default 40)
#   memcheck   compute-sanitizer memcheck over four representative tests (MEMCHECK_TESTS)
#   matrix     the float16, bfloat16 and float64 matrix, half-precision gradients against PyTorch's cuDNN RNN, and
#              the weight layout against cuDNN for every configuration
#   bench-f    `jax-cudnn-rnn bench --configs F` (LSTM H128 B32 T1000), float32 and bfloat16, every contender
#   whole      PYTEST_WHOLE run whole (default: the Flax modules, demo and example tests, which pick cuDNN here)
#   tests      the former single run: pytest -m "$PYTEST_SELECT" (default "gpu and not slow") over $PYTEST_EXTRA
#              (default "tests"), then PYTEST_WHOLE; longer than one device command
#   leaks      the leak check (3000 calls in a subprocess allowed 15 minutes: may not fit one command)
#   racecheck  compute-sanitizer racecheck over MEMCHECK_TESTS
#   bench      the whole benchmark suite (BENCH_ARGS, default every GPU configuration in float32 and bfloat16)
#
# Every pytest command, the sanitizer's included, runs with JAX_CUDNN_RNN_REQUIRE_EXTENSION=1 and
# JAX_CUDNN_RNN_REQUIRE_GPU=1 (a missing extension or GPU fails the tests instead of skipping them) and records each
# comparison's error and bound (JAX_CUDNN_RNN_GPU_ERRORS), appended to the stage's log. The bench stages first check
# that the extension is loaded and a GPU is seen.
#
# Options and knobs:
#   --dry-run (or DRY_RUN=1)  prints each stage's commands, one per line as "STAGE: command", and runs nothing
#   -- PYTEST_ARG...          appended to every pytest command of the stages run (quoting kept: -- -x); a -k given
#                             here replaces a stage's own -k (pytest keeps the last)
#   PYTEST_SELECT, PYTEST_EXTRA, PYTEST_WHOLE  the `tests` and `whole` stages' selections; each may be set empty
#                             (PYTEST_EXTRA is split like a shell line: PYTEST_EXTRA='-k "lstm or gru"' is two words)
#   FUZZ_EXAMPLES, MEMCHECK_TESTS (space-separated node ids), BENCH_ARGS (split like PYTEST_EXTRA)
#   PYTEST_WORKERS            pytest-xdist workers where installed (default 4; memcheck and racecheck run without)
#   PYTHON                    the Python to use (default python3)
# Logs go to $OUT (or ./gpu-check-logs): one STAGE.log per stage, the bench's JSON/Markdown/PNG, and a built wheel;
# the device tool brings back at most eight files. Exit status: non-zero when any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."

DRY_RUN="${DRY_RUN:-0}"
WHEEL_DIR=""
STAGES=()
PASSTHROUGH=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --wheel) WHEEL_DIR="${2:?--wheel needs a directory}"; shift ;;
    --wheel=*) WHEEL_DIR="${1#--wheel=}" ;;
    --) shift; PASSTHROUGH=("$@"); break ;;
    -*) echo "gpu_check.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    *) STAGES+=("$1") ;;
  esac
  shift
done
if [ ${#STAGES[@]} -eq 0 ]; then
  read -ra STAGES <<< "${GPU_CHECK_STAGES:-load}"
fi
KNOWN_STAGES=" wheel build first rule load core features memcheck matrix bench-f whole tests leaks racecheck bench "
for stage in "${STAGES[@]}"; do
  if [[ "$KNOWN_STAGES" != *" $stage "* ]]; then
    echo "gpu_check.sh: unknown stage '$stage'; expected one of:$KNOWN_STAGES" >&2
    exit 2
  fi
done

PYTHON="${PYTHON:-python3}"
LOG_DIR="${OUT:-$PWD/gpu-check-logs}"
[ "$DRY_RUN" = 1 ] || mkdir -p "$LOG_DIR"
ERRORS="$LOG_DIR/gpu-errors.jsonl"

# Splits a knob like a shell line (quotes kept together) into the array named by $1, without eval.
split_words() {
  local -n into="$1"
  into=()
  [ -n "$2" ] || return 0
  mapfile -t into < <("$PYTHON" -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])))' "$2")
}

TEST_ENV=(JAX_CUDNN_RNN_REQUIRE_EXTENSION=1 JAX_CUDNN_RNN_REQUIRE_GPU=1 PYTHONSAFEPATH=1
          XLA_PYTHON_CLIENT_PREALLOCATE=false "JAX_CUDNN_RNN_GPU_ERRORS=$ERRORS")
# pytest-xdist and pytest-timeout are on the lent machines; a dry run prints the commands as they would run there.
# A test stopped at --timeout leaves the rest of the command's time, and the logs, to the other tests.
PLUGINS=()
SANITIZER_TIMEOUT=()
if [ "$DRY_RUN" = 1 ] || "$PYTHON" -c "import xdist" 2>/dev/null; then PLUGINS+=(-n "${PYTEST_WORKERS:-4}"); fi
if [ "$DRY_RUN" = 1 ] || "$PYTHON" -c "import pytest_timeout" 2>/dev/null; then
  PLUGINS+=(--timeout 420)
  SANITIZER_TIMEOUT=(--timeout 540)
fi
MEMCHECK_DEFAULT="tests/cudnn/test_cudnn_gpu.py::test_matches_xla[lstm-bidirectional-linear_input-float32-heuristic] \
tests/cudnn/test_cudnn_gpu.py::test_seq_lengths_match_xla[gru-bidirectional] \
tests/cudnn/test_cudnn_gpu.py::test_resets_with_dropout_and_projection_match_xla \
tests/cudnn/test_cudnn_gpu.py::test_eager_vjp_twice_reuses_then_rewrites_the_reserve_space"
read -ra MEMCHECK <<< "${MEMCHECK_TESTS-$MEMCHECK_DEFAULT}"

CURRENT_STAGE=""
STAGE_STATUS=0
FAILED=()
CAP=()  # set by `capped` for one command: a hard time limit on it

# capped SECONDS COMMAND...: runs one run_cmd/pytest_cmd command under `timeout` (then SIGKILL 10 s later); a command
# stopped so exits 124 (137 when killed) and the stage counts as failed, its log kept.
capped() {
  local seconds="$1"
  shift
  CAP=(timeout -k 10 "$seconds")
  "$@"
  local status=$?
  CAP=()
  return "$status"
}

# Runs one command of the current stage, its output appended to the stage's log; under --dry-run prints it instead.
run_cmd() {
  if [ "$DRY_RUN" = 1 ]; then
    printf '%s:' "$CURRENT_STAGE"
    printf ' %q' "${CAP[@]}" "$@"
    printf '\n'
    return 0
  fi
  local log="$LOG_DIR/$CURRENT_STAGE.log" started=$SECONDS
  { printf '\n$'; printf ' %q' "${CAP[@]}" "$@"; printf '\n'; } | tee -a "$log"
  "${CAP[@]}" "$@" 2>&1 | tee -a "$log"
  local status=${PIPESTATUS[0]}
  echo "[exit status $status after $((SECONDS - started)) s]" | tee -a "$log"
  [ "$status" -eq 0 ] || STAGE_STATUS=$status
  return "$status"
}

# One pytest command with the REQUIRE flags and the error record; extra environment as leading NAME=value words.
pytest_cmd() {
  local env_extra=()
  while [ $# -gt 0 ] && [[ "$1" =~ ^[A-Z_][A-Z0-9_]*= ]]; do env_extra+=("$1"); shift; done
  run_cmd env "${TEST_ENV[@]}" "${env_extra[@]}" "$PYTHON" -m pytest -rfEs -p no:cacheprovider "${PLUGINS[@]}" \
    "$@" "${PASSTHROUGH[@]}"
}

sanitizer_cmd() {  # sanitizer_cmd TOOL: compute-sanitizer over MEMCHECK_TESTS, one process, no xdist
  if [ "$DRY_RUN" != 1 ] && ! command -v compute-sanitizer >/dev/null; then
    echo "compute-sanitizer is not on the PATH: stage $CURRENT_STAGE cannot run" | tee -a "$LOG_DIR/$CURRENT_STAGE.log"
    STAGE_STATUS=127
    return
  fi
  # What the sanitizer runs under goes into the log: it has been seen refusing an H200 under gVisor (run it on an H100).
  run_cmd uname -r
  run_cmd compute-sanitizer --version
  # XLA's own allocator, not its pool: a pooled allocation hides an out-of-bounds write into the workspace or the
  # reserve space from the sanitizer, which sees only the pool's one large buffer.
  run_cmd env "${TEST_ENV[@]}" XLA_PYTHON_CLIENT_ALLOCATOR=platform compute-sanitizer --tool "$1" --error-exitcode 99 \
    "$PYTHON" -m pytest -rfEs -p no:cacheprovider -p no:xdist "${SANITIZER_TIMEOUT[@]}" "${MEMCHECK[@]}" \
    "${PASSTHROUGH[@]}"
}

require_cudnn_gpu() {  # the bench skips contenders that cannot run: make a missing extension or GPU fail the stage
  local check='import jax, jax_cudnn_rnn as j; assert j.extension_loaded(), j.extension_error(); '
  check+='assert any(d.platform == "gpu" for d in jax.devices()), jax.devices(); print("GPUs:", jax.devices())'
  run_cmd env PYTHONSAFEPATH=1 "$PYTHON" -c "$check"
}

# Installs the wheel in $1 built for this Python.
install_wheel() {
  local tag wheels=()
  tag="$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  if [ -d "$1" ]; then mapfile -t wheels < <(ls -t "$1"/jax_cudnn_rnn-*-"$tag"-"$tag"-*.whl 2>/dev/null); fi
  if [ ${#wheels[@]} -eq 0 ]; then
    if [ "$DRY_RUN" = 1 ]; then
      run_cmd "$PYTHON" -m pip install --no-deps --no-index --force-reinstall "$1/jax_cudnn_rnn-*-$tag-$tag-*.whl"
      return 0
    fi
    printf '%s\n' "gpu_check.sh: no jax_cudnn_rnn wheel for $tag ($("$PYTHON" --version 2>&1)) in '$1' (found:" \
      "$(ls "$1" 2>&1 | tr '\n' ' ')); build one for this Python with the wheel stage (or scripts/build_wheel.sh with" \
      "PYTHON set to a matching interpreter) and carry it" | tr '\n' ' ' | tee -a "$LOG_DIR/$CURRENT_STAGE.log" >&2
    echo >&2
    STAGE_STATUS=1
    return 1
  fi
  run_cmd "$PYTHON" -m pip install --no-deps --no-index --force-reinstall "${wheels[0]}"
}

# The build's environment: JAX_CUDNN_RNN_CUDA=ON, the CUDA toolkit where nvcc is not on the PATH, and with
# CUDNN_HEADERS a cuDNN root whose include/ is that directory and whose lib/ is the installed nvidia-cudnn-cu13's:
# the extension then compiles against those headers (the isolated build's pinned oldest cuDNN, carried in dist/) and
# runs on this machine's newer libcudnn, as a user's binary does.
BUILD_ENV=()
build_env() {
  BUILD_ENV=(JAX_CUDNN_RNN_CUDA=ON)
  if [ -z "${CUDAToolkit_ROOT:-}" ] && ! command -v nvcc >/dev/null && [ -d /usr/local/cuda ]; then
    BUILD_ENV+=(CUDAToolkit_ROOT=/usr/local/cuda)
  fi
  if [ -n "${CUDNN_HEADERS:-}" ]; then
    local root="${TMPDIR:-/tmp}/gpu-check-cudnn-root" lib
    if ! lib="$("$PYTHON" -c 'import nvidia.cudnn as m, os; print(os.path.join(list(m.__path__)[0], "lib"))')"; then
      [ "$DRY_RUN" = 1 ] || { STAGE_STATUS=1; return 1; }
    fi
    if [ "$DRY_RUN" != 1 ]; then
      [ -f "$CUDNN_HEADERS/cudnn_version.h" ] || { echo "CUDNN_HEADERS=$CUDNN_HEADERS has no cudnn_version.h" >&2
                                                   STAGE_STATUS=1; return 1; }
      rm -rf "$root" && mkdir -p "$root" && ln -s "$(cd "$CUDNN_HEADERS" && pwd)" "$root/include" &&
        ln -s "$lib" "$root/lib" || { STAGE_STATUS=1; return 1; }
    fi
    BUILD_ENV+=("CUDNN_ROOT=$root")
  fi
}

stage_wheel() {
  build_env || return
  run_cmd env "${BUILD_ENV[@]}" "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$LOG_DIR" . || return
  install_wheel "$LOG_DIR"
}

stage_build() {
  build_env || return
  run_cmd env "${BUILD_ENV[@]}" "$PYTHON" -m pip install -v --no-build-isolation --no-deps -e .
}

# The first command's parts and their caps in seconds (FIRST_CAPS="smi info load matrix bench"): with the wheel's
# install (30 s) and each cap's 10 s before SIGKILL, 470 s at most, so that the command stays under 8 minutes (480 s)
# whatever hangs.
read -ra FIRST_CAP <<< "${FIRST_CAPS:-10 40 60 160 110}"
# The float32 matrix against the xla implementation (32 cases: 4 modes x 2 directions x 2 input modes x the heuristic
# and standard algorithms, 2 layers each), lengths (6), resets (6), projection (2 + resets with dropout and
# projection), the single-bias weight spaces of the Flax and Equinox modules (4: cuDNN refused them with a persistent
# algorithm on an H200) and one bfloat16 case: 52 tests.
FIRST_MATRIX="(test_matches_xla and float32) or test_seq_lengths_match_xla or test_resets_match_xla or \
(test_options_match_xla and proj) or test_resets_with_dropout_and_projection_match_xla or single_bias or \
test_matches_xla[lstm-bidirectional-linear_input-bfloat16-heuristic]"

stage_first() {
  capped "${FIRST_CAP[0]}" run_cmd nvidia-smi
  capped "${FIRST_CAP[1]}" run_cmd env PYTHONSAFEPATH=1 "$PYTHON" -m jax_cudnn_rnn.tools.cli info
  # -v: each test's name and result as it ends, so that a part stopped at its cap still logs what passed.
  capped "${FIRST_CAP[2]}" pytest_cmd -v tests/cudnn/test_extension.py \
    tests/cudnn/test_cudnn_gpu.py::test_default_implementation_on_gpu_is_cudnn
  capped "${FIRST_CAP[3]}" pytest_cmd -v -m gpu tests/cudnn/test_cudnn_gpu.py -k "$FIRST_MATRIX"
  # Config F (LSTM H128 B32 T1000), float32 and bfloat16: rnn()'s default (cuDNN here) against PyTorch's cuDNN LSTM,
  # each in a fresh process; the JSON and Markdown come back with the logs.
  capped "${FIRST_CAP[4]}" run_cmd env PYTHONSAFEPATH=1 "$PYTHON" -m jax_cudnn_rnn.tools.cli bench --configs F \
    --dtypes float32,bfloat16 --contenders jcr-default,torch --json "$LOG_DIR/bench-f.json" \
    --markdown "$LOG_DIR/bench-f.md"
}

# The rule stage's parts, in order, with their own bounds in seconds (RULE_CAPS, the same order), and its deadline
# (RULE_SECONDS after the script started): lab/gpu-verification.md's runbook gives what each part is expected to
# take. RULE_PARTS runs only those named (e.g. without "tune" once this GPU's table ships). The tune and the benches
# get --budget-seconds 25 s short of their cap, or of what is left.
RULE_NAMES=(smi info tests check tune info-after trace bench-f bench)
read -ra RULE_CAP <<< "${RULE_CAPS:-10 30 90 30 120 30 60 100 300}"
read -ra RULE_PARTS <<< "${RULE_PARTS-${RULE_NAMES[*]}}"
RULE_SECONDS="${RULE_SECONDS:-465}"
# XLA's compilations shared by the stage's processes (the bench's second round of F, the programs the tune, the
# traces and the bench compile alike), outside $OUT; the package itself never sets this.
RULE_ENV=(PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
          "JAX_COMPILATION_CACHE_DIR=${TMPDIR:-/tmp}/gpu-check-xla-cache")

# The cap of rule part $1 (its index in RULE_NAMES), or nothing when RULE_PARTS leaves it out.
rule_cap() {
  local i
  [[ " ${RULE_PARTS[*]} " == *" $1 "* ]] || return 1
  for i in "${!RULE_NAMES[@]}"; do
    if [ "${RULE_NAMES[$i]}" = "$1" ]; then echo "${RULE_CAP[$i]}"; return 0; fi
  done
  return 1
}

# part NAME COMMAND...: rule part NAME, `capped` at its cap or at what is left before RULE_SECONDS (less the 10 s the
# kill may take), whichever is less; not run when RULE_PARTS leaves it out, skipped, saying so, when under 20 s are
# left.
part() {
  local name="$1" own left=$((RULE_SECONDS - SECONDS - 10))
  shift
  own="$(rule_cap "$name")" || return 0
  if [ "$DRY_RUN" != 1 ] && [ "$left" -lt 20 ]; then
    echo "skipped $name, the command's ${RULE_SECONDS} s are spent: $*" | tee -a "$LOG_DIR/$CURRENT_STAGE.log"
    STAGE_STATUS=124
    return 124
  fi
  if [ "$DRY_RUN" != 1 ] && [ "$left" -lt "$own" ]; then own=$left; fi
  capped "$own" "$@"
}

# budget_for NAME: what rule part NAME, which bounds itself (tune, bench), may plan for: 25 s short of its cap, or of
# what is left, whichever is less (at least 1 s: the part then starts nothing and writes what it has).
budget_for() {
  local budget left=$((RULE_SECONDS - SECONDS - 35))
  budget=$(($(rule_cap "$1" || echo 26) - 25))
  if [ "$DRY_RUN" != 1 ] && [ "$left" -lt "$budget" ]; then budget=$left; fi
  [ "$budget" -ge 1 ] || budget=1
  echo "$budget"
}

stage_rule() {
  local contenders="jcr-default,jcr-flax,torch" cli=("$PYTHON" -m jax_cudnn_rnn.tools.cli)
  part smi run_cmd nvidia-smi
  part info run_cmd env PYTHONSAFEPATH=1 "${cli[@]}" info
  # Item 1: every frontend's default module on the double-bias space gets the algorithm rnn() with double biases
  # gets (CPU tests, on the device's jax), the GPU rule (CPU tests), and the linen and NNX modules on cuDNN against
  # the oracle, with cuDNN's single-bias spaces.
  part tests pytest_cmd -v tests/cudnn/test_algorithm.py tests/cudnn/test_gpu_rule.py \
    tests/frontends/test_module_values.py tests/cudnn/test_cudnn_gpu.py -k "not test_cudnn_gpu or single_bias"
  part check require_cudnn_gpu || return
  # Item 2: this GPU's table, the configs the issue names first (F and A), in this process (time: the runbook).
  part tune run_cmd env "${RULE_ENV[@]}" "${cli[@]}" tune --platform gpu --same-process \
    --configs F,A,B,G-b1,G-b64,E,C,D --budget-seconds "$(budget_for tune)" --gpu-json "$LOG_DIR/gpu-table.json"
  part info-after run_cmd env PYTHONSAFEPATH=1 "${cli[@]}" info
  # Item 3: where the float32 forward's time goes at A and F, ours (cuDNN) and PyTorch's.
  part trace run_cmd env "${RULE_ENV[@]}" "$PYTHON" benchmarks/trace_forward.py --configs A,F \
    --contenders jcr-cudnn,torch --calls 10 --summary "$LOG_DIR/trace-summary.json" \
    --archive "$LOG_DIR/traces.tar.gz"
  # Item 4: the bench, F in two rounds first (its bfloat16 moved by a third between two commands), then the rest.
  part bench-f run_cmd env "${RULE_ENV[@]}" "${cli[@]}" bench --configs F --dtypes float32,bfloat16 \
    --contenders "$contenders" --rounds 2 --budget-seconds "$(budget_for bench-f)" --json "$LOG_DIR/bench-f.json"
  part bench run_cmd env "${RULE_ENV[@]}" "${cli[@]}" bench --configs A,B,C,D,E,G-b1,G-b64 \
    --dtypes float32,bfloat16 --contenders "$contenders" --budget-seconds "$(budget_for bench)" \
    --json "$LOG_DIR/bench.json"
}

stage_load() {
  run_cmd nvidia-smi
  run_cmd env PYTHONSAFEPATH=1 "$PYTHON" -m jax_cudnn_rnn.tools.cli info
  pytest_cmd tests/cudnn/test_extension.py tests/cudnn/test_cudnn_gpu.py::test_default_implementation_on_gpu_is_cudnn
}

stage_core() {
  pytest_cmd -m gpu tests/cudnn/test_cudnn_gpu.py -k "trace_time or second_gpu or eager_vjp or cpu_placed or \
reserve_space or vmap_folds or batch_sharded or heuristic_and_autotune or inference_and_training or \
(test_matches_xla and float32)"
  pytest_cmd -m gpu tests/cudnn/test_export.py tests/core/test_concurrency.py tests/core/test_determinism.py \
    tests/frontends/test_module_values.py tests/frontends/test_seed_classes.py tests/core/test_checkpoint.py
}

stage_features() {
  pytest_cmd "JAX_CUDNN_RNN_FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-40}" -m gpu tests/cudnn/test_cudnn_gpu.py tests/backends/test_fuzz.py \
    tests/backends/test_padding_values.py -k "padding_values or resets or empty_sequences or longer_than or max_time_steps or seq_lengths or outputs_past_length or \
lengths_above or packed_and_padded or dropout or options or single_bias or persist_static or allow_tf32 or \
cudnn_matches_the_oracle"
}

stage_memcheck() { sanitizer_cmd memcheck; }
stage_racecheck() { sanitizer_cmd racecheck; }

stage_matrix() {
  pytest_cmd -m gpu tests/cudnn/test_cudnn_gpu.py tests/cudnn/test_cudnn_layout.py \
    -k "(test_matches_xla and (float16 or bfloat16 or float64)) or half_gradients_match_pytorch or layout_matches_cudnn"
}

stage_bench_f() {
  require_cudnn_gpu || return
  run_cmd env PYTHONSAFEPATH=1 "$PYTHON" -m jax_cudnn_rnn.tools.cli bench --configs F --json "$LOG_DIR/bench-f.json" \
    --markdown "$LOG_DIR/bench-f.md" --plot "$LOG_DIR/bench-f.png"
}

stage_bench() {
  local args=()
  split_words args "${BENCH_ARGS-}"
  require_cudnn_gpu || return
  run_cmd env PYTHONSAFEPATH=1 "$PYTHON" -m jax_cudnn_rnn.tools.cli bench "${args[@]}" --json "$LOG_DIR/bench.json" \
    --markdown "$LOG_DIR/bench.md" --plot "$LOG_DIR/bench.png"
}

stage_whole() {
  local whole=()
  split_words whole "${PYTEST_WHOLE-tests/frontends/test_flax_modules.py tests/tools/test_demo.py tests/tools/test_examples.py}"
  [ ${#whole[@]} -eq 0 ] || pytest_cmd "${whole[@]}"
}

stage_tests() {
  local extra=()
  split_words extra "${PYTEST_EXTRA-tests}"
  pytest_cmd "JAX_CUDNN_RNN_FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-100}" -m "${PYTEST_SELECT-gpu and not slow}" \
    --continue-on-collection-errors "${extra[@]}"
  stage_whole
}

stage_leaks() { pytest_cmd -m "gpu and slow" tests/cudnn/test_leaks_gpu.py; }

# Appends the comparisons' recorded errors to the stage's log.
collect_errors() {
  [ "$DRY_RUN" = 1 ] && return
  if [ -f "$ERRORS" ]; then
    { echo "===== measured errors (test, quantity, error, bound) ====="; cat "$ERRORS"; } \
      >> "$LOG_DIR/$CURRENT_STAGE.log"
    rm -f "$ERRORS"
  fi
}

if [ -n "$WHEEL_DIR" ]; then
  CURRENT_STAGE=install
  # Capped only where the first or the rule stage runs (their 8 minutes); pip from a local file takes seconds.
  if [[ " ${STAGES[*]} " == *" first "* || " ${STAGES[*]} " == *" rule "* ]]; then CAP=(timeout -k 10 30); fi
  if ! install_wheel "$WHEEL_DIR"; then
    echo "gpu_check.sh: installing the wheel failed; no stage ran" >&2
    exit 1
  fi
  CAP=()
fi

for stage in "${STAGES[@]}"; do
  CURRENT_STAGE="$stage"
  STAGE_STATUS=0
  [ "$DRY_RUN" = 1 ] || printf '\n===== stage %s =====\n' "$stage" | tee -a "$LOG_DIR/$stage.log"
  "stage_${stage//-/_}"
  collect_errors
  [ "$STAGE_STATUS" -eq 0 ] || FAILED+=("$stage (status $STAGE_STATUS)")
done

[ "$DRY_RUN" = 1 ] && exit 0
echo
if [ ${#FAILED[@]} -eq 0 ]; then
  echo "gpu_check.sh: every stage passed (${STAGES[*]}); logs in $LOG_DIR"
else
  echo "gpu_check.sh: failed: ${FAILED[*]}; logs in $LOG_DIR"
  exit 1
fi
