"""``jax.export`` of cuDNN calls: refused by default, allowed through ``jax_cudnn_rnn.export`` for a single device.

The cuDNN FFI targets are not on JAX's list of custom calls with compatibility guarantees, and a batch-sharded call's
custom_partitioning callback lives in the exporting process. A marker (``guard``) on every forward makes exporting
them a clear error at lowering time, unless ``jax_cudnn_rnn.export`` asked for it (``allowed``: single-device, with
JAX's check disabled for the targets; ``jax_cudnn_rnn/backends/exporting.py``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import jax
import jax.extend
from jax.interpreters import batching as jax_batching
from jax.interpreters import mlir

_exporting = threading.local()

_export_guard_p = jax.extend.core.Primitive("jax_cudnn_rnn_export_guard")
_export_guard_p.multiple_results = True
_export_guard_p.def_impl(lambda *args: args)
_export_guard_p.def_abstract_eval(lambda *avals: avals)
jax_batching.primitive_batchers[_export_guard_p] = lambda args, dims: (_export_guard_p.bind(*args), dims)

EXPORT_ADVICE = (
    "export with jax_cudnn_rnn.export(...), which exports a single-device cuDNN function and names what it needs "
    "where it runs, or use implementation='xla' (it exports for every platform with plain jax.export; docs/lowering.md)"
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


@contextlib.contextmanager
def allowed() -> Iterator[None]:
    """Within it, this thread's lowerings for ``jax.export`` let single-device cuDNN calls through
    (``jax_cudnn_rnn.export``, which disables JAX's check for their targets)."""
    before = getattr(_exporting, "allowed", False)
    _exporting.allowed = True
    try:
        yield
    finally:
        _exporting.allowed = before


def guard(*outputs: jax.Array) -> tuple[jax.Array, ...]:
    """``outputs`` unchanged, marked so that lowering them for ``jax.export`` outside ``export`` is refused."""
    return tuple(_export_guard_p.bind(*outputs))
