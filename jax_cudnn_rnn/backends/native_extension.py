"""Loading an optional native module of FFI handlers (the cuDNN and the oneDNN extensions) and registering its targets.

Loading never raises: when the module is absent or broken, ``loaded()`` is False and ``error()`` says why and how to
fix it, and the package runs its pure-JAX implementation. Why a module is absent is told as precisely as is known: the
reason the build recorded when it skipped it (``jax_cudnn_rnn/_build_info.py``, written by CMake), or that the
package was imported from an uncompiled source checkout, or else how to build it. A module exports
``registrations()``, a dict of target name -> FFI capsule, registered with ``jax.ffi.register_ffi_target`` for one
platform.

No handler that the running XLA would refuse is ever registered: XLA accepts a handler whose XLA FFI API version is at
most its own, and refuses a newer one when it initializes its backend, which then fails for every computation, ours
or not. Each module records the FFI API version of the headers it was compiled against (common/module_helpers.h);
``ffi_api_refusal`` compares it with the running jaxlib's before anything is registered.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
import importlib.util
import os
import re
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # jax_cudnn_rnn/


# The XLA FFI C API version (major, minor) of jaxlib releases, read from each release's wheel on PyPI
# (jaxlib/include/xla/ffi/api/c_api.h: XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR) on 2026-11-25, 0.11.2 and 0.12.0.1 (the
# newest on the index) on 2026-11-27; docs/compatibility.md keeps the same table. The running jaxlib's own headers are
# read first (``running_xla_ffi_api_version``); this table answers where they are missing, for a release at or after a
# listed one (the version never goes down).
XLA_FFI_API_OF_JAXLIB = {
    "0.7.2": (0, 1),
    "0.8.0": (0, 1),
    "0.9.0": (0, 2),
    "0.10.0": (0, 3),
    "0.10.2": (0, 3),
    "0.11.0": (0, 3),
    "0.11.1": (0, 4),
    "0.11.2": (0, 4),
    "0.12.0": (0, 5),
    "0.12.0.1": (0, 5),
}


def _release(version: str) -> tuple[int, ...]:
    """ "0.10.2" -> (0, 10, 2); a local or pre-release suffix is ignored ("0.11.1.dev20260101" -> (0, 11, 1))."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _jaxlib_version() -> str | None:
    """The running jaxlib's version: its distribution's metadata, else the version jaxlib itself declares
    (``jaxlib.version``: a jaxlib built from source or installed without metadata), else None."""
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return str(importlib.import_module("jaxlib.version").__version__)
    except (ImportError, AttributeError):
        return None


