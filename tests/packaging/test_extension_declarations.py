"""Issue 59: what each native extension declares it serves is what the package calls of it, so that the lists kept
beside the code cannot drift from it: every FFI target the package's ``jax.ffi.ffi_call``s name is one its extension
declares (its ``TARGETS``, the targets a loaded module must register: one lacking any is refused at load; and
``jax_cudnn_rnn.export`` lets them through), and every attribute the package reads of a loaded module is one it
requires. Read from the source (the package's AST), so that a new call or attribute without its declaration fails
here, on any machine."""

from __future__ import annotations

import ast
import pathlib

import pytest

from jax_cudnn_rnn.backends import exporting
from jax_cudnn_rnn.backends.cudnn import extension as cudnn_extension
from jax_cudnn_rnn.backends.onednn import extension as onednn_extension

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "jax_cudnn_rnn"
EXTENSIONS = {"cudnn": cudnn_extension, "onednn": onednn_extension}
# Attributes every module has, which the loader itself reads (native_extension.py) or Python gives every module.
LOADER_ATTRIBUTES = {"registrations", "__file__", "__name__"}


def _trees():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def _backend_of(path: pathlib.Path) -> str | None:
    parts = path.relative_to(PACKAGE).parts
    return parts[1] if len(parts) > 2 and parts[0] == "backends" and parts[1] in EXTENSIONS else None


def _ffi_call_targets() -> dict[str, set[str]]:
    """{backend: the names of the extension module's *_TARGET constants its modules pass to jax.ffi.ffi_call}."""
    found: dict[str, set[str]] = {}
    for path, tree in _trees():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "jax.ffi.ffi_call"):
                continue
            target = node.args[0]
            assert isinstance(target, ast.Attribute) and target.attr.endswith("_TARGET"), (
                f"{path}:{node.lineno}: ffi_call's target must be an extension's declared *_TARGET constant, "
                f"got {ast.unparse(target)}"
            )
            backend = _backend_of(path)
            assert backend is not None, f"{path}:{node.lineno}: an ffi_call outside backends/cudnn or backends/onednn"
            found.setdefault(backend, set()).add(target.attr)
    return found


def _module_attributes() -> set[str]:
    """Attributes read of a loaded native module: ``<x>.module().name``, and ``native.name`` where a name was bound
    to such a module (``native = extension.module()``)."""
    used = set()
    for _, tree in _trees():
        bound = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "module"
                for n in ast.walk(node.value)
            ):
                bound |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            value = node.value
            is_module_call = (
                isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "module"
            )
            if is_module_call or (isinstance(value, ast.Name) and value.id in bound):
                used.add(node.attr)
    return used


@pytest.mark.parametrize("backend", sorted(EXTENSIONS))
def test_every_target_the_package_calls_is_declared(backend):
    extension = EXTENSIONS[backend]
    called = {getattr(extension, name) for name in _ffi_call_targets()[backend]}
    declared = set(extension.EXTENSION.required_targets)
    assert called <= declared, f"called but not declared in {extension.__name__}.TARGETS: {sorted(called - declared)}"
    assert declared == set(extension.TARGETS)
    assert set(extension.TARGETS) <= set(exporting.TARGETS)  # what export lets through


def test_every_target_declared_is_called():
    """No stale declaration either: a target the package no longer calls would refuse builds for nothing."""
    for backend, names in _ffi_call_targets().items():
        assert {getattr(EXTENSIONS[backend], name) for name in names} == set(EXTENSIONS[backend].TARGETS)


def test_every_module_attribute_the_package_reads_is_required():
    used = _module_attributes() - LOADER_ATTRIBUTES
    required = {a for ext in EXTENSIONS.values() for a in ext.EXTENSION.required_attributes}
    assert used, "the scan found no attribute reads: it is broken"
    assert used <= required, f"read but not required by either extension: {sorted(used - required)}"
