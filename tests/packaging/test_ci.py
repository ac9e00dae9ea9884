"""CI's script (.ci/run): the README's test command verbatim, then the newest-jax job (.ci/newest_jax, issue 51),
whose failure fails the run. The job itself runs in CI (minutes: two isolated builds and two fresh venvs); here, what
holds it together: a stand-in job that fails makes .ci/run fail with its status, and the job tests the newest jaxlib the
loader's table lists."""

import os
import re
import shutil
import subprocess

import pytest

from jax_cudnn_rnn.backends import native_extension

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def _readme_test_command() -> str:
    """The README's test command: the line of its bash blocks that installs the test extra and runs pytest."""
    blocks = re.findall(r"```bash\n(.*?)\n```", _read("README.md"), re.DOTALL)
    (command,) = [line for b in blocks for line in b.splitlines() if '".[test]"' in line and "bin/pytest" in line]
    return command


def test_ci_runs_the_readme_command_verbatim_then_the_newest_jax_job():
    lines = _read(".ci/run").splitlines()
    command = _readme_test_command()
    assert "pytest" in command and command in lines
    prepare = next(i for i, line in enumerate(lines) if ".ci/newest_jax prepare" in line and line.endswith("&"))
    test = next(i for i, line in enumerate(lines) if line.endswith(".ci/newest_jax test"))
    assert prepare < lines.index(command) < test
    assert "set -euo pipefail" in lines


STAND_IN = """#!/usr/bin/env bash
echo "newest-jax stand-in $1 in $NEWEST_JAX_WORK"
[ -d "$NEWEST_JAX_WORK" ] || exit 9
if [ "$1" = "{fail}" ]; then sleep 0.2; exit 3; fi
"""


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("setsid") is None, reason="no bash or setsid")
@pytest.mark.parametrize("fail, status", [("none", 0), ("prepare", 1), ("test", 3)])
def test_a_failing_newest_jax_job_fails_the_run(tmp_path, fail, status):
    """.ci/run with the README's command replaced by `true` and the job by a stand-in failing in ``fail``: the run
    fails when either step fails, and prints the background step's log."""
    ci = tmp_path / ".ci"
    ci.mkdir()
    (ci / "run").write_text(_read(".ci/run").replace(_readme_test_command(), "true"))
    (ci / "newest_jax").write_text(STAND_IN.replace("{fail}", fail))
    (ci / "newest_jax").chmod(0o755)
    (ci / "onednn_caps").write_text("#!/usr/bin/env bash\necho onednn-caps stand-in\n")
    (ci / "onednn_caps").chmod(0o755)
    result = subprocess.run(["bash", str(ci / "run")], capture_output=True, text=True, timeout=60)
    assert result.returncode == status, result.stdout + result.stderr
    assert "newest-jax stand-in prepare in " in result.stdout
    assert ("newest-jax stand-in test in " in result.stdout) == (fail != "prepare")


def test_the_job_tests_the_newest_jaxlib_the_table_lists():
    job = _read(".ci/newest_jax")
    assert "set -euo pipefail" in job
    newest = re.search(r'NEWEST_JAX="\$\{NEWEST_JAX:-([\d.]+)\}"', job).group(1)
    table = native_extension.XLA_FFI_API_OF_JAXLIB
    assert newest in table and newest == max(table, key=lambda r: (native_extension._release(r), len(r)))
    # The job's pip install fails the job when pip fails: its stderr is filtered without hiding the status.
    assert not [line for line in job.splitlines() if "pip" in line and "|| true" in line]
    for selection in ("tests/core", "tests/backends", "tests/frontends", "tests/sharding/test_checkpoint_sharding.py"):
        assert selection in job, selection
