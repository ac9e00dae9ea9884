"""Every public import path the README and docs/porting.md show still works (issue 29's done-when): each
``import``/``from ... import`` of this package in their python blocks, and each dotted name of it in their text
(``jax_cudnn_rnn.cudnn.export``, ``jcr.implementation_for``), is imported and resolved here, one test per path. Paths
added to them later are picked up without touching this file."""

import ast
import importlib
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_readme import DOCUMENTS, ROOT, python_blocks

os.environ["KERAS_BACKEND"] = "jax"  # as the README's Keras blocks set it; Keras reads it at its first import
PACKAGE = "jax_cudnn_rnn"


def imported_paths(source: str) -> list[str]:
    """The dotted paths of this package that ``source``'s import statements name: ``import jax_cudnn_rnn.keras`` ->
    ``jax_cudnn_rnn.keras``; ``from jax_cudnn_rnn import checkpoint, interop`` -> ``jax_cudnn_rnn.checkpoint``,
    ``jax_cudnn_rnn.interop``; ``from jax_cudnn_rnn.flax import LSTM`` -> ``jax_cudnn_rnn.flax.LSTM``."""
    paths = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            paths += [a.name for a in node.names if a.name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == PACKAGE:
            paths += [f"{node.module}.{a.name}" for a in node.names]
    return paths


def named_paths(text: str) -> list[str]:
    """The dotted names of this package in ``text``, ``jcr.`` read as ``jax_cudnn_rnn.`` (the README's alias)."""
    found = re.findall(r"\b(?:jax_cudnn_rnn|jcr)(?:\.[A-Za-z_]\w*)+", text)
    return [PACKAGE + path[3:] if path.startswith("jcr.") else path for path in found]


def resolve(path: str):
    """The object at ``path``: its longest importable module prefix, then attributes. Raises what the import or the
    attribute lookup raises."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as e:
            tried = ".".join(parts[:cut])
            if tried != e.name and not tried.startswith(f"{e.name}."):  # a module exists, something it imports not
                raise
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(path)


_TEXT = ""
for _name in DOCUMENTS:
    with open(os.path.join(ROOT, _name), encoding="utf-8") as _f:
        _TEXT += _f.read() + "\n"
PATHS = sorted(
    {path for _, source in python_blocks(_TEXT) for path in imported_paths(source)} | set(named_paths(_TEXT))
)


def test_paths_are_found():
    source = (
        "import jax, jax_cudnn_rnn as jcr\nfrom jax_cudnn_rnn import checkpoint\nfrom jax_cudnn_rnn.flax import LSTM\n"
    )
    assert imported_paths(source) == ["jax_cudnn_rnn", "jax_cudnn_rnn.checkpoint", "jax_cudnn_rnn.flax.LSTM"]
    assert named_paths("`jcr.rnn(...)`, `jax_cudnn_rnn.cudnn.export`, jax_cudnn_rnn/ops.py") == [
        "jax_cudnn_rnn.rnn",
        "jax_cudnn_rnn.cudnn.export",
    ]
    assert len(PATHS) >= 10 and "jax_cudnn_rnn.export" in PATHS and "jax_cudnn_rnn.flax.LSTM" in PATHS


def test_a_missing_path_fails_to_resolve():
    with pytest.raises(AttributeError):
        resolve("jax_cudnn_rnn.cudnn.no_such_name")
    with pytest.raises(AttributeError):
        resolve("jax_cudnn_rnn.no_such_module")


@pytest.mark.parametrize("path", PATHS)
def test_readme_import_path_works(path):
    resolve(path)
