"""The frontends import the modules they use (``from jax_cudnn_rnn import ops``), never the package's ``__init__``
(``import jax_cudnn_rnn as jcr``), which re-exports them all and so sits above every frontend in the import graph."""

import ast
import importlib.util
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "jax_cudnn_rnn")
FRONTENDS = ["compat", "equinox", "flax", "keras", "models", "nnx"]


def upward_imports(source: str) -> list[str]:
    """The imports in ``source`` that reach the package's ``__init__`` for a name of its own: ``import jax_cudnn_rnn``
    (any alias) and ``from jax_cudnn_rnn import X`` where X is not a submodule."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name == "jax_cudnn_rnn"]
        elif isinstance(node, ast.ImportFrom) and node.module == "jax_cudnn_rnn" and node.level == 0:
            found += [
                f"from jax_cudnn_rnn import {a.name}"
                for a in node.names
                if importlib.util.find_spec(f"jax_cudnn_rnn.{a.name}") is None
            ]
    return found


def test_upward_imports_are_found():
    source = "import jax_cudnn_rnn as jcr\nfrom jax_cudnn_rnn import ops, rnn\nfrom jax_cudnn_rnn.ops import rnn\n"
    assert upward_imports(source) == ["import jax_cudnn_rnn", "from jax_cudnn_rnn import rnn"]


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_a_frontend_imports_modules_not_the_package(frontend):
    with open(os.path.join(PACKAGE, f"{frontend}.py"), encoding="utf-8") as f:
        assert upward_imports(f.read()) == []
