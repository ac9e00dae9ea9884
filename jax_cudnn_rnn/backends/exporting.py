"""``export``: ``jax.export`` of a function that uses this package, whatever implementation runs its calls, and
``export_needs``: what the exported artifact needs where it runs.

Plain ``jax.export.export`` refuses a native implementation's calls: it checks every custom call against the targets
JAX guarantees to stay compatible, and neither extension's FFI targets are among them (nor is jax's own cuDNN RNN).
So the CPU default, where it runs oneDNN, fails with JAX's generic message. ``export`` disables that check for this
package's targets only and lets the cuDNN calls' guard through (``backends/cudnn/exporting.py``), which still refuses a
cuDNN call partitioned over several devices. Shape-polymorphic arguments are refused by ``rnn()`` itself, by name:
every implementation plans a call from its concrete sizes.

What runs the artifact must register the same targets: import jax_cudnn_rnn, with the extension each target belongs
to loaded, of a version whose targets take the operands and attributes of the exporting one's (the targets carry no
version of their own; JAX promises nothing for user-defined custom calls either). A native call's buffers are sized
where it is exported: the oneDNN weights and reserve space for the exporting CPU's oneDNN kernels, cuDNN's reserve
space for the exporting GPU's model and cuDNN; the handlers check the sizes at run time and fail naming both.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.export

from jax_cudnn_rnn.backends.cudnn import exporting as cudnn_exporting
from jax_cudnn_rnn.backends.cudnn import extension as cudnn_extension
from jax_cudnn_rnn.backends.onednn import extension as onednn_extension

# Each extension and the platform (as jax.export names it) its targets are registered for. Its targets are the ones it
# declares (its ``TARGETS``, which a loaded module must register: every target its kernels call), so that every
# implementation the registry can run exports.
_EXTENSIONS = ((cudnn_extension.EXTENSION, "cuda"), (onednn_extension.EXTENSION, "cpu"))
TARGETS = tuple(target for extension, _ in _EXTENSIONS for target in extension.required_targets)


def _version() -> str:
    import jax_cudnn_rnn  # the package's __init__ has run by the time anyone exports

    return jax_cudnn_rnn.__version__


@dataclasses.dataclass(frozen=True)
class ExportNeeds:
    """What an exported artifact needs where it runs (``export_needs``).

    platforms: the platforms it was exported for (it runs on one of them). targets: this package's FFI targets it
    calls, per platform ({} for one that runs pure JAX only: then it needs nothing of this package). version: the
    version of jax_cudnn_rnn asked (whose targets' operands and attributes the artifact must match).
    """

    platforms: tuple[str, ...]
    targets: dict[str, tuple[str, ...]]
    version: str

    def missing(self) -> list[str]:
        """Why this process cannot run the artifact (an empty list when it can): an extension whose targets it
        calls is not loaded here, or no device of a platform it was exported for."""
        reasons = []
        for extension, platform in _EXTENSIONS:
            used = [t for t in self.targets.get(platform, ()) if t in extension.required_targets]
            if used and not extension.loaded():
                reasons.append(
                    f"it calls {', '.join(used)}, but the {extension.what} is not loaded: {extension.error()}"
                )
        here = {_platform(device) for backend in ("cpu", "gpu") for device in _devices(backend)}
        if not here & set(self.platforms):
            reasons.append(
                f"it was exported for {', '.join(self.platforms)}, and this process has no device there (it has "
                f"{', '.join(sorted(here))})"
            )
        return reasons

    def check(self) -> None:
        """Raises RuntimeError naming what ``missing`` finds, before XLA would fail with a message of its own."""
        reasons = self.missing()
        if reasons:
            raise RuntimeError(f"this process cannot run the exported function: {'; '.join(reasons)}. It needs {self}")

    def __str__(self) -> str:
        used = {p: t for p, t in self.targets.items() if t}
        if not used:
            return (
                f"a device of {' or '.join(self.platforms)} and jax; no FFI target of jax_cudnn_rnn (its calls run "
                "pure JAX), so the package need not be imported"
            )
        calls = "; ".join(f"on {p}: {', '.join(t)}" for p, t in used.items())
        sized = {
            "cpu": "oneDNN's weights and reserve space for that CPU's kernels",
            "cuda": "cuDNN's reserve space for that GPU model and cuDNN",
        }
        return (
            f"a device of {' or '.join(self.platforms)}, and `import jax_cudnn_rnn` before the call, version "
            f"{self.version} or one whose FFI targets take the same operands and attributes ({calls}), with the "
            f"extensions of those targets loaded; buffers sized where it was exported "
            f"({'; '.join(sized[p] for p in used if p in sized)}) must fit here, as the handlers check"
        )


def _platform(device: jax.Device) -> str:
    """jax.export's name of a device's platform ("gpu" devices of the CUDA plugin are "cuda")."""
    return "cuda" if device.platform == "gpu" and "cuda" in device.client.platform_version.lower() else device.platform


def _devices(backend: str) -> list[jax.Device]:
    try:
        return jax.devices(backend)
    except RuntimeError:  # no such backend here
        return []


def export_needs(exported: jax.export.Exported) -> ExportNeeds:
    """What ``exported`` (from ``export``, or ``jax.export.deserialize``'d in another process) needs where it runs:
    its platforms and this package's FFI targets it calls, read from its module. ``export_needs(e).check()`` raises
    a RuntimeError naming what this process lacks (an extension not loaded, and why; no device of its platforms)."""
    if not isinstance(exported, jax.export.Exported):
        raise TypeError(f"exported must be a jax.export.Exported, got {type(exported).__name__}")
    called = set(re.findall(r"stablehlo\.custom_call @(jax_cudnn_rnn_\w+)\(", exported.mlir_module()))
    targets = {
        platform: tuple(t for t in extension.required_targets if t in called)
        for extension, platform in _EXTENSIONS
        if platform in exported.platforms and called & set(extension.required_targets)
    }
    return ExportNeeds(tuple(exported.platforms), targets, _version())


def export(
    fn: Callable[..., Any], *, platforms: Sequence[str] | None = None, disabled_checks: Sequence[Any] = (), **kwargs
) -> Callable[..., jax.export.Exported]:
    """``jax.export.export(fn, platforms=..., ...)`` for a function that calls this package, on any implementation:
    the pure-JAX ones, oneDNN on the CPU (the CPU default where it is faster) and cuDNN on one GPU.

    fn: the function (jitted with ``jax.jit`` if it is not already). platforms: as ``jax.export.export`` takes them
    (None: the default backend's); ``implementation=None`` keeps each platform's choice. disabled_checks, kwargs:
    passed on; JAX's compatibility check is disabled for this package's FFI targets only.

    Returns what ``jax.export.export`` returns: call it with the arguments (or their ``jax.ShapeDtypeStruct``s) for
    a ``jax.export.Exported``; ``export_needs(exported)`` says what it needs where it runs (this package imported,
    of a version with the same targets, with their extensions loaded; a device of its platforms).

    Refused with a ValueError naming why: a cuDNN call partitioned over several devices (its partitioning callback
    exists only in this process: export the per-device function, inside ``jax.shard_map``), and arguments of
    symbolic shape (``rnn()`` plans every call from concrete sizes: one artifact per shape).
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__}")
    if not isinstance(fn, jax.stages.Wrapped):
        fn = jax.jit(fn)
    checks = [*disabled_checks, *(jax.export.DisabledSafetyCheck.custom_call(target) for target in TARGETS)]
    exporter = jax.export.export(fn, platforms=platforms, disabled_checks=checks, **kwargs)

    def run(*args: Any, **call_kwargs: Any) -> jax.export.Exported:
        with cudnn_exporting.allowed():
            return exporter(*args, **call_kwargs)

    return run


def cudnn_export(fn: Callable[..., Any], *, platforms: Sequence[str] = ("cuda",), **kwargs: Any):
    """``jax_cudnn_rnn.cudnn.export`` until 0.3.0: ``export`` with CUDA as the default platform."""
    return export(fn, platforms=platforms, **kwargs)
