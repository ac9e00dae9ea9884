"""The docs (docs/api: Sphinx autodoc over every public module, the README's sections as guide pages) build with
warnings as errors, as CI runs them: one build (about 7 s on this project's 2-core VM), then what it holds is checked
against the package: every name of every public module's ``__all__`` documented, every public module listed, every
public class and function with a docstring."""

import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import types
import zlib

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import import_or_skip

os.environ["KERAS_BACKEND"] = "jax"  # the keras module's names are imported here; Keras reads it at its first import
import_or_skip("sphinx")
import_or_skip("myst_parser")

import jax_cudnn_rnn  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The public modules: the top level's files and the interop folder (backends/, sharding/ and tools/ are the layers
# behind them). A new public module fails test_every_public_module_is_in_the_reference until the reference has it.
PUBLIC_MODULES = ["jax_cudnn_rnn"] + [
    f"jax_cudnn_rnn.{name}"
    for name in (
        "config",
        "layout",
        "params",
        "dropout",
        "ops",
        "models",
        "flax",
        "nnx",
        "keras",
        "equinox",
        "compat",
        "checkpoint",
        "interop",
        "interop.flax_cells",
        "cudnn",
        "onednn",
    )
]
INTERNAL_FOLDERS = {"backends", "cells", "sharding", "tools", "data"}
# Removed from the documented paths in 0.2.0: aliases that warn until 0.3.0 (CHANGELOG.md), not in the reference.
DEPRECATED_MODULES = {"jax_cudnn_rnn.xla", "jax_cudnn_rnn.chunking", "jax_cudnn_rnn.flax_cells"}


def sphinx_build(out_dir: str) -> subprocess.CompletedProcess:
    """``sphinx-build -E -W --keep-going -b html docs/api out_dir`` over the installed package: every warning (a
    malformed docstring, a name autodoc cannot import, a README section no page shows) fails the build."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-E",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            os.path.join(ROOT, "docs", "api"),
            out_dir,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=out_dir,
        check=False,
    )  # not the checkout: python -m puts the cwd first on sys.path


def documented(inventory_path: str) -> dict[str, str]:
    """{object name: its role, e.g. "py:function"} of a Sphinx objects.inv (version 2: four header lines, then zlib)."""
    with open(inventory_path, "rb") as f:
        data = f.read()
    header = data.split(b"\n", 4)
    assert header[0] == b"# Sphinx inventory version 2", header[0]
    entries = {}
    for line in zlib.decompress(header[4]).decode().splitlines():
        match = re.match(r"(\S+)\s+(\S+:\S+)\s+-?\d+\s", line)
        if match:
            entries[match.group(1)] = match.group(2)
    return entries


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("docs"))
    result = sphinx_build(out)
    assert result.returncode == 0, f"the docs build failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return out


def test_the_build_has_no_warnings(built):
    assert os.path.exists(os.path.join(built, "index.html"))


def test_every_public_name_is_documented(built):
    names = documented(os.path.join(built, "objects.inv"))
    missing = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        assert hasattr(module, "__all__"), f"{module_name} has no __all__: its public names are undeclared"
        if names.get(module_name) != "py:module":
            missing.append(module_name)
        missing += [f"{module_name}.{name}" for name in module.__all__ if f"{module_name}.{name}" not in names]
    assert missing == [], f"public names the reference does not document: {missing}"


def test_every_public_module_is_in_the_reference():
    found = {
        f"jax_cudnn_rnn.{m.name}"
        for m in pkgutil.iter_modules(jax_cudnn_rnn.__path__)
        if not m.name.startswith("_") and m.name not in INTERNAL_FOLDERS
    }
    found |= {
        f"jax_cudnn_rnn.interop.{m.name}"
        for m in pkgutil.iter_modules(jax_cudnn_rnn.interop.__path__)
        if not m.name.startswith("_")
    }
    assert found - set(PUBLIC_MODULES) - DEPRECATED_MODULES == set(), "public modules the reference leaves out"


def _undocumented(module: types.ModuleType) -> list[str]:
    """The public classes and functions of ``module.__all__`` without a docstring, and the public methods and
    properties (and ``__call__``) such a class defines, itself or through a private base of this package, without
    one."""
    module_name, found = module.__name__, []
    for name in module.__all__:
        value = getattr(module, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        if not (value.__doc__ or "").strip():
            found.append(f"{module_name}.{name}")
        if not inspect.isclass(value):
            continue
        own = [
            c
            for c in value.__mro__
            if c is value or (c.__module__.startswith("jax_cudnn_rnn") and c.__name__.startswith("_"))
        ]
        for cls in own:
            for member, attribute in vars(cls).items():
                function = getattr(attribute, "__func__", attribute)
                if isinstance(attribute, property):
                    function = attribute.fget
                if (member.startswith("_") and member != "__call__") or not callable(function):
                    continue
                if not (function.__doc__ or "").strip():
                    found.append(f"{module_name}.{name}.{member}")
    return found


def test_undocumented_names_are_found():
    class Bare:
        def run(self):
            pass

        @property
        def size(self):
            return 1

        def _private(self):
            pass

        def documented(self):
            """Has one."""

    def bare():
        pass

    def good():
        """Has one."""

    module = types.ModuleType("fake")
    module.Bare, module.bare, module.good, module.__all__ = Bare, bare, good, ["Bare", "bare", "good"]
    assert _undocumented(module) == ["fake.Bare", "fake.Bare.run", "fake.Bare.size", "fake.bare"]


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_class_and_function_has_a_docstring(module_name):
    assert _undocumented(importlib.import_module(module_name)) == []


def test_the_guide_pages_are_the_readme_sections(built):
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    with open(os.path.join(built, "guide", "tour.html"), encoding="utf-8") as f:
        tour = f.read()
    # Words of the README's API tour section and of one of its subsections, as the built page shows them.
    for words in ("walks through the seeds", "time replaced by one fused call"):
        assert words in readme and words in tour, words


def test_the_contributors_page_is_docs_extending(built):
    with open(os.path.join(ROOT, "docs", "extending.md"), encoding="utf-8") as f:
        source = f.read()
    with open(os.path.join(built, "extending.html"), encoding="utf-8") as f:
        page = f.read()
    for words in ("Extending the library", "A new mode", "A new backend", "A new frontend"):
        assert words in source and words in page, words
