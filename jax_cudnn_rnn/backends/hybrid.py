"""A call whose two sides run different implementations: one where nothing differentiates it, another under
``jax.grad``.

The registry (jax_cudnn_rnn/backends/registry.py) chooses per side; where the undifferentiated side's choice and the
training step's differ (oneDNN's inference forward with the xla implementation's training step, say), it runs them
through ``hybrid``: a ``custom_vjp`` whose function is the undifferentiated side's ``run`` and whose forward and
backward rules are the differentiated side's, its values and its vjp. Each side receives the whole prepared call
(jax_cudnn_rnn/backends/call.py): lengths, resets and dropout are each side's own business, so undifferentiated the
result is exactly the first implementation's and under ``jax.grad`` exactly the second's, values and gradients.

Both sides' outputs go through ``batching.batch_first`` (jax_cudnn_rnn/backends/fused/batching.py: JAX batches a
custom_vjp staged in a ``lax.platform_dependent`` branch by batching its function and assuming the forward rule's
outputs come back mapped on the same axes, which two implementations need not do).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.custom_vjp import custom_vjp
from jax_cudnn_rnn.backends.fused.batching import batch_first
from jax_cudnn_rnn.backends.fused.vjp import KernelArrays

Run = Callable[[Call, Inputs], tuple[Any, Any, Any]]


def _with(inputs: Inputs, arrays: KernelArrays) -> Inputs:
    return inputs._replace(params=arrays.params, x=arrays.x, h0=arrays.h0, c0=arrays.c0)


def _by_jvp(undifferentiated: Run, differentiated: Run, call: Call, arrays: KernelArrays, rest: Inputs):
    """The hybrid as a ``jax.custom_jvp`` whose rule is ``differentiated``'s own forward mode: for a call under
    ``jax.vmap`` whose differentiated side JAX differentiates itself (the xla implementation's ``Call.mapped`` path),
    where a custom_vjp's backward would run batched per mapped element, each element's weight gradient formed on its
    own and summed after (an Equinox GRU's gradient, H=128, T=25, 64 sequences: 22.5 ms against 10.3 for the xla
    implementation alone)."""

    @jax.custom_jvp
    def run(arrays: KernelArrays, rest: Inputs):
        return batch_first(undifferentiated(call, _with(rest, arrays)))

    @run.defjvp
    def run_jvp(primals, tangents):
        (arrays, rest), (d_arrays, _) = primals, tangents
        outputs, d_outputs = jax.jvp(lambda arrays: differentiated(call, _with(rest, arrays)), (arrays,), (d_arrays,))
        return batch_first(outputs), d_outputs  # (a custom_vmap has no transpose: not on the tangents)

    return run(arrays, rest)


@functools.cache
def hybrid(undifferentiated: Run, differentiated: Run, mapped_by_jvp: bool = False) -> Run:
    """``run(call, inputs)``: ``undifferentiated(call, inputs)`` where nothing differentiates the call, and
    ``differentiated``'s values and gradients (with respect to params, x, h0 and c0) under ``jax.grad``.
    ``mapped_by_jvp``: ``differentiated`` takes JAX's forward mode for a call under ``jax.vmap`` (``Call.mapped``),
    and such a call is differentiated by it (``_by_jvp``)."""

    @functools.partial(custom_vjp, nondiff_argnums=(0,))
    def run(call: Call, arrays: KernelArrays, rest: Inputs):
        return batch_first(undifferentiated(call, _with(rest, arrays)))

    def run_fwd(call: Call, arrays: KernelArrays, rest: Inputs):
        outputs, pullback = jax.vjp(lambda arrays: differentiated(call, _with(rest, arrays)), arrays)
        return batch_first(outputs), pullback

    def run_bwd(call: Call, pullback, cotangents):
        del call
        # The other inputs (lengths, resets, dropout masks drawn from a key) get no gradient, as from every backend.
        (d_arrays,) = pullback(cotangents)
        return d_arrays, None

    run.defvjp(run_fwd, run_bwd)

    def hybrid_run(call: Call, inputs: Inputs):
        # The arrays the gradient is for travel as one argument; the rest of the inputs as another, without them.
        arrays = KernelArrays(inputs.params, inputs.x, inputs.h0, inputs.c0)
        rest = inputs._replace(params=None, x=None, h0=None, c0=None)
        if call.mapped and mapped_by_jvp:
            return _by_jvp(undifferentiated, differentiated, call, arrays, rest)
        return run(call, arrays, rest)

    return hybrid_run
