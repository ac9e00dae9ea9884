"""What the comments, docstrings and docs cite exists. Files move and functions are renamed; a comment, an error
message or a page that still names the old place sends its reader nowhere, and nothing else notices.

Read: the comments and docstrings of every Python file (and every string of the package's own code: its error
messages tell users what to call), the comments of the C++, shell, CMake and TOML files, and the Markdown docs whole
(README.md, docs/, lab/README.md; the lab log is a record of what was, so not it). Three kinds of citation, each
checked against this checkout:

- a repository path: ``/``-joined words whose first one is a top-level entry of the repository
  (``jax_cudnn_rnn/backends/registry.py``, ``tests/support.py``, ``docs/``), or a relative one (``../support.py``, a
  Markdown link) from the citing file's folder, must exist inside the repository; a path within a longer one
  (``jax-ml/jax/docs/ffi.md``, ``site-packages/jax_cudnn_rnn/...``) is not this repository's, and one with a
  ``<placeholder>`` is a pattern: both are left alone;
- a dotted Python name whose first part is the package (``jax_cudnn_rnn.backends.registry.choose``, or the README's
  ``jcr.rnn``), one of its modules' names (``ops.resolve_precision``, ``native_extension.NativeExtension.load``), one
  of its classes' names (``Placement.local_batches``) or a test helper's name (``support.draw_inputs``) must resolve:
  imported, then each attribute looked up. A short form is right when any module (or class) of that name has it;
  also when a class of that name, or one its module defines, gives its instances that first attribute
  (``config.num_units``: a value named after its module, here an ``RNNConfig``; ``RNNConfig.dtype.name``: what a
  field holds is not known here), and when a library of that name has it (``flax.linen.LSTMCell``, ``nnx.Param``);
- a file name (``compose.py``, ``rnn_kernels.cc``, ``lowering.md``; ``.py``, ``.cc``, ``.h``, ``.md`` or ``.sh``):
  some file of the repository has that name;
- a test's node id (``tests/support.py::draw_inputs``, ``tests/cudnn/test_cudnn_gpu.py::test_matches_xla[...]``):
  the right name in the wrong file is caught here, the file must define that name (a ``def``, a ``class`` or an
  assignment at the start of a line).

The repository's files are git's and those the build writes (``GENERATED``); the rules are simple, and ``KNOWN``
lists what they read wrongly, each with its reason."""

from __future__ import annotations

import ast
import dataclasses
import functools
import glob
import importlib
import importlib.util
import inspect
import io
import os
import re
import subprocess
import tokenize

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKOUT = ROOT  # what exists: this checkout, even where a test reads the citing files from elsewhere (ROOT)
PACKAGE = "jax_cudnn_rnn"
os.environ.setdefault("KERAS_BACKEND", "jax")  # a keras name may be resolved here; Keras reads it at its first import

# (citing file, citation) -> why it is right although the rules cannot tell.
KNOWN: dict[tuple[str, str], str] = {
    ("jax_cudnn_rnn/backends/native_extension.py", "c_api.h"): "XLA's FFI header, in jaxlib's include/xla/ffi/api/",
    ("cuda/CMakeLists.txt", "cuda_runtime_api.h"): "the CUDA runtime's header",
    ("onednn/threading.h", "dnnl_config.h"): "oneDNN's header",
    ("README.md", "lstm.init_params"): "a CudnnLSTM instance named lstm, not the module jax_cudnn_rnn.cells.lstm",
    ("examples/seed_use_case.py", "lstm.dtype"): "a CudnnLSTM instance named lstm, not jax_cudnn_rnn.cells.lstm",
    ("tests/core/test_strict_config.py", "tests/experimental_rnn_test.py"): "JAX's own test file, in JAX's repository",
    **{
        (citing, flax_test): "Flax's own test file, in Flax's sdist"
        for citing in ("tests/frontends/flax_substitution.py", "tests/frontends/test_flax_own_tests.py")
        for flax_test in ("tests/linen/linen_recurrent_test.py", "tests/nnx/nn/recurrent_test.py")
    },
}
# The files a build writes into the checkout, by the file they are made from: cited as the repository's.
GENERATED = {"jax_cudnn_rnn/_build_info.py": "cmake/_build_info.py.in"}


