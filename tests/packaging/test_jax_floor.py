"""Every jax the package declares is a tested one (issue 37): the binary wheel of an isolated build (built once per
session, tests/packaging/conftest.py) goes into a fresh venv with exactly the declared floor jax, then (in the same
venv, jax and jaxlib alone replaced) a jax between the floor and the newest whose XLA FFI API differs from the
build's, and tests/floor_smoke.py runs with each in a fresh process: JAX computes after the import, every
implementation runs or refuses by name, the xla implementation under jit and grad, the cuDNN path's
custom_partitioning per batch shard with stand-in kernels, its lowering for CUDA.

Needs the package index (pip's cache makes a repeated run quick); every step has a bounded timeout.
"""

import os
import re
import shutil
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from support import run_checked  # noqa: E402

from jax_cudnn_rnn.backends import native_extension  # noqa: E402

# Between the floor (XLA FFI API 0.1, what an isolated build compiles against) and jax 0.10 (0.3): FFI API 0.2.
BETWEEN = "0.9.0"


def declared() -> str:
    """The jax floor, from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return next(m.group(1) for d in project["dependencies"] if (m := re.fullmatch(r"jax>=([\w.]+)", d)))


def test_every_jax_floor_agrees():
    """The runtime floor, the cuda extra's and the build requirement's jaxlib (the FFI headers) are one."""
    floor = declared()
    text = (ROOT / "pyproject.toml").read_text()
    assert re.findall(r'"jax(?:\[cuda13\])?>=([\w.]+)"', text) == [floor] * 2
    assert re.findall(r'"jaxlib==([\w.]+)', text) == [floor]


def test_the_between_jax_is_between():
    floor = declared()
    table = native_extension.XLA_FFI_API_OF_JAXLIB
    assert native_extension._release(floor) < native_extension._release(BETWEEN) and table[floor] < table[
        BETWEEN
    ] < max(table.values())


@pytest.fixture(scope="module")
def wheel_venv(built_wheel, tmp_path_factory) -> Iterator[str]:
    """The python of a fresh venv with the binary wheel and its cudnn and onednn extras (the cuDNN extension must
    register its CUDA targets with each jax as well), at the declared floor jax; each test below pins its own jax in it,
    so that the two share one install of the wheel and its extras (nvidia-cudnn-cu13's is the longest). Removed after
    this module, as test_wheel.py's environment is (a few GB of disk)."""
    venv = tmp_path_factory.mktemp("floor") / "venv"
    run_checked([sys.executable, "-m", "venv", str(venv)], timeout=120)
    python = str(venv / "bin" / "python")
    _install(python, declared(), f"{built_wheel}[cudnn,onednn]")
    yield python
    shutil.rmtree(venv, ignore_errors=True)


def _install(python: str, version: str, *requirements: str) -> None:
    run_checked(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            *requirements,
            f"jax=={version}",
            f"jaxlib=={version}",
        ],
        timeout=900,
    )


@pytest.mark.floor
@pytest.mark.parametrize("jax_version", ["floor", BETWEEN])
def test_declared_jax_runs_the_isolated_build(wheel_venv, tmp_path, jax_version):
    version = declared() if jax_version == "floor" else jax_version
    python = wheel_venv
    _install(python, version)
    assert run_checked([python, "-c", "import jax; print(jax.__version__)"], timeout=300).strip() == version
    out = run_checked(
        [python, str(ROOT / "tests" / "floor_smoke.py"), version],
        timeout=600,
        cwd=tmp_path,
        # the venv's own jax_cudnn_rnn: not one on the parent's PYTHONPATH (a checkout the tests run from)
        env={k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS", "PYTHONPATH")},
    )
    for line in (
        "jnp after import ok",
        "every implementation ok",
        "xla jit grad ok",
        "strict x64 ok",
        "custom_partitioning per shard ok",
        "cuda lowering ok",
        "platform choice ok",
    ):
        assert line in out.splitlines(), out
