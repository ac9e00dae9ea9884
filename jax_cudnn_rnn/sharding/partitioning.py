"""``batch_partitioned``: run a batch-major kernel call once per batch shard under ``jax.jit`` sharding.

To XLA's partitioner a cuDNN call is an opaque custom call: left alone, it gathers every operand onto every device
and runs the whole batch everywhere. ``batch_partitioned`` wraps the call in ``custom_partitioning`` with the one rule
an RNN kernel obeys: every per-example array splits along its batch axis, the weights are shared, and an output that
sums over the batch (cuDNN's weight gradient) is the ``psum`` of the shards' partial sums. When the batch is split
over mesh axes that divide it evenly, each device runs the kernel on its own rows, with no all-gather of activations;
otherwise (unsplit, or uneven) the call runs on the whole batch, replicated.

One array can be named to decide the split (``follow``), so that two calls that hand an opaque per-shard buffer to
each other (cuDNN's training forward and its backward, through the reserve space) split the batch the same way: the
forward follows the sharding that XLA gave its reserve-space output, the backward the sharding of that same array as
its operand. Whatever is decided, the followed array keeps its sharding, so XLA never reslices an opaque buffer
between the two.

A call can also be restricted to the local batch sizes it was planned for (``local_batches``: cuDNN's training
forward sizes its reserve rows for them); a split into another size runs the call whole.

On a single device (and inside ``jax.shard_map``, where shapes are already local) ``custom_partitioning`` inlines
the kernel call: nothing changes there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from jax_cudnn_rnn.sharding.placement import spec_axes

BATCH_FACTOR = "b"


def _split_axes(mesh, array: Any, axis: int) -> tuple[str, ...]:
    """The mesh axes that ``array``'s sharding splits dimension ``axis`` over, if they divide it evenly; else ()."""
    spec = getattr(getattr(array, "sharding", None), "spec", None)
    axes = () if spec is None else spec_axes(spec, axis)
    return () if array.shape[axis] % math.prod(mesh.shape[name] for name in axes) else axes


def _spec(ndim: int, axis: int | None, axes: tuple[str, ...]) -> PartitionSpec:
    """Replicated everywhere but ``axis``, which is split over ``axes`` (when there are any)."""
    entries = [None] * ndim
    if axis is not None and axes:
        entries[axis] = axes if len(axes) > 1 else axes[0]
    return PartitionSpec(*entries)


def _rule(
    in_ndims: Sequence[int], in_axes: Sequence[int | None], out_ndims: Sequence[int], out_axes: Sequence[int | None]
) -> tuple[str, tuple[str, ...]]:
    """Shardy's einsum-like rule: the batch dimensions share one factor, every other dimension has its own factor,
    which must stay replicated."""
    others: list[str] = []

    def dims(ndim: int, axis: int | None) -> str:
        names = []
        for d in range(ndim):
            if d == axis:
                names.append(BATCH_FACTOR)
            else:
                others.append(f"d{len(others)}")
                names.append(others[-1])
        return " ".join(names)

    operands = ", ".join(dims(n, a) for n, a in zip(in_ndims, in_axes, strict=True))
    results = ", ".join(dims(n, a) for n, a in zip(out_ndims, out_axes, strict=True))
    return f"{operands} -> {results}", tuple(others)


def batch_partitioned(
    fn: Callable[..., Sequence[jax.Array]],
    in_axes: Sequence[int | None],
    out_axes: Sequence[int | None],
    follow: tuple[str, int] | None = None,
    local_batches: Collection[int] | None = None,
) -> Callable[..., tuple[jax.Array, ...]]:
    """Wraps ``fn(*arrays) -> tuple of arrays`` so that XLA runs it per batch shard.

    Args:
      fn: the kernel call; traced again with each shard's (local) shapes.
      in_axes: for each argument, the index of its batch axis, or None for an array the whole batch shares (it is
        replicated on every device).
      out_axes: for each output, the index of its batch axis, or None for an output that sums over the batch: each
        shard's partial sum is added up across the batch's mesh axes (``lax.psum``) and the result is replicated.
      follow: ``("in", i)`` or ``("out", i)``: the argument or output whose batch sharding decides the split; by
        default the first argument with a batch axis.
      local_batches: the per-device batch sizes ``fn`` was planned for (cuDNN's training forward sizes its reserve
        rows for them); a split into any other size runs ``fn`` on the whole batch instead. None: any split.

    Returns the wrapped function (same arguments and outputs as ``fn``, as a tuple).
    """
    in_axes, out_axes = tuple(in_axes), tuple(out_axes)
    first = next(i for i, axis in enumerate(in_axes) if axis is not None)
    side, index = follow or ("in", first)
    follow_axis = (in_axes if side == "in" else out_axes)[index]

    def allowed(mesh, axes, batch):
        """``axes`` if splitting ``batch`` over them gives a planned local batch, else () (run whole)."""
        if not axes or local_batches is None:
            return axes
        return axes if batch // math.prod(mesh.shape[name] for name in axes) in local_batches else ()

    def shardings(mesh, axes, ndims, batch_axes):
        return tuple(NamedSharding(mesh, _spec(n, a, axes)) for n, a in zip(ndims, batch_axes, strict=True))

    def call(*args):
        out_shapes = jax.eval_shape(lambda *a: tuple(fn(*a)), *args)
        in_ndims = tuple(a.ndim for a in args)
        out_ndims = tuple(o.ndim for o in out_shapes)
        if len(in_ndims) != len(in_axes) or len(out_ndims) != len(out_axes):
            raise ValueError(
                f"batch_partitioned: {len(in_ndims)} arguments and {len(out_ndims)} outputs, but "
                f"in_axes has {len(in_axes)} and out_axes {len(out_axes)} entries"
            )

        def partition(mesh, arg_shapes, result_shapes):
            followed = (arg_shapes if side == "in" else result_shapes)[index]
            axes = allowed(mesh, _split_axes(mesh, followed, follow_axis), followed.shape[follow_axis])

            def lower(*local_args):
                outs = tuple(fn(*local_args))
                return tuple(
                    jax.lax.psum(out, axes) if axis is None and axes else out
                    for out, axis in zip(outs, out_axes, strict=True)
                )

            return (mesh, lower, shardings(mesh, axes, out_ndims, out_axes), shardings(mesh, axes, in_ndims, in_axes))

        def infer(mesh, arg_shapes, result_shapes):  # GSPMD only (jax_use_shardy_partitioner=False)
            # Results carry no sharding yet: split as the first batched argument is split.
            batched = arg_shapes[first]
            axes = allowed(mesh, _split_axes(mesh, batched, in_axes[first]), batched.shape[in_axes[first]])
            return shardings(mesh, axes, out_ndims, out_axes)

        rule, replicated = _rule(in_ndims, in_axes, out_ndims, out_axes)
        wrapped = custom_partitioning(lambda *a: tuple(fn(*a)))
        wrapped.def_partition(
            partition, infer_sharding_from_operands=infer, sharding_rule=rule, need_replication_factors=replicated
        )
        return tuple(wrapped(*args))

    return call
