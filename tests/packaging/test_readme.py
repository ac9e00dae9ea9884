"""Every ```python block of README.md runs as written: each in a fresh interpreter, in an empty temporary directory,
with nothing defined beforehand. Blocks added to the README later are picked up without touching this file."""

import os
import re
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "README.md")


def python_blocks(text):
    """(line number, source) of each fenced block whose info string is ``python``."""
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(1))
        for match in re.finditer(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, re.MULTILINE | re.DOTALL)
    ]


with open(README, encoding="utf-8") as _f:
    BLOCKS = python_blocks(_f.read())


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


def test_block_extraction():
    text = "intro\n```python\na = 1\n```\n```bash\nls\n```\n```python\nb = 2\nprint(b)\n```\n"
    assert python_blocks(text) == [(2, "a = 1\n"), (8, "b = 2\nprint(b)\n")]


@pytest.mark.parametrize("line, source", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_readme_block_runs(line, source, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", source], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert result.returncode == 0, f"README.md block at line {line} failed:\n{result.stderr[-3000:]}"
