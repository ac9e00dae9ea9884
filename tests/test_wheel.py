"""The binary wheel: ``scripts/build_wheel.sh`` builds and auditwheel-repairs it, and it installs into a fresh virtual
environment with no compiler, CMake or nvcc on the PATH, loads its cuDNN extension (and on x86_64 its oneDNN
extension) and runs a CPU problem, on every CPU implementation, that matches the NumPy oracle.

Minutes (an isolated build, then a fresh environment with cuDNN's wheel): marked ``wheel`` so that a developer can
deselect it with ``-m "not wheel"``. Where it cannot run (no C++ compiler, no bash) it skips, except in CI (``CI`` set),
where the wheel is part of what is tested and it fails instead.
"""

import os
import shutil
import sys
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    implementations.append("onednn")

cfg = jcr.RNNConfig(mode="lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional")
rng = np.random.default_rng(0)
weights = [rng.uniform(-0.5, 0.5, s.shape).astype(np.float32) for s in jcr.param_slots(cfg)[0]]
biases = [rng.uniform(-0.5, 0.5, s.shape).astype(np.float32) for s in jcr.param_slots(cfg)[1]]
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


def _unavailable(reason):
    if os.environ.get("CI"):
        pytest.fail(f"CI tests the binary wheel, but {reason}")
    pytest.skip(reason)


def test_wheel_installs_and_runs_without_compilers(tmp_path):
    if not shutil.which("bash"):
        _unavailable("bash is not on the PATH")
    if not (shutil.which("c++") or shutil.which("g++") or os.environ.get("CXX")):
        _unavailable("no C++ compiler to build the wheel with")
    build = run_checked(["bash", os.path.join(ROOT, "scripts", "build_wheel.sh"), str(tmp_path / "dist")], 1200,
                        env={**os.environ, "PYTHON": sys.executable})
    wheel = build.strip().splitlines()[-1]
    assert os.path.isfile(wheel) and "manylinux" in os.path.basename(wheel), wheel

    env_dir = tmp_path / "fresh"
    venv.create(env_dir, with_pip=True)
    bin_dir = str(env_dir / "bin")
    # Nothing but the new environment on the PATH: no compiler, CMake or nvcc can be found, and none is needed.
    env = {**os.environ, "PATH": bin_dir, "CC": "/nonexistent/cc", "CXX": "/nonexistent/c++"}
    env.pop("PYTHONPATH", None)
    run_checked([os.path.join(bin_dir, "pip"), "install", "-q", "--only-binary=:all:", f"{wheel}[cudnn,onednn]"], 900,
                env=env, cwd=tmp_path)
    smoke = run_checked([os.path.join(bin_dir, "python"), "-c", SMOKE, TESTS], 300, env=env, cwd=tmp_path)
    assert "wheel smoke run OK" in smoke
