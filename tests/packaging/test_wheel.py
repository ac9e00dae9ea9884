"""The binary wheel: ``scripts/build_wheel.sh`` builds and auditwheel-repairs it, and it installs into a fresh virtual
environment with no compiler, CMake or nvcc on the PATH, loads its cuDNN extension (and on x86_64 its oneDNN
extension) and runs a CPU problem, on every CPU implementation, that matches the NumPy oracle. Then an older cuDNN
runtime than the newest (the one the `cudnn` extra installs) goes into the same environment: the extension, built by
the isolated build against the pinned oldest cuDNN (pyproject.toml), must still load and must not refuse bfloat16 for
its build's headers.

Minutes (an isolated build, then a fresh environment with cuDNN's wheel: 149 s here; the older runtime's download,
install and checks add 7 s): marked ``wheel`` so that a developer can deselect it with ``-m "not wheel"``.
Where it cannot run (no C++ compiler, no bash) it skips, except in CI (``CI`` set), where the wheel is part of what is
tested and it fails instead (tests/packaging/conftest.py).
"""

import os
import shutil
import sys
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests")
sys.path.insert(0, TESTS)
from support import run_checked  # noqa: E402

pytestmark = pytest.mark.wheel

SMOKE = r"""
import os, shutil, sys
sys.path.insert(0, sys.argv[1])  # tests/: numpy_reference imports nothing from the package
import jax, numpy as np
import jax_cudnn_rnn as jcr
import numpy_reference

assert os.path.realpath(jcr.__file__).startswith(os.path.realpath(sys.prefix)), jcr.__file__
tools = {name: shutil.which(name) for name in ("cc", "c++", "gcc", "g++", "clang", "cmake", "nvcc")}
assert not any(tools.values()), tools
assert jcr.extension_loaded(), jcr.extension_error()
assert jcr.extension_error() is None, jcr.extension_error()
from jax_cudnn_rnn import onednn
implementations = ["xla"]
if os.uname().machine == "x86_64":
    assert onednn.extension_loaded(), onednn.extension_error()
    assert onednn.cpu_runtime() == "tbb", onednn.cpu_runtime()  # the onednn extra's oneTBB build, loaded RTLD_LOCAL
    implementations += ["onednn", "xla+onednn"]

cfg = jcr.RNNConfig(mode="lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional")
rng = np.random.default_rng(0)
weights = [rng.uniform(-0.5, 0.5, s.shape).astype(np.float32) for s in jcr.layout.param_slots(cfg)[0]]
biases = [rng.uniform(-0.5, 0.5, s.shape).astype(np.float32) for s in jcr.layout.param_slots(cfg)[1]]
x = rng.normal(size=(5, 2, 3)).astype(np.float32)
h0 = np.zeros(cfg.state_shape(2), np.float32)
want = numpy_reference.numpy_rnn([w.astype(np.float64) for w in weights], [b.astype(np.float64) for b in biases],
                                  x.astype(np.float64), h0.astype(np.float64), h0.astype(np.float64), "lstm", 2, 4,
                                  True, False)
for implementation in implementations:
    y, h_n, c_n = jax.jit(jcr.rnn, static_argnames=("config", "implementation"))(
        jcr.canonical_to_params(weights, biases, cfg), x, h0, h0, config=cfg, implementation=implementation)
    for got, ref in zip((y, h_n, c_n), want):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)
print("wheel smoke run OK:", jcr.__file__, implementations)
"""


# The older cuDNN runtime installed next to the wheel: the one on the GPU machines lent to this project (and what an
# environment that already had jax[cuda13] may hold), older than the newest one the `cudnn` extra installs.
OLDER_CUDNN = "9.19.0.56"

OLDER_RUNTIME = r"""
import sys
import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends.cudnn import extension as _extension

assert jcr.extension_loaded(), jcr.extension_error()
native = _extension.module()
print("cuDNN at run time", native.cudnn_version(), "built against", native.CUDNN_BUILD_VERSION)
assert native.cudnn_version() == int(sys.argv[1]), native.cudnn_version()
assert native.CUDNN_BUILD_VERSION == _extension.CUDNN_FLOOR, native.CUDNN_BUILD_VERSION
# bfloat16 is decided by the loaded library (>= 9.13), not by the 9.12 headers: the question gets as far as asking for
# a GPU, which this machine lacks.
fields = dict(mode="lstm", num_layers=1, num_units=8, input_size=4, proj_size=0, direction="unidirectional",
              input_mode="linear_input", bias_mode="double", cell_clip=0.0, dtype="bfloat16")
try:
    native.weight_params(**fields)
except RuntimeError as e:
    assert "needs a CUDA GPU" in str(e) and "bfloat16" not in str(e), str(e)
else:
    raise AssertionError("weight_params answered without a GPU")
print("older runtime OK")
"""


@pytest.fixture(scope="module")
def installed_wheel(built_wheel, tmp_path_factory):
    """(the wheel built by scripts/build_wheel.sh, the fresh environment's bin directory, its environment variables),
    with the wheel and its `cudnn` and `onednn` extras installed there; built once per session (conftest.py). The
    environment (a few GB, cuDNN's wheel most of it) is removed after this module: CI's disk holds every venv the run
    makes at once otherwise, and a run ended on a full disk here (2026-11-30)."""
    wheel, tmp_path = built_wheel, tmp_path_factory.mktemp("wheel")
    env_dir = tmp_path / "fresh"
    venv.create(env_dir, with_pip=True)
    bin_dir = str(env_dir / "bin")
    # Nothing but the new environment on the PATH: no compiler, CMake or nvcc can be found, and none is needed.
    env = {**os.environ, "PATH": bin_dir, "CC": "/nonexistent/cc", "CXX": "/nonexistent/c++"}
    env.pop("PYTHONPATH", None)
    run_checked(
        [os.path.join(bin_dir, "pip"), "install", "-q", "--only-binary=:all:", f"{wheel}[cudnn,onednn]"],
        900,
        env=env,
        cwd=tmp_path,
    )
    yield wheel, bin_dir, env, tmp_path
    shutil.rmtree(env_dir, ignore_errors=True)


def test_wheel_installs_and_runs_without_compilers(installed_wheel):
    _, bin_dir, env, cwd = installed_wheel
    smoke = run_checked([os.path.join(bin_dir, "python"), "-c", SMOKE, TESTS], 300, env=env, cwd=cwd)
    assert "wheel smoke run OK" in smoke


def test_wheel_loads_with_an_older_cudnn_runtime(installed_wheel):
    """Issue 28: the extension of a default isolated build must load with any cuDNN 9 runtime from its pinned floor
    on, here one older than the newest; then the smoke run still passes on it."""
    _, bin_dir, env, cwd = installed_wheel
    python = os.path.join(bin_dir, "python")
    run_checked(
        [os.path.join(bin_dir, "pip"), "install", "-q", "--only-binary=:all:", f"nvidia-cudnn-cu13=={OLDER_CUDNN}"],
        900,
        env=env,
        cwd=cwd,
    )
    major, minor, patch = map(int, OLDER_CUDNN.split(".")[:3])
    out = run_checked([python, "-c", OLDER_RUNTIME, str(major * 10000 + minor * 100 + patch)], 300, env=env, cwd=cwd)
    assert "older runtime OK" in out
    assert "wheel smoke run OK" in run_checked([python, "-c", SMOKE, TESTS], 300, env=env, cwd=cwd)
