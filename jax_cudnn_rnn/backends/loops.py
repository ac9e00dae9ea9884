"""Whether a call's weights stay the same over the loop being traced: what lets XLA compute what depends on them alone
once, before the loop (the xla implementation's joined one step; the CPU rule's choice for a call of few steps)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

Array = jax.Array

# What jax traces a loop's body for (the jaxpr's debug_info.traced_for): lax.scan (Flax's nn.scan and nnx.scan run
# on it; Flax's shape pass is "flax scan"), fori_loop, while_loop's body.
LOOP_BODIES = ("scan", "flax scan", "fori_loop", "while_body")


def loop_invariant(arrays: Sequence[Any], varying: Array) -> bool:
    """Whether ``arrays`` do not change from one iteration of the loop being traced to the next: the jaxpr being built
    now is a loop's body (``lax.scan``, ``fori_loop``, ``while_loop``; linen's ``nn.scan``), ``varying`` (the step's
    input) one of its tracers, and each of ``arrays`` a tracer of an enclosing trace, a value the body closes over, as
    a decoding loop's weights (jit's, or grad's around the loop). XLA computes what depends on such operands alone
    once, before the loop. Not where the current trace is a transformation's (``jax.grad`` of the parameters only:
    the weights are its tracers, the input the jit's; ``jax.vmap`` over the input), nor a lone step under ``jit``
    (its weights arguments, of its input's trace) or under a ``jit``, ``checkpoint`` or ``cond`` nested in one and
    closing over its weights (no loop there to hoist from), concrete weights (XLA would concatenate them at every
    call), nor ``nnx.scan`` with the module broadcast, which passes the module's state through the loop's carry, nor
    a step wrapped again inside the body (``nn.remat`` of it): each keeps the per-gate products, right everywhere.
    Which trace is current, what it traces for and which a tracer belongs to are not public API: False where this
    jax does not say."""
    trace = getattr(varying, "_trace", None)
    internals = getattr(getattr(jax, "_src", None), "core", None)  # jax's own, imported with it
    current = getattr(getattr(internals, "trace_ctx", None), "trace", None)
    traced_for = getattr(getattr(getattr(trace, "frame", None), "debug_info", None), "traced_for", None)
    return (
        trace is not None
        and trace is current
        and type(trace).__name__ == "DynamicJaxprTrace"
        and traced_for in LOOP_BODIES
        and all(isinstance(a, jax.core.Tracer) and getattr(a, "_trace", trace) is not trace for a in arrays)
    )


def mapped(varying: Array) -> int:
    """How many elements ``jax.vmap`` maps ``varying`` (a call's input) over here, 0 where none: the product of the
    sizes of the batching traces that hold it, as an Equinox module's per-sequence call inside the user's ``jax.vmap``
    sees its input (1 for a vmap whose size this jax does not say). A kernel that runs such a call once per mapped
    element (an FFI call's ``vmap_method="sequential"``) then runs it that many times; XLA's own programs take the
    mapped axis into their products. Not where the vmap encloses a ``jit`` that encloses the call (the jit's program is
    mapped after it is traced). Which trace a tracer belongs to is not public API: 0 where this jax does not say."""
    elements = 0
    while type(getattr(varying, "_trace", None)).__name__ == "BatchTrace":
        size = getattr(getattr(varying._trace, "axis_data", None), "size", None)
        elements = max(elements, 1) * (size if isinstance(size, int) else 1)
        varying = getattr(varying, "val", None)
    return elements
