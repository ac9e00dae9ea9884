"""Names removed from a documented path in 0.2.0 (CHANGELOG.md), kept one release as aliases that warn.

``module_getattr(module_name, moved)`` makes a module's ``__getattr__``: ``moved`` maps each old name to (the module
that holds it now, its name there, what to use instead, as the warning says it).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

DEPRECATED_SINCE = "0.2.0"  # the release that moved the names this module resolves
REMOVED_IN = "0.3.0"


def module_getattr(module_name: str, moved: dict[str, tuple[str, str, str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that resolves the names of ``moved`` with a DeprecationWarning."""

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        home, attribute, instead = moved[name]
        warnings.warn(
            f"{module_name}.{name} is deprecated since {DEPRECATED_SINCE} and will be removed in {REMOVED_IN}; "
            f"use {instead}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), attribute)

    return __getattr__