def tracked_files() -> list[str]:
    """The repository's files, relative to the root: where this is a checkout, git's, and the new ones it does not
    ignore (a file is read before it is committed); else the tree on disk."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [line for line in out.splitlines() if os.path.isfile(os.path.join(ROOT, line))]
    except (OSError, subprocess.CalledProcessError):
        return [
            os.path.relpath(p, ROOT)
            for p in glob.glob(os.path.join(ROOT, "**", "*"), recursive=True)
            if os.path.isfile(p)
        ]


FILES = tracked_files()
TOP_LEVEL = sorted({path.split("/")[0] for path in FILES if "/" in path})
FILE_NAMES = {os.path.basename(path) for path in FILES + list(GENERATED)}
# The repository's files and folders: git's files, the folders they are in, and what the build writes (GENERATED).
ENTRIES = set(FILES) | set(GENERATED) | {path[: m.start()] for path in FILES for m in re.finditer("/", path)}


def package_names() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """({last name: [module, ...]}, {class name: [module.Class, ...]}) of the package's modules (packages included:
    "registry" -> ["jax_cudnn_rnn.backends.registry"]) and the tests' helpers ("support" -> ["support"]), and of the
    classes the package's modules define at their top level."""
    modules: dict[str, list[str]] = {}
    classes: dict[str, list[str]] = {}
    for path in FILES:
        if not (path.startswith(PACKAGE + "/") and path.endswith(".py")):
            continue
        dotted = path[:-3].replace("/", ".").removesuffix(".__init__")
        parts = dotted.split(".")
        for cut in range(2, len(parts) + 1):
            names = modules.setdefault(parts[cut - 1], [])
            if ".".join(parts[:cut]) not in names:
                names.append(".".join(parts[:cut]))
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for node in ast.parse(f.read()).body:
                if isinstance(node, ast.ClassDef):
                    classes.setdefault(node.name, []).append(f"{dotted}.{node.name}")
    for path in FILES:  # the tests' helpers, imported by their own names (tests/conftest.py puts tests/ on sys.path)
        name = os.path.basename(path)[:-3]
        if os.path.dirname(path) == "tests" and path.endswith(".py") and not name.startswith(("test_", "conftest")):
            modules.setdefault(name, []).append(name)
    return modules, classes


MODULES, CLASSES = package_names()
# The libraries whose names are also module names of the package (its frontends), by the module that holds their
# names: ``flax.linen.LSTMCell``, ``nnx.Param`` may be theirs.
LIBRARIES = {"flax": "flax", "nnx": "flax.nnx", "keras": "keras", "equinox": "equinox"}
# What a file name ends with, not an attribute: "out.json" is a file, "ops.py" a file name checked as such.
FILE_SUFFIXES = {
    "py",
    "pyi",
    "md",
    "rst",
    "cc",
    "h",
    "hpp",
    "cu",
    "sh",
    "toml",
    "txt",
    "json",
    "png",
    "in",
    "cmake",
    "so",
    "cfg",
    "yaml",
    "yml",
    "whl",
    "log",
    "a",
}
_FILE_NAME = re.compile(r"(?<![\w./-])([\w-]+\.(?:py|pyi|cc|h|md|sh))\b")
_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(re.escape(t) for t in TOP_LEVEL)})/(?:[\w.-]+/)*[\w.-]*)")
_RELATIVE = re.compile(r"(?<![\w./$-])(\.\./[\w./-]*[\w/])")
_LINK = re.compile(r"\]\((?!\w+:)([^)\s#]+)")  # a Markdown link's target, unless a URL or an anchor
_NODE_ID = re.compile(rf"(?<![\w./-])((?:{'|'.join(re.escape(t) for t in TOP_LEVEL)})/(?:[\w.-]+/)*[\w-]+\.py)::(\w+)")
_DOTTED = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")


