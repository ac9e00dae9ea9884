"""The declared minimum jax is a tested one: a fresh venv gets exactly that jax and jaxlib, the package's other
dependencies, and this package without its extensions, and runs tests/floor_smoke.py (the xla implementation under jit
and grad, the cuDNN path's custom_partitioning per batch shard with stand-in kernels, its lowering for CUDA).

Needs the package index (pip's cache makes a repeated run quick); every step has a bounded timeout.
"""

import os
import re
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from support import run_checked  # noqa: E402


def declared() -> tuple[str, list[str]]:
    """(the jax floor, the other runtime dependencies) from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = [re.fullmatch(r"jax>=([\w.]+)", d) for d in project["dependencies"]]
    floor = next(m.group(1) for m in floors if m)
    return floor, [d for d in project["dependencies"] if not d.startswith("jax>=")]


def test_every_jax_floor_agrees():
    """The runtime floor, the cuda extra's and the build requirement (whose jax provides the FFI headers) are one."""
    floor, _ = declared()
    text = (ROOT / "pyproject.toml").read_text()
    assert re.findall(r'"jax(?:\[cuda13\])?>=([\w.]+)"', text) == [floor] * 3


@pytest.mark.floor
def test_declared_minimum_jax_runs_the_smoke_test(tmp_path):
    floor, dependencies = declared()
    venv = tmp_path / "venv"
    run_checked([sys.executable, "-m", "venv", str(venv)], timeout=120)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # scikit-build-core builds the package without isolation: an isolated build would fetch the native extensions'
    # build requirements (cuDNN, oneDNN), which this check switches off anyway.
    run_checked([*pip, f"jax=={floor}", f"jaxlib=={floor}", *dependencies, "scikit-build-core>=0.10"], timeout=600)
    # A copy of the sources, so that this build never touches the developer's build directory.
    source = tmp_path / "source"
    for name in ("pyproject.toml", "README.md", "CMakeLists.txt"):
        shutil.copy(ROOT / name, source / name if source.exists() else (source.mkdir() or source / name))
    for name in ("cmake", "common", "cuda", "onednn", "jax_cudnn_rnn"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    run_checked([*pip, "--no-deps", "--no-build-isolation", str(source)], timeout=600,
         env={**os.environ, "JAX_CUDNN_RNN_CUDA": "OFF", "JAX_CUDNN_RNN_ONEDNN": "OFF"})
    out = run_checked([python, str(ROOT / "tests" / "floor_smoke.py"), floor], timeout=600, cwd=tmp_path,
               env={k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")})
    for line in ("xla jit grad ok", "custom_partitioning per shard ok", "cuda lowering ok", "platform choice ok"):
        assert line in out.splitlines(), out