def running_xla_ffi_api_version() -> tuple[int, int] | None:
    """The XLA FFI C API version (major, minor) of the running jaxlib: read from the headers its wheel ships, else
    from ``XLA_FFI_API_OF_JAXLIB`` (the newest listed release at or before it); None if neither tells (jaxlib exposes
    the version to Python nowhere else: ``ffi_api_refusal`` then registers nothing)."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is not None and spec.origin:
        try:
            with open(
                os.path.join(os.path.dirname(spec.origin), "include", "xla", "ffi", "api", "c_api.h"), encoding="utf-8"
            ) as f:
                text = f.read()
            found = [re.search(rf"^#define XLA_FFI_API_{k} (\d+)", text, re.MULTILINE) for k in ("MAJOR", "MINOR")]
            if all(found):
                return int(found[0].group(1)), int(found[1].group(1))
        except OSError:
            pass
    running = _jaxlib_version()
    if running is None:
        return None
    listed = [r for r in XLA_FFI_API_OF_JAXLIB if _release(r) <= _release(running)]
    return XLA_FFI_API_OF_JAXLIB[max(listed, key=_release)] if listed else None


def ffi_api_refusal(what: str, platform: str, module: ModuleType) -> str | None:
    """Why the handlers of ``module`` (the ``what``, registered for ``platform``) must not be registered with the
    running jaxlib, or None when XLA accepts them: its recorded XLA FFI API version is newer than the running one, or
    of another major version, or the running one cannot be told."""
    built = tuple(getattr(module, "XLA_FFI_API_BUILD_VERSION", ()))
    fix = (
        "reinstall this package from an isolated build (`pip install --force-reinstall --no-deps jax-cudnn-rnn`, "
        "or `pip install .` in a checkout), which compiles against the oldest jaxlib the package supports and "
        "loads with every newer one"
    )
    if len(built) != 2:  # a module older than this loader: nothing says which jax it can be registered with
        return (
            f"the {what} ({module.__file__}) does not record the XLA FFI API version it was compiled against, so "
            f"none of its handlers were registered (one newer than the running jaxlib's would have broken every "
            f"JAX computation on {platform}); {fix}"
        )
    running = running_xla_ffi_api_version()
    jaxlib, built_jaxlib = _jaxlib_version(), getattr(module, "JAXLIB_BUILD_VERSION", "unknown")
    if running is None:  # neither its headers nor its version tell: registering would be a guess at every computation
        return (
            f"the XLA FFI API version of the running jaxlib ({jaxlib or 'no version found'}) could not be told: "
            f"its wheel ships no xla/ffi/api/c_api.h and its version is not in the table of releases this package "
            f"knows (oldest {min(XLA_FFI_API_OF_JAXLIB, key=_release)}), so none of the {what}'s handlers (XLA FFI "
            f"API {built[0]}.{built[1]}, from jaxlib {built_jaxlib}) were registered: a handler newer than the "
            f"running XLA would have broken every JAX computation on {platform}. Fix: install a released jax and "
            f"jaxlib >= {min(XLA_FFI_API_OF_JAXLIB, key=_release)} from the package index"
        )
    if built[0] == running[0] and built[1] <= running[1]:
        return None
    first = min((r for r, v in XLA_FFI_API_OF_JAXLIB.items() if v >= built), key=_release, default=None)
    upgrade = (
        f"jax and jaxlib >= {first}" if first else "a jax and jaxlib whose XLA FFI API is " + ".".join(map(str, built))
    )
    return (
        f"the {what} was compiled against the XLA FFI headers of jaxlib {built_jaxlib} (XLA FFI API "
        f"{built[0]}.{built[1]}), which the running jaxlib {jaxlib} (XLA FFI API {running[0]}.{running[1]}) "
        f"cannot accept: XLA refuses handlers newer than itself, and the refusal would have broken every JAX "
        f"computation on {platform}, so none were registered and the pure-JAX implementation runs instead. Fix: "
        f"{fix}, or install {upgrade}"
    )


class ExtensionRefusedWarning(UserWarning):
    """A native extension is installed but was not registered, because the running jax cannot accept its handlers
    (or cannot tell whether it can), or because it lacks a target this version calls (a stale build): ``rnn()`` runs
    the pure-JAX implementation where it would have run. ``extension_error()`` says why and how to
    fix it."""


def build_record(name: str, default: Any = None) -> Any:
    """What the build recorded under ``name`` in ``jax_cudnn_rnn/_build_info.py`` (generated by CMake at install time,
    like the native modules), or ``default`` where it recorded nothing or in a source checkout that was never built."""
    try:
        build_info = importlib.import_module("jax_cudnn_rnn._build_info")
    except ImportError:
        return default
    return getattr(build_info, name, default)


def build_skip_reason(option: str) -> str | None:
    """What the build said was missing when it skipped the extension of CMake option ``option`` (e.g.
    "JAX_CUDNN_RNN_CUDA"), or None where the build recorded nothing (a source checkout that was never built)."""
    return build_record("SKIP_REASONS", {}).get(option) or None


def in_source_checkout() -> bool:
    """Whether this package is the one in a source tree (next to pyproject.toml and cuda/), not an installed copy."""
    root = os.path.dirname(_PACKAGE_DIR)
    return os.path.isfile(os.path.join(root, "pyproject.toml")) and os.path.isdir(os.path.join(root, "cuda"))


def preload(distribution: str, filename: str, global_scope: bool = True) -> str | None:
    """Loads the shared library ``filename`` that the pip distribution ``distribution`` installed (wherever pip put
    it: a virtual environment, --user or another prefix), so that a native module linking it finds that one by its
    soname and never another library of that name. ``global_scope``: RTLD_GLOBAL (its symbols serve every library
    loaded later), else RTLD_LOCAL (only the libraries that link it bind to it). Returns its path, or None when the
    distribution is not installed or holds no such file; raises OSError when it cannot be loaded."""
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == filename:
            path = str(file.locate())
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL if global_scope else ctypes.RTLD_LOCAL)
            return path
    return None


class NativeExtension:
    """One optional native module.

    name: its import name ("jax_cudnn_rnn._cudnn_rnn"); what: how messages call it ("cuDNN extension"); platform: the
    platform its targets are registered for; build_hint: how to build it; option: its CMake AUTO/ON/OFF option
    (whose recorded skip reason ``error()`` repeats); library: (a substring of a missing shared library's name in an
    import error, what to install to get that library), or None; targets: the FFI targets the Python side calls;
    attributes: the module's functions and constants the Python side uses. A module that lacks one of those (left
    from a build of an older version: the oneDNN weights call came later than its forward) is refused at load, where
    the pure-JAX implementation can still run, not at the first lowering or call that needs it.
    """

    def __init__(
        self,
        name: str,
        what: str,
        platform: str,
        build_hint: str,
        option: str,
        library: tuple[str, str] | None = None,
        targets: tuple[str, ...] = (),
        attributes: tuple[str, ...] = (),
    ):
        self.name, self.what, self.platform, self.build_hint = name, what, platform, build_hint
        self.option, self.library = option, library
        self.required_targets, self.required_attributes = targets, attributes
        self._module: ModuleType | None = None
        self._error: str | None = "not loaded yet"
        self._warning: str | None = None
        self._targets: tuple[str, ...] = ()

    def available(self) -> bool:
        """Whether the module is part of this installation (without importing it)."""
        try:
            return importlib.util.find_spec(self.name) is not None
        except (ImportError, ValueError):  # ValueError: the module is None in sys.modules (blocked on purpose)
            return False

    def _absent(self) -> str:
        """Why the module is not part of this installation, as precisely as is known."""
        skipped = build_skip_reason(self.option)
        if skipped:
            return (
                f"the {self.what} was not built when this package was installed: {skipped}. Reinstall after "
                f"fixing that ({self.option}=ON makes a missing dependency a build error)"
            )
        if in_source_checkout():
            return (
                f"this jax_cudnn_rnn was imported from the source checkout {os.path.dirname(_PACKAGE_DIR)}, "
                f"which holds no compiled {self.what} (Python looks in the current directory first): run from "
                f"another directory to use the installed package, or install it editable (`pip install "
                f"--no-build-isolation -e .`); {self.build_hint}"
            )
        return f"the {self.what} {self.name} is not part of this installation; {self.build_hint}"

    def load(
        self,
        before_import: Callable[[], str | None] = lambda: None,
        check: Callable[[ModuleType], tuple[str | None, str | None]] = lambda module: (None, None),
    ) -> None:
        """Imports the module and registers its targets.

        ``before_import`` runs first when the module is there (e.g. preloading its libraries) and returns a note to
        add to an import error, or None. ``check(module)`` runs after the import and returns (why the module must not
        be used, or None; a note on something it can live with, which ``error()`` reports while it is loaded, or
        None)."""
        self._module, self._targets, self._warning = None, (), None
        if not self.available():
            self._error = self._absent()
            return
        note = before_import()
        try:
            module = importlib.import_module(self.name)
        except ModuleNotFoundError as e:
            self._error = self._absent() if e.name == self.name else f"importing the {self.what} failed: {e}"
            return
        except (ImportError, OSError) as e:
            self._error = f"importing the {self.what} {self.name} failed: {e}"
            if self.library and self.library[0] in str(e) and not note:
                self._error += f"; {self.library[1]}"
            if note:
                self._error += f" ({note})"
            return
        try:
            registrations = dict(module.registrations())
        except Exception as e:  # noqa: BLE001 - a module that cannot list its handlers registers none
            self._error = f"asking the {self.what} for its FFI targets failed: {type(e).__name__}: {e}"
            return
        refusal = ffi_api_refusal(self.what, self.platform, module) or self._incomplete(module, registrations)
        if refusal:
            self._error = refusal
            warnings.warn(ExtensionRefusedWarning(refusal[0].upper() + refusal[1:]), stacklevel=2)
            return
        try:
            refusal, warning = check(module)
        except Exception as e:  # noqa: BLE001 - a module that cannot answer its checks is not one to trust
            refusal, warning = f"checking the {self.what} failed: {type(e).__name__}: {e}", None
        if refusal:
            self._error = refusal
            return
        try:
            import jax

            registered = []
            for name, capsule in registrations.items():
                jax.ffi.register_ffi_target(name, capsule, platform=self.platform)
                registered.append(name)
        except Exception as e:  # noqa: BLE001 - any failure here must become error(), never an import error
            self._error = f"registering the {self.what}'s FFI targets with JAX failed: {type(e).__name__}: {e}"
            return
        self._module, self._targets, self._error, self._warning = module, tuple(registered), None, warning

    def _incomplete(self, module: ModuleType, registrations: dict[str, Any]) -> str | None:
        """Why ``module`` cannot serve this version of the package (it lacks a target or an attribute the Python
        side uses), or None."""
        targets = [t for t in self.required_targets if t not in registrations]
        attributes = [a for a in self.required_attributes if not hasattr(module, a)]
        if not targets and not attributes:
            return None
        lacks = " and ".join(
            f"the {kind} {', '.join(names)}"
            for kind, names in (("FFI targets", targets), ("attributes", attributes))
            if names
        )
        return (
            f"the {self.what} ({getattr(module, '__file__', self.name)}) lacks {lacks}, which this version of "
            f"jax_cudnn_rnn calls: it is left from a build of an older version, so none of its handlers were "
            f"registered and the pure-JAX implementation runs instead. Fix: reinstall the package (`pip install "
            f"--force-reinstall --no-deps jax-cudnn-rnn`, or `pip install .` in a checkout), which builds the "
            f"extension of this version"
        )

    def loaded(self) -> bool:
        """True when the module was imported and all its FFI targets are registered."""
        return self._module is not None

    def error(self) -> str | None:
        """Why the module is not loaded (not built and why, import error, a failed check, registration error); when
        it is loaded, the note its check left (e.g. built against another jaxlib than the one running), else None."""
        return self._error if self._module is None else self._warning

    def targets(self) -> tuple[str, ...]:
        """Names of the registered FFI targets (empty when the module is not loaded)."""
        return self._targets

    def module(self) -> ModuleType:
        """The loaded module; raises RuntimeError with the reason and how to build it when it is not loaded."""
        if self._module is None:
            raise RuntimeError(f"the {self.what} is not loaded: {self._error}")
        return self._module
