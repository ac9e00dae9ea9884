"""The binary wheel, built once per test session by ``scripts/build_wheel.sh`` (an isolated build, as a user's `pip
install` makes it, auditwheel-repaired) for the tests that install it into fresh environments: tests/packaging/
test_wheel.py (no compilers, older cuDNN) and tests/packaging/test_jax_floor.py (the declared floor jax and one between
it and the newest). Where it cannot be built (no C++ compiler, no bash) those tests skip, except in CI (``CI`` set),
where the wheel is part of what is tested and they fail instead. Under pytest-xdist the workers share one build: the
first to ask builds it under a lock in the session's shared temporary folder, the others wait and take its path."""

import fcntl
import os
import pathlib
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
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _build_wheel(tmp_path_factory)
    shared = pathlib.Path(tmp_path_factory.getbasetemp()).parent  # the xdist session's, shared by its workers
    with open(shared / "wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        built = shared / "wheel.path"
        if not built.is_file():
            built.write_text(_build_wheel(tmp_path_factory))
        return built.read_text()


def _build_wheel(tmp_path_factory) -> str:
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
