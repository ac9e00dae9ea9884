"""Guards against testing a stale copy: after a non-editable install (the README's test command) the tests import the
installed package; if its Python files differ from this checkout's, the run stops and says how to reinstall. And tests
marked ``gpu`` need the cuDNN extension and a CUDA device: they skip without them, or fail where the run requires them
(tests/skips.py: JAX_CUDNN_RNN_REQUIRE_EXTENSION, JAX_CUDNN_RNN_REQUIRE_GPU)."""

import filecmp
import glob
import os
import pathlib
import shutil
import tempfile

# XLA's compilations go to a disk cache for the session, set before anything imports jax (jax reads these when it is
# imported): the xdist workers and the child Pythons the tests start inherit the folder, so that a computation that
# several tests, workers or children compile (the same network under jit in a frontend's, a backend's and a
# transformation's test) compiles once: tests/frontends with test_gradients.py took 274 s with it, 311 without (2
# workers, 2-core Zen 4, 2026-11-28). The process that makes the folder removes it at the end. The tests set this for
# themselves; the package never does.
_XLA_CACHE = None
_NO_TUNED_TABLE = None  # this process's empty folder for tuned tables (pytest_sessionstart), removed at its end
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _XLA_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jcr-tests-xla-cache-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import pytest  # noqa: E402
from cudnn_stand_in import CudnnStandIn  # noqa: E402
from skips import REQUIRE_EXTENSION, REQUIRE_GPU, skip_or_fail  # noqa: E402

SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jax_cudnn_rnn")


# The longest files (serial, 2026-11-26: the floor-jax venvs 170 s, then 45-80 s each) go first, so that under the test
# command's `--dist loadfile` (a file per worker) no long file starts last and runs alone while the other workers idle
# (a clean-clone CI run here ended on a 4-minute tail). The rest keep their order; so does each file's own.
SLOW_FILES_FIRST = (
    "packaging/test_jax_floor.py",
    "backends/test_general_cells.py",
    "onednn/test_onednn.py",
    "frontends/test_keras.py",
    "packaging/test_readme.py",
    "packaging/test_wheel.py",
)


def pytest_configure(config):
    # pytest-xdist (3.6 and later) hands out the files with the most tests first unless told not to, which put the
    # floor-jax venvs (4 tests, the longest file) last; it then keeps SLOW_FILES_FIRST's order.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_unconfigure(config):
    if _XLA_CACHE is not None:
        shutil.rmtree(_XLA_CACHE, ignore_errors=True)
    if _NO_TUNED_TABLE is not None:
        shutil.rmtree(_NO_TUNED_TABLE, ignore_errors=True)


def pytest_collection_modifyitems(session, config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    rank = {os.path.join(here, name): i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))


def pytest_sessionstart(session):
    import jax_cudnn_rnn
    from jax_cudnn_rnn.backends import tuned_files
    from jax_cudnn_rnn.backends.cudnn import tuned as gpu_tuned
    from jax_cudnn_rnn.backends.onednn import tuned

    # The tests decide with the shipped rules, never with a tuned table (`jax-cudnn-rnn tune`) of the machine that runs
    # them, CPU or GPU: tuned tables are looked for in an empty directory (tests/tools/test_tune.py writes its own).
    global _NO_TUNED_TABLE
    empty = _NO_TUNED_TABLE = tempfile.mkdtemp(prefix="jcr-tests-no-tuned-table-")
    tuned_files.cache_dir = lambda: pathlib.Path(empty)
    tuned.this_machine.cache_clear()
    gpu_tuned._read.cache_clear()
    _check_installed_copy(jax_cudnn_rnn)


def _check_installed_copy(jax_cudnn_rnn):
    installed = os.path.dirname(os.path.abspath(jax_cudnn_rnn.__file__))
    if os.path.realpath(installed) == os.path.realpath(SOURCE):
        return
    sources = sorted(
        os.path.relpath(path, SOURCE) for path in glob.glob(os.path.join(SOURCE, "**", "*.py"), recursive=True)
    )
    missing = [name for name in sources if not os.path.exists(os.path.join(installed, name))]
    stale = [
        name
        for name in sources
        if name not in missing
        and not filecmp.cmp(os.path.join(SOURCE, name), os.path.join(installed, name), shallow=False)
    ]
    if stale or missing:
        pytest.exit(
            f"the jax_cudnn_rnn being tested ({installed}) is not this checkout's: "
            f'{", ".join(stale + missing)} differ. Reinstall it (`.venv/bin/pip install ".[test]"`), or '
            f"develop with an editable install (README, Fresh machine)",
            returncode=4,
        )


def cudnn_gpu_missing() -> tuple[str, str] | None:
    """(what is missing, the flag that requires it), or None when cuDNN can run here."""
    import jax

    from jax_cudnn_rnn.backends.cudnn import extension as _extension

    if not _extension.extension_loaded():
        return f"the cuDNN extension is not loaded: {_extension.extension_error()}", REQUIRE_EXTENSION
    if not any(device.platform == "gpu" for device in jax.devices()):
        return "JAX sees no CUDA device", REQUIRE_GPU
    return None


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None:
        missing = cudnn_gpu_missing()
        if missing is not None:
            skip_or_fail(*missing)


@pytest.fixture
def cudnn_stand_in():
    """cuDNN's kernels stood in for on the CPU for the test's duration (``support.CudnnStandIn``)."""
    with CudnnStandIn() as stand_in:
        yield stand_in


@pytest.fixture
def cudnn_traceable():
    """A cuDNN call traces and lowers for CUDA without a GPU: the extension counts as usable and the reserve size is
    stood in for (``CudnnStandIn(kernels=False)``); the real kernels are lowered. On a GPU host nothing is replaced."""
    if cudnn_gpu_missing() is None:
        yield None
        return
    with CudnnStandIn(reserve_bytes=lambda problem: 512, kernels=False) as stand_in:
        yield stand_in
