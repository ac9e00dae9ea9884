"""``jax.export`` of cuDNN calls: refused by default, allowed through ``export`` for a single device.

The cuDNN FFI targets are not on JAX's list of custom calls with compatibility guarantees, and a batch-sharded call's
custom_partitioning callback lives in the exporting process. A marker (``guard``) on every forward makes exporting
them a clear error at lowering time, unless ``export`` asked for it (single-device, with JAX's check disabled for the
targets).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import jax
import jax.export
import jax.extend
from jax.interpreters import batching as jax_batching
from jax.interpreters import mlir

from jax_cudnn_rnn.backends.cudnn import extension

_exporting = threading.local()

_export_guard_p = jax.extend.core.Primitive("jax_cudnn_rnn_export_guard")
_export_guard_p.multiple_results = True
_export_guard_p.def_impl(lambda *args: args)
_export_guard_p.def_abstract_eval(lambda *avals: avals)
jax_batching.primitive_batchers[_export_guard_p] = lambda args, dims: (_export_guard_p.bind(*args), dims)

EXPORT_ADVICE = (
    "use implementation='xla' (it exports for every platform), or jax_cudnn_rnn.cudnn.export(...) for "
    "a single-device cuDNN function (docs/lowering.md)"
)


def _export_guard_lowering(ctx, *args):
    if ctx.module_context.lowering_parameters.for_export:
        context = ctx.module_context.axis_context
        devices = getattr(context, "device_assignment", None) or ()
        if len(devices) > 1:
            raise ValueError(
                f"jax.export of a cuDNN RNN call over {len(devices)} devices is not supported: its batch "
                "partitioning is a custom_partitioning callback that exists only in this process; export the "
                f"per-device function (inside jax.shard_map), or {EXPORT_ADVICE}"
            )
        if not getattr(_exporting, "allowed", False):
            raise ValueError(
                "jax.export of a cuDNN RNN call: its FFI targets (jax_cudnn_rnn_forward, ..._backward_data, "
                "..._backward_weights) are not among the custom calls JAX guarantees to stay compatible, and a "
                "differentiated call's reserve-space size was asked of this machine's GPU and cuDNN; "
                f"{EXPORT_ADVICE}"
            )
    return args


mlir.register_lowering(_export_guard_p, _export_guard_lowering)


def export(fn, *, platforms: Sequence[str] = ("cuda",), disabled_checks: Sequence[Any] = (), **kwargs):
    """``jax.export.export(fn, ...)`` for a jitted function whose ``rnn()`` calls run cuDNN on one device.

    It disables JAX's compatibility check for this library's FFI targets only. The result runs where this library is
    imported (that registers the targets) with a cuDNN and a GPU model like the exporting machine's: the reserve-space
    size of a differentiated call is fixed at export (the handlers check it at run time and fail with the sizes).
    Calls sharded over several devices cannot be exported (ValueError): export the per-device function.

    Returns the function that ``jax.export.export`` returns (call it with the arguments or their shapes).
    """
    checks = [
        *disabled_checks,
        *(
            jax.export.DisabledSafetyCheck.custom_call(target)
            for target in (extension.FORWARD_TARGET, extension.BACKWARD_DATA_TARGET, extension.BACKWARD_WEIGHTS_TARGET)
        ),
    ]
    exporter = jax.export.export(fn, platforms=platforms, disabled_checks=checks, **kwargs)

    def run(*args, **call_kwargs):
        _exporting.allowed = True
        try:
            return exporter(*args, **call_kwargs)
        finally:
            _exporting.allowed = False

    return run


def guard(*outputs: jax.Array) -> tuple[jax.Array, ...]:
    """``outputs`` unchanged, marked so that lowering them for ``jax.export`` outside ``export`` is refused."""
    return tuple(_export_guard_p.bind(*outputs))
