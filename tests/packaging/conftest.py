"""The binary wheel, built once per test session by ``scripts/build_wheel.sh`` (an isolated build, as a user's `pip
install` makes it, auditwheel-repaired) for the tests that install it into fresh environments: tests/packaging/
test_wheel.py (no compilers, older cuDNN) and tests/packaging/test_jax_floor.py (the declared floor jax and one between
it and the newest). Where it cannot be built (no C++ compiler, no bash) those tests skip, except in CI (``CI`` set),
where the wheel is part of what is tested and they fail instead."""

import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from support import run_checked  # noqa: E402


def unavailable(reason: str) -> None:
    """Skips, or fails in CI, where the wheel is promised."""
    if os.environ.get("CI"):
        pytest.fail(f"CI tests the binary wheel, but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> str:
    """The path of the repaired manylinux wheel."""
    if not shutil.which("bash"):
        unavailable("bash is not on the PATH")
    if not (shutil.which("c++") or shutil.which("g++") or os.environ.get("CXX")):
        unavailable("no C++ compiler to build the wheel with")
    out = tmp_path_factory.mktemp("dist")
    build = run_checked(
        ["bash", os.path.join(ROOT, "scripts", "build_wheel.sh"), str(out)],
        1200,
        env={**os.environ, "PYTHON": sys.executable},
    )
    wheel = build.strip().splitlines()[-1]
    assert os.path.isfile(wheel) and "manylinux" in os.path.basename(wheel), wheel
    return wheel
