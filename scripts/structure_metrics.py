"""Prints the package's structure numbers that docs/architecture.md records (issue 38): modules, import edges between
them, public top-level names and public modules. Reads the source with ``ast``; imports nothing of the package.

Usage: python scripts/structure_metrics.py [PACKAGE_DIR]   (default: jax_cudnn_rnn next to this script's folder)
"""

from __future__ import annotations

import ast
import os
import sys


def module_name(package_dir: str, path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(package_dir))[: -len(".py")].replace(os.sep, ".")
    return rel.removesuffix(".__init__")


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
    with open(os.path.join(package_dir, "__init__.py"), encoding="utf-8") as f:
        init = ast.parse(f.read())
    public = next(
        (
            ast.literal_eval(n.value)
            for n in init.body
            if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in n.targets)
        ),
        [],
    )
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


if __name__ == "__main__":
    main()
