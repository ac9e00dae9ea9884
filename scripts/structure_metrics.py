"""Prints the package's structure numbers that docs/architecture.md records (issues 38 and 49): modules, import edges
between them, public top-level names, public modules, and the places that choose an implementation: the module that
defines the registry's ``decide``, and every other module that compares a value with an implementation's name
(``implementation_branches``; tests/packaging/test_structure.py fails on one it does not allow). Reads the source with
``ast``; imports nothing of the package.

Usage: python scripts/structure_metrics.py [PACKAGE_DIR]   (default: jax_cudnn_rnn next to this script's folder)
"""

from __future__ import annotations

import ast
import os
import sys


def module_name(package_dir: str, path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(package_dir))[: -len(".py")].replace(os.sep, ".")
    return rel.removesuffix(".__init__")


CHOOSER = "backends.registry"  # the module that decides, relative to the package


def _sources(package_dir: str) -> dict[str, ast.Module]:
    files = [os.path.join(d, f) for d, _, names in os.walk(package_dir) for f in names if f.endswith(".py")]
    trees = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            trees[module_name(package_dir, path)] = ast.parse(f.read())
    return trees


def implementation_names(trees: dict[str, ast.Module]) -> set[str]:
    """The backends' names, as each registers itself: ``registry.Backend("name", ...)``."""
    return {
        node.args[0].value
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == "Backend"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


def _names_an_implementation(value: object, names: set[str]) -> bool:
    """Whether a string is an implementation name in any form: "backend", "backend:variant", "forward+training"."""
    return isinstance(value, str) and any(part.partition(":")[0] in names for part in value.split("+"))


def implementation_branches(package_dir: str) -> dict[str, list[str]]:
    """{module: the comparisons in it whose operand is an implementation's name (a string literal, or a tuple, list
    or set of them)}, for every module but the registry: what would decide outside the one place that decides."""
    trees = _sources(package_dir)
    names = implementation_names(trees)
    package = os.path.basename(package_dir.rstrip(os.sep))
    found: dict[str, list[str]] = {}
    for module, tree in trees.items():
        if module == f"{package}.{CHOOSER}":
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            literals = [
                element.value
                for operand in operands
                for element in (operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand])
                if isinstance(element, ast.Constant)
            ]
            if any(_names_an_implementation(value, names) for value in literals):
                found.setdefault(module, []).append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "jax_cudnn_rnn")
    package = os.path.basename(package_dir.rstrip(os.sep))
    files = [os.path.join(d, f) for d, _, names in os.walk(package_dir) for f in names if f.endswith(".py")]
    modules = {module_name(package_dir, f): f for f in files}
    edges = set()
    for name, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    edges.add((name, target))

    def declared(path: str) -> list[str]:  # a module's __all__, read from its source
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for n in tree.body:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
            if any(getattr(t, "id", None) == "__all__" for t in targets) and n.value is not None:
                return list(ast.literal_eval(n.value))
        return []

    public = declared(os.path.join(package_dir, "__init__.py"))
    internal = ("backends", "cells", "sharding", "tools", "data")

    def deprecated(
        m: str,
    ) -> bool:  # an alias module kept one release (jax_cudnn_rnn/_deprecated.py), nothing of its own
        with open(modules[m], encoding="utf-8") as f:
            text = f.read()
        return "_deprecated.module_getattr" in text and "__all__: list[str] = []" in text

    public_modules = sorted(
        m
        for m in modules
        if m != package
        and not any(part.startswith("_") for part in m.split(".")[1:])
        and m.split(".")[1] not in internal
        and not deprecated(m)
    )
    print(f"modules: {len(modules)}")
    print(f"import edges between them: {len(edges)}")
    print(f"top-level public names: {len(public)}")
    print(f"public modules: {len(public_modules)} ({', '.join(m.split('.', 1)[1] for m in public_modules)})")
    print(
        f"public names (the top level's and every public module's __all__): "
        f"{len(public) + sum(len(declared(modules[m])) for m in public_modules)}"
    )
    deciders = sorted(
        name
        for name, tree in _sources(package_dir).items()
        if any(isinstance(node, ast.FunctionDef) and node.name == "decide" for node in tree.body)
    )
    print(f"modules that choose an implementation (define decide): {len(deciders)} ({', '.join(deciders)})")
    branches = implementation_branches(package_dir)
    print(f"other modules comparing a value with an implementation's name: {len(branches)}")
    for module, found in sorted(branches.items()):
        print(f"  {module}: {'; '.join(found)}")


if __name__ == "__main__":
    main()
