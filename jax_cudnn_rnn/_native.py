"""Loading an optional native module of FFI handlers (the cuDNN and the oneDNN extensions) and registering its targets.

Loading never raises: when the module is absent or broken, ``loaded()`` is False and ``error()`` says why and how to
build it, and the package runs its pure-JAX implementation. A module exports ``registrations()``, a dict of target
name -> FFI capsule, registered with ``jax.ffi.register_ffi_target`` for one platform.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType


class NativeExtension:
    """One optional native module: ``name`` (e.g. "jax_cudnn_rnn._cudnn_rnn"), described as ``what`` in messages."""

    def __init__(self, name: str, what: str, platform: str, build_hint: str):
        self.name, self.what, self.platform, self.build_hint = name, what, platform, build_hint
        self._module: ModuleType | None = None
        self._error: str | None = "not loaded yet"
        self._targets: tuple[str, ...] = ()

    def available(self) -> bool:
        """Whether the module is part of this installation (without importing it)."""
        try:
            return importlib.util.find_spec(self.name) is not None
        except (ImportError, ValueError):  # ValueError: the module is None in sys.modules (blocked on purpose)
            return False

    def load(self, before_import: Callable[[], str | None] = lambda: None) -> None:
        """Imports the module and registers its targets. ``before_import`` runs first when the module is there (e.g.
        preloading its libraries) and returns a note to add to an import error, or None."""
        if not self.available():
            self._error = f"the {self.what} {self.name} is not part of this installation; {self.build_hint}"
            return
        note = before_import()
        try:
            module = importlib.import_module(self.name)
        except (ImportError, OSError) as e:
            self._error = f"importing the {self.what} {self.name} failed: {e}" + (f" ({note})" if note else "")
            return
        try:
            import jax

            registered = []
            for name, capsule in module.registrations().items():
                jax.ffi.register_ffi_target(name, capsule, platform=self.platform)
                registered.append(name)
        except Exception as e:  # noqa: BLE001 - any failure here must become error(), never an import error
            self._error = f"registering the {self.what}'s FFI targets with JAX failed: {type(e).__name__}: {e}"
            return
        self._module, self._targets, self._error = module, tuple(registered), None

    def loaded(self) -> bool:
        """True when the module was imported and all its FFI targets are registered."""
        return self._module is not None

    def error(self) -> str | None:
        """Why the module is not loaded (not built, import error, registration error), or None when it is."""
        return self._error

    def targets(self) -> tuple[str, ...]:
        """Names of the registered FFI targets (empty when the module is not loaded)."""
        return self._targets

    def module(self) -> ModuleType:
        """The loaded module; raises RuntimeError with the reason and how to build it when it is not loaded."""
        if self._module is None:
            raise RuntimeError(f"the {self.what} is not loaded: {self._error}")
        return self._module
