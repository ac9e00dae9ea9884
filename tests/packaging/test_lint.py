"""Lint and format, with zero findings (issue 38): ``ruff check`` and ``ruff format --check`` over the repository
(configured in pyproject.toml's [tool.ruff]) and ``clang-format --dry-run --Werror`` over the C++ (configured in
.clang-format), each run from the repository root with the version the `test` extra pins, so that a new release's
rules cannot turn CI red. Where a tool is not installed the test skips, except in CI (``CI`` set), where the extra
installs both and a missing one means the environment is broken, not that there is less to check; there it fails.

To fix what these report: ``ruff check --fix .`` (then review), ``ruff format .``, and ``clang-format -i`` on the files
listed below."""

import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Every C++ source of the two extensions, their shared code and the C++ tests.
CPP_DIRS = ("cuda", "onednn", "common", os.path.join("tests", "cpp"))
CPP_SUFFIXES = (".cc", ".h")


def _pin(name: str) -> str:
    """The exact version of ``name`` that the `test` extra pins."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        test_extra = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    pins = [line.split("==", 1)[1].split(";")[0].strip() for line in test_extra if line.startswith(f"{name}==")]
    assert len(pins) == 1, f"the test extra must pin {name} to one exact version (name==version): {test_extra}"
    return pins[0]


def _tool(name: str) -> str:
    """The path of ``name``: the test environment's own (beside this Python, where the `test` extra installs it),
    else the PATH's. Skips where there is none, or fails in CI."""
    found = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
    if found is None:
        reason = f"{name} is not installed (the `test` extra pins {name}=={_pin(name)})"
        if os.environ.get("CI"):
            pytest.fail(f"CI lints with {name}, but {reason}")
        pytest.skip(reason)
    return found


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _version_note(tool: str, name: str) -> str:
    """A line for a failure message: which version ran, and the pin where it differs (its rules may differ too)."""
    found = re.search(r"\d+(\.\d+)+", _run([tool, "--version"]).stdout)
    version = found.group() if found else "(unknown version)"
    pin = _pin(name)
    return f"{name} {version}" + ("" if version == pin else f"; the test extra pins {pin}, whose findings may differ")


def cpp_files() -> list[str]:
    """The C++ files clang-format checks, relative to the repository root, sorted."""
    found = []
    for directory in CPP_DIRS:
        for parent, _, names in os.walk(os.path.join(ROOT, directory)):
            found += [os.path.relpath(os.path.join(parent, n), ROOT) for n in names if n.endswith(CPP_SUFFIXES)]
    return sorted(found)


def test_the_tools_are_pinned_exactly():
    """An exact pin each: a new ruff or clang-format brings new rules and style, adopted on purpose with its fixes."""
    for name in ("ruff", "clang-format"):
        assert re.fullmatch(r"\d+(\.\d+)+", _pin(name)), name


def test_a_missing_tool_fails_in_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI lints with ruff, but ruff is not installed"):
        _tool("ruff")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="ruff is not installed"):
        _tool("ruff")


def test_ruff_check_finds_nothing():
    ruff = _tool("ruff")
    run = _run([ruff, "check", "--no-cache", "--output-format", "concise", "."])
    assert run.returncode == 0, (
        f"ruff check found problems ({_version_note(ruff, 'ruff')}); fix them, or run "
        f"`ruff check --fix .` and review its changes:\n{run.stdout}{run.stderr}"
    )


def test_ruff_format_changes_nothing():
    ruff = _tool("ruff")
    run = _run([ruff, "format", "--no-cache", "--check", "--output-format", "concise", "."])
    assert run.returncode == 0, (
        f"ruff format would change these files ({_version_note(ruff, 'ruff')}); run "
        f"`ruff format .`:\n{run.stdout}{run.stderr}"
    )


def test_cpp_files_are_found():
    """The check below covers every directory it names (a moved directory must not leave it checking nothing)."""
    files = cpp_files()
    for directory in CPP_DIRS:
        assert any(f.startswith(directory + os.sep) for f in files), directory


def test_clang_format_changes_nothing():
    clang_format = _tool("clang-format")
    files = cpp_files()
    style = os.path.join(ROOT, ".clang-format")
    run = _run([clang_format, f"--style=file:{style}", "--dry-run", "--Werror", *files])
    assert run.returncode == 0, (
        f"clang-format would change the C++ ({_version_note(clang_format, 'clang-format')}); "
        f"run `clang-format -i` on the files it names:\n{run.stdout}{run.stderr}"
    )