def python_texts(source: str, every_string: bool) -> list[tuple[int, str]]:
    """(line, text) of ``source``'s comments and docstrings (a module's, class's or function's, and the string after
    an assignment, which autodoc reads as the attribute's), or of all its strings when ``every_string``."""
    texts = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    tree = ast.parse(source)
    if every_string:
        return texts + [
            (node.lineno, node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for index, statement in enumerate(node.body):
            if (
                isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
                and (index == 0 or isinstance(node.body[index - 1], (ast.Assign, ast.AnnAssign)))
            ):
                texts.append((statement.lineno, statement.value.value))
    return texts


def c_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of the ``//`` and ``/* */`` comments of C++ ``source`` (string literals are not parsed: a
    ``//`` in one would read as a comment; this repository's sources have none)."""
    return [
        (source.count("\n", 0, m.start()) + 1, m.group(0))
        for m in re.finditer(r"//[^\n]*|/\*.*?\*/", source, re.DOTALL)
    ]


def hash_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of the ``#`` comments of shell, CMake or TOML ``source``: from a ``#`` at a line's start or after
    a blank to the line's end (``${#array[@]}`` is no comment)."""
    return [
        (number, m.group(1))
        for number, line in enumerate(source.splitlines(), 1)
        for m in [re.search(r"(?:^|\s)(#.*)$", line)]
        if m
    ]


def texts_of(path: str, source: str) -> list[tuple[int, str]]:
    """(line, text) of what ``path`` (relative to the root) cites things in; [] for a file not read."""
    top, name = path.split("/")[0], os.path.basename(path)
    if path.endswith(".py"):
        return python_texts(source, every_string=top == PACKAGE)
    if path.endswith((".cc", ".h")):
        return c_comments(source)
    if (
        path.endswith((".sh", ".cmake", ".toml", ".in"))
        or name == "CMakeLists.txt"
        or path in (".ci/run", ".ci/newest_jax")
    ):
        return hash_comments(source)
    if path.endswith(".md") and (top == "docs" or path in ("README.md", "lab/README.md")):
        return [(1, source)]
    return []


def citations(text: str, folder: str) -> list[tuple[int, str, str]]:
    """(offset in ``text``, "path", "file name" or "name", citation) of what ``text``, read in the repository folder
    ``folder``, cites: a relative path as the path from the root it names."""
    found = [
        (m.start(1), "path", m.group(1).rstrip(".")) for m in _PATH.finditer(text) if not text.startswith("<", m.end(1))
    ]  # jax_cudnn_rnn/interop/_<peer>.py: a pattern, not a file
    found += [
        (m.start(1), "path", os.path.normpath(os.path.join(folder, m.group(1))))
        for pattern in (_RELATIVE, _LINK)
        for m in pattern.finditer(text)
    ]
    found += [(m.start(1), "file name", m.group(1)) for m in _FILE_NAME.finditer(text)]
    found += [(m.start(1), "node id", f"{m.group(1)}::{m.group(2)}") for m in _NODE_ID.finditer(text)]
    for m in _DOTTED.finditer(text):
        first, last = m.group(1).split(".")[0], m.group(1).rsplit(".", 1)[1]
        if (first in (PACKAGE, "jcr") or first in MODULES or first in CLASSES) and last not in FILE_SUFFIXES:
            found.append((m.start(1), "name", m.group(1)))
    return found


def node_exists(node: str) -> bool:
    """``path::name``: the file exists and defines ``name`` (a function, a class or a name assigned at a line's
    start, at any indentation: a test method too)."""
    path, name = node.split("::")
    if not path_exists(path) or not os.path.isfile(os.path.join(CHECKOUT, path)):
        return False
    with open(os.path.join(CHECKOUT, path), encoding="utf-8") as f:
        source = f.read()
    return (
        re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*=", source, re.MULTILINE)
        is not None
    )


def path_exists(path: str) -> bool:
    """Whether ``path`` (relative to the root; a folder with or without its ``/``) is a file or folder of the
    repository."""
    return path.rstrip("/") in ENTRIES


class NotInstalled(Exception):
    """The name is in a module that imports a library this machine does not have: it cannot be checked here."""


def import_module(name: str):
    """``importlib.import_module``, raising NotInstalled where a library the module imports is missing."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] != name.split(".")[0]:
            raise NotInstalled(e.name) from e
        raise


def resolve(name: str):
    """The object a dotted name names: its first part imported, then each next part an attribute or, where there is
    no such attribute, a submodule. Raises AttributeError or ModuleNotFoundError where the name ends."""
    parts = name.split(".")
    value = import_module(parts[0])
    for index, part in enumerate(parts[1:], 2):
        if hasattr(value, part):
            value = getattr(value, part)
        elif inspect.ismodule(value):
            value = import_module(".".join(parts[:index]))
        else:
            raise AttributeError(f"{'.'.join(parts[: index - 1])} has no attribute {part!r}")
    return value


def has_attribute(cls: type, name: str) -> bool:
    """Whether instances of ``cls`` have ``name``: a class attribute, or a field declared without a default."""
    return (
        hasattr(cls, name)
        or any(name in vars(c).get("__annotations__", {}) for c in cls.__mro__)
        or (dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)})
    )


@functools.cache
def name_resolves(name: str) -> bool:
    """Whether the dotted ``name`` (its first part the package, ``jcr``, a module's or a class's name) exists; True
    where it cannot be checked because a library is missing."""
    parts = name.split(".")
    first, rest = parts[0], parts[1:]
    if first in (PACKAGE, "jcr"):
        candidates = [".".join([PACKAGE, *rest])]
    else:
        candidates = [".".join([owner, *rest]) for owner in MODULES.get(first, []) + CLASSES.get(first, [])]
        if first in LIBRARIES:
            if importlib.util.find_spec(LIBRARIES[first].split(".")[0]) is None:
                return True
            candidates.append(".".join([LIBRARIES[first], *rest]))
    try:
        for candidate in candidates:
            try:
                resolve(candidate)
                return True
            except (AttributeError, ModuleNotFoundError):
                pass
        # An instance: a value named after its module (config.num_units) or class (RNNConfig.dtype.name). Only its
        # first attribute can be checked: what a field holds is not known here.
        owners = [resolve(c) for c in CLASSES.get(first, [])]
        for module in MODULES.get(first, []):
            module = import_module(module)
            owners += [v for v in vars(module).values() if inspect.isclass(v) and v.__module__ == module.__name__]
        return any(has_attribute(cls, rest[0]) for cls in owners)
    except NotInstalled:
        return True


def broken_citations(files: list[str]) -> list[str]:
    """ "file:line: citation" of each citation in ``files`` that does not exist and is not ``KNOWN``."""
    found = set()
    for path in files:
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
            texts = texts_of(path, f.read())
        for line, text in texts:
            for offset, kind, cited in citations(text, os.path.dirname(path)):
                exists = {
                    "path": path_exists,
                    "file name": FILE_NAMES.__contains__,
                    "name": name_resolves,
                    "node id": node_exists,
                }[kind]
                if (path, cited) in KNOWN or exists(cited):
                    continue
                found.add((path, line + text.count("\n", 0, offset), cited))
    return [f"{path}:{line}: {cited}" for path, line, cited in sorted(found)]


def test_every_citation_exists():
    broken = broken_citations(FILES)
    assert broken == [], (
        "citations of what does not exist (fix them, or add a KNOWN entry with its reason):\n" + "\n".join(broken)
    )


def test_the_known_exceptions_are_still_cited():
    """An entry of ``KNOWN`` whose citation is gone would excuse the next one of that name unseen."""
    for path, cited in KNOWN:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            assert cited in f.read(), (path, cited)


def test_citations_are_found():
    text = (
        "See jax_cudnn_rnn/ops.py, `tests/support.py::draw_inputs`, ../lab/x.md and [a](images/p.png). "
        "Not jax-ml/jax/docs/ffi.md, site-packages/jax_cudnn_rnn/x.py, tests/test_<name>.py or "
        "https://x.org/docs/y.\n"
        "Call ops.resolve_precision(), jcr.rnn, jax_cudnn_rnn.backends.registry.choose, RNNConfig.num_units; "
        "not jax.config.update, np.dtype or dtype.name; compose.py is a file, config.json too."
    )
    assert [(kind, cited) for _, kind, cited in citations(text, "docs")] == [
        ("path", "jax_cudnn_rnn/ops.py"),
        ("path", "tests/support.py"),
        ("path", "lab/x.md"),
        ("path", "docs/images/p.png"),
        ("file name", "compose.py"),
        ("node id", "tests/support.py::draw_inputs"),
        ("name", "ops.resolve_precision"),
        ("name", "jcr.rnn"),
        ("name", "jax_cudnn_rnn.backends.registry.choose"),
        ("name", "RNNConfig.num_units"),
    ]


@pytest.mark.parametrize(
    "cited, exists",
    [
        ("jax_cudnn_rnn.backends.registry.choose", True),
        ("jax_cudnn_rnn.backends.registry.no_such_name", False),
        ("jcr.rnn", True),
        ("jcr.algorithm", False),
        ("ops.resolve_precision", True),
        ("ops.no_such_name", False),
        ("native_extension.NativeExtension.load", True),
        ("native_extension.NativeExtension.no_such_name", False),
        ("cudnn.registered_targets", True),
        ("cudnn.no_such_name", False),
        ("config.num_units", True),
        ("config.no_such", False),
        ("RNNConfig.num_units", True),
        ("RNNConfig.dtype.name", True),
        ("Placement.local_batches", True),
        ("Placement.no_such_name", False),
        ("support.draw_inputs", True),
        ("flax.linen.LSTMCell", True),
    ],
)
def test_names_resolve_as_they_should(cited, exists):
    assert name_resolves(cited) is exists


def test_paths_exist_as_they_should():
    assert path_exists("jax_cudnn_rnn/backends/registry.py") and path_exists("docs") and path_exists("docs/api/")
    assert path_exists("jax_cudnn_rnn/_build_info.py")  # GENERATED
    assert not path_exists("docs/no-such-page.md") and not path_exists("../shared/CUDNN_NOTES.md")
    assert "compose.py" in FILE_NAMES and "no_such_file.py" not in FILE_NAMES


def test_the_generated_files_are_made_from_files_of_the_repository():
    assert all(path_exists(template) for template in GENERATED.values())


def test_a_broken_citation_is_reported(tmp_path, monkeypatch):
    (tmp_path / "jax_cudnn_rnn").mkdir()
    (tmp_path / "jax_cudnn_rnn" / "x.py").write_text(
        '"""Calls ``ops.no_such_name``; see jax_cudnn_rnn/ops.py."""\n\n# docs/no-such-page.md, old_module.py\n'
        'raise ValueError("jax_cudnn_rnn.algorithm.tuned() lists them")\n'
        "# tests/support.py::draw_inputs, tests/support.py::test_matches_xla[lstm]\n"
    )
    monkeypatch.setitem(globals(), "ROOT", str(tmp_path))  # where the file is read from; what exists is unchanged
    assert broken_citations(["jax_cudnn_rnn/x.py"]) == [
        "jax_cudnn_rnn/x.py:1: ops.no_such_name",
        "jax_cudnn_rnn/x.py:3: docs/no-such-page.md",
        "jax_cudnn_rnn/x.py:3: old_module.py",
        "jax_cudnn_rnn/x.py:4: jax_cudnn_rnn.algorithm.tuned",
        "jax_cudnn_rnn/x.py:5: tests/support.py::test_matches_xla",  # the right name in the wrong file
    ]
