"""The CMake build's AUTO mode, configured directly (seconds, no compilation): where a piece is missing it skips the
extension, says in the log what was missing and how to fix it, and writes the same sentence into the package
(``_build_info.py``) for ``extension_error()``; ON makes the same situation a build error."""

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CMAKE = shutil.which("cmake")
pytestmark = pytest.mark.skipif(CMAKE is None, reason="cmake is not on the PATH")


def _configure(build_dir, *defines, env=None):
    result = subprocess.run(
        [CMAKE, "-S", ROOT, "-B", str(build_dir), *defines],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )
    # CMake wraps warning text at word boundaries: compare with the whitespace folded.
    return result.returncode, re.sub(r"\s+", " ", result.stdout + result.stderr)


def _skip_reason(build_dir, option="JAX_CUDNN_RNN_CUDA"):
    namespace = {}
    exec((build_dir / "_build_info.py").read_text(), namespace)  # noqa: S102 - the file CMake just wrote
    return namespace["SKIP_REASONS"][option]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A Python without any NVIDIA wheel, jax or pybind11 (a venv without site packages)."""
    directory = tmp_path_factory.mktemp("bare-venv")
    venv.create(directory, with_pip=False)
    return str(directory / "bin" / "python")


def test_no_compiler_skips_with_the_fix(tmp_path):
    code, log = _configure(tmp_path, env={"CXX": "/nonexistent/c++"})
    assert code == 0, log
    assert "skipping the cuDNN extension" in log and "no C++ compiler was found" in log
    assert "skipping the oneDNN extension" in log
    assert "install a C++17 compiler" in _skip_reason(tmp_path)
    assert "install a C++17 compiler" in _skip_reason(tmp_path, "JAX_CUDNN_RNN_ONEDNN")


def test_no_cuda_runtime_skips_with_the_fix(tmp_path, bare_python):
    """The CUDA toolkit hidden and no nvidia-cuda-runtime wheel: what an isolated build on a platform without
    NVIDIA's wheels sees."""
    code, log = _configure(
        tmp_path, f"-DPython_EXECUTABLE={bare_python}", "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON"
    )
    assert code == 0, log
    reason = _skip_reason(tmp_path)
    assert "CUDA runtime headers and static runtime were not found" in reason
    assert "pip install nvidia-cuda-runtime nvidia-cuda-crt" in reason
    assert reason in log
    onednn_reason = _skip_reason(tmp_path, "JAX_CUDNN_RNN_ONEDNN")
    assert "oneDNN 3.2 was not found" in onednn_reason and "onednn-devel-cpu-tbb" in onednn_reason


def test_on_turns_the_skip_into_an_error(tmp_path, bare_python):
    code, log = _configure(
        tmp_path,
        f"-DPython_EXECUTABLE={bare_python}",
        "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON",
        "-DJAX_CUDNN_RNN_CUDA=ON",
    )
    assert code != 0
    assert "JAX_CUDNN_RNN_CUDA=ON but the CUDA runtime headers" in log


def test_off_records_why(tmp_path):
    code, log = _configure(tmp_path, "-DJAX_CUDNN_RNN_CUDA=OFF", "-DJAX_CUDNN_RNN_ONEDNN=OFF")
    assert code == 0, log
    assert "JAX_CUDNN_RNN_CUDA=OFF" in _skip_reason(tmp_path)
    assert "JAX_CUDNN_RNN_ONEDNN=OFF" in _skip_reason(tmp_path, "JAX_CUDNN_RNN_ONEDNN")


def _distribution_installed(name):
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _importable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(
    not (_importable("nvidia.cudnn") and _importable("pybind11")),
    reason="this environment lacks nvidia-cudnn-cu13 or pybind11 (an isolated build brings its own)",
)
def test_everything_present_records_no_reason(tmp_path):
    code, log = _configure(tmp_path, f"-DPython_EXECUTABLE={sys.executable}")
    if "CUDA runtime headers and static runtime were not found" in log:
        pytest.skip("neither a CUDA toolkit nor the CUDA runtime wheels here")
    assert code == 0, log
    assert "building the cuDNN extension" in log
    assert _skip_reason(tmp_path) == ""


@pytest.mark.skipif(
    not (
        _importable("pybind11")
        and importlib.util.find_spec("jax") is not None
        and _distribution_installed("onednn-devel-cpu-tbb")
    ),
    reason="this environment lacks onednn-devel-cpu-tbb, jax or pybind11 (an isolated build brings its own)",
)
def test_onednn_builds_on_tbb_and_records_its_runtime_wheel(tmp_path):
    """oneDNN's TBB build is found through the build Python's onednn-devel-cpu-tbb and tbb-devel wheels, and the
    runtime wheel whose libraries the loader preloads is written into the package."""
    code, log = _configure(
        tmp_path, f"-DPython_EXECUTABLE={sys.executable}", "-DJAX_CUDNN_RNN_CUDA=OFF", "-DJAX_CUDNN_RNN_ONEDNN=ON"
    )
    assert code == 0, log
    assert re.search(r"building the oneDNN extension \(oneDNN 3\.2\.\d+ \(TBB\)", log), log
    namespace = {}
    exec((tmp_path / "_build_info.py").read_text(), namespace)  # noqa: S102 - the file CMake just wrote
    assert namespace["SKIP_REASONS"]["JAX_CUDNN_RNN_ONEDNN"] == ""
    assert namespace["ONEDNN_RUNTIME_WHEEL"] == "onednn-cpu-tbb"
