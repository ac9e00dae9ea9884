"""``fold_vmap``: make ``jax.vmap`` of a batch-major kernel call one call over a bigger batch.

cuDNN's inference forward takes every per-example array with a batch axis (x [T, B, I], h0 [L*D, B, H],
seq_lengths [B]) and the weights shared by the whole batch. Vmapping it with the weights unbatched is the same
computation over a batch of N*B, so instead of N sequential calls we fold the vmapped axis into each array's batch
axis (the vmapped axis goes first: folded index n*B + b), make one call, and unfold the outputs. When the weights are
themselves batched (an ensemble), there is nothing to fold: the call runs once per vmapped element (``jax.lax.map``).

Only calls whose every output is per example can fold. cuDNN's backward weights sums over the batch, and under
``jax.vmap(jax.grad(...))`` JAX needs one weight gradient per mapped element, each from the reserve space of its own
training forward; so the training forward and the backward call run once per mapped element (``sequential_vmap``,
what ``ffi_call``'s ``vmap_method="sequential"`` does, for calls that ``custom_partitioning`` wraps).

``batch_first`` puts the mapped axis of a ``custom_vjp``'s outputs first, for a custom_vjp whose undifferentiated
function and whose forward rule are different implementations (the CPU's hybrids).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp


def _fold(array: jax.Array, batched: bool, axis: int, size: int) -> jax.Array:
    """[N, ..., B, ...] (or [..., B, ...] when not batched, broadcast to N) -> [..., N*B, ...], B at ``axis``."""
    if not batched:
        array = jnp.broadcast_to(array, (size, *array.shape))
    array = jnp.moveaxis(array, 0, axis)
    shape = array.shape
    return array.reshape(*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :])


def _unfold(array: jax.Array, axis: int, size: int) -> jax.Array:
    """[..., N*B, ...] -> [N, ..., B, ...]."""
    shape = array.shape
    array = array.reshape(*shape[:axis], size, shape[axis] // size, *shape[axis + 1 :])
    return jnp.moveaxis(array, axis, 0)


def fold_vmap(
    fn: Callable[..., Sequence[jax.Array]], in_axes: Sequence[int | None], out_axes: Sequence[int]
) -> Callable[..., tuple[jax.Array, ...]]:
    """Wraps ``fn(*arrays) -> tuple of arrays`` so that ``jax.vmap`` folds the mapped axis into the batch.

    Args:
      fn: the kernel call; positional arrays in, a tuple of arrays out.
      in_axes: for each argument, the index of its batch axis, or None for an array shared by the batch.
      out_axes: for each output, the index of its batch axis.

    Under ``jax.vmap`` with every shared argument unbatched, the result is one call of ``fn`` over batch N*B. If a
    shared argument is batched, ``fn`` runs once per mapped element (``jax.lax.map``).
    """
    in_axes, out_axes = tuple(in_axes), tuple(out_axes)

    @jax.custom_batching.custom_vmap
    def call(*args: jax.Array) -> tuple[jax.Array, ...]:
        return tuple(fn(*args))

    @call.def_vmap
    def rule(size: int, in_batched: Sequence[bool], *args: jax.Array) -> tuple[tuple[jax.Array, ...], tuple[bool, ...]]:
        if any(batched and axis is None for batched, axis in zip(in_batched, in_axes, strict=True)):
            return _per_element(call, in_batched, args)
        folded = [
            arg if axis is None else _fold(arg, batched, axis, size)
            for arg, batched, axis in zip(args, in_batched, in_axes, strict=True)
        ]
        outs = call(*folded)
        unfolded = tuple(_unfold(out, axis, size) for out, axis in zip(outs, out_axes, strict=True))
        return unfolded, (True,) * len(out_axes)

    return call


def _per_element(
    call: Callable[..., tuple[jax.Array, ...]], in_batched: Sequence[bool], args: Sequence[jax.Array]
) -> tuple[tuple[jax.Array, ...], tuple[bool, ...]]:
    """``call`` once per mapped element (``jax.lax.map``), unmapped arguments shared: a custom_vmap rule's result."""
    mapped = [i for i, batched in enumerate(in_batched) if batched]

    def one(mapped_args: Sequence[jax.Array]) -> tuple[jax.Array, ...]:
        full = list(args)
        for i, value in zip(mapped, mapped_args, strict=True):
            full[i] = value
        return call(*full)

    outs = tuple(jax.lax.map(one, [args[i] for i in mapped]))
    return outs, (True,) * len(outs)


def sequential_vmap(fn: Callable[..., Sequence[jax.Array]]) -> Callable[..., tuple[jax.Array, ...]]:
    """Wraps ``fn(*arrays) -> tuple of arrays`` so that ``jax.vmap`` runs it once per mapped element, as
    ``ffi_call(..., vmap_method="sequential")`` does: for kernel calls inside ``custom_partitioning``
    (jax_cudnn_rnn/sharding/partitioning.py), which has no batching rule of its own."""

    @jax.custom_batching.custom_vmap
    def call(*args: jax.Array) -> tuple[jax.Array, ...]:
        return tuple(fn(*args))

    @call.def_vmap
    def rule(size: int, in_batched: Sequence[bool], *args: jax.Array) -> tuple[tuple[jax.Array, ...], tuple[bool, ...]]:
        del size
        return _per_element(call, in_batched, args)

    return call


@jax.custom_batching.custom_vmap
def _batch_first(*arrays: jax.Array) -> tuple[jax.Array, ...]:
    return arrays


@_batch_first.def_vmap
def _batch_first_rule(size: int, in_batched: Sequence[bool], *arrays: jax.Array):
    del size
    return arrays, tuple(in_batched)  # custom_vmap hands the rule every mapped axis first


def batch_first(outputs: Any) -> Any:
    """``outputs`` (a pytree of arrays; None leaves stay None) unchanged, but under ``jax.vmap`` with the mapped axis
    of each array first. JAX batches a ``custom_vjp`` staged inside a jaxpr (a ``lax.platform_dependent`` or
    ``lax.cond`` branch) by batching its undifferentiated function and reusing that function's output axes for its
    forward rule's outputs; where the two are different implementations their natural axes can differ (a folded kernel
    call's outputs come back mapped first, a scan's stacked outputs mapped second), and ``jax.grad`` of the vmapped
    branch then fails ("Expected cotangent type ..."). Both sides through ``batch_first`` agree."""
    leaves, tree = jax.tree.flatten(outputs)
    return jax.tree.unflatten(tree, _batch_first(*leaves)) if leaves else outputs
