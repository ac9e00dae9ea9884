"""Every ```python block of README.md and docs/porting.md runs as written: each in a fresh interpreter, in an empty
temporary directory, with nothing defined beforehand. Blocks added to them later are picked up without touching this
file."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
DOCUMENTS = ("README.md", os.path.join("docs", "porting.md"))


def python_blocks(text):
    """(line number, source) of each fenced block whose info string is ``python``."""
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(1))
        for match in re.finditer(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, re.MULTILINE | re.DOTALL)
    ]


BLOCKS = []
for _name in DOCUMENTS:
    with open(os.path.join(ROOT, _name), encoding="utf-8") as _f:
        BLOCKS += [(f"{_name}:{line}", source) for line, source in python_blocks(_f.read())]


def test_the_documents_have_python_blocks():
    for name in DOCUMENTS:
        assert sum(where.startswith(f"{name}:") for where, _ in BLOCKS) >= 2, name


def test_block_extraction():
    text = "intro\n```python\na = 1\n```\n```bash\nls\n```\n```python\nb = 2\nprint(b)\n```\n"
    assert python_blocks(text) == [(2, "a = 1\n"), (8, "b = 2\nprint(b)\n")]


@pytest.mark.parametrize("where, source", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_readme_block_runs(where, source, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TMPDIR"] = str(tmp_path)  # the blocks' `tempfile.mkdtemp()` folders go with the test's, not into /tmp for good
    result = subprocess.run(
        [sys.executable, "-c", source], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert result.returncode == 0, f"the block at {where} failed:\n{result.stderr[-3000:]}"
