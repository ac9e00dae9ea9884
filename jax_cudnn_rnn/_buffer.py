"""The opaque buffer's arrays as the implementations take them, from the slots jax_cudnn_rnn/layout.py places:
every tensor of the network at once (``unpack``, one split whose gradient is one concatenation), one layer or
direction as a network of its own (``sub_config``, ``sub_params``), and the buffer as separate tensors (``Pieces``:
a frontend's named parameters, which an implementation that reads the tensors itself takes as they are).

Private: the implementations, the fused kit and the frontends' parameterizations use them; users see the canonical
format (``layout.params_to_canonical``, ``params_to_tree``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.layout import GROUP_NAMES, ParamSlot, assemble, layer_slots, params_size


@jax.tree_util.register_pytree_node_class
class Pieces:
    """The opaque buffer of ``config`` as separate arrays: ``arrays[i]`` is the tensor at ``slots[i]`` (any shape of
    the slot's size), and what no slot holds is zero (a frontend's biases held at zero, which get no gradient).
    ``transposed[i]``: ``arrays[i]`` holds a matrix slot's tensor transposed, [in, H] (a Flax cell's kernel, as the
    cell keeps it); ``canonical()`` turns those into the slot's [H, in]. ``stacked[i]``: ``arrays[i]`` is a block of
    columns sliced from one array that holds its group's gates side by side, transposed, in the order the pieces hold
    them (an nnx cell's ``dense_i``/``dense_h`` kernel [in, G*H], gate order; a Keras GRU's kernel, z before r): a
    product of all of the group's gates at once reads that array whole (XLA folds the concatenation of its slices back
    into it), where one per gate would copy each slice.

    A frontend's named parameters travel to the implementation like this rather than packed: oneDNN's kernels read
    the tensors and write their gradients in place (the registry's ``Backend.takes_pieces``), so that no copy
    concatenates them into a buffer before the call and none slices the buffer's gradient after it, and the xla
    implementation's one-step call reads each where it lies, a transposed one too (``Backend.takes_transposed``: XLA's
    CPU matrix-vector product copies a transposed operand instead of reading it transposed); every other
    implementation gets ``buffer()``. A pytree whose leaves are the arrays."""

    def __init__(
        self,
        arrays: Sequence[Any],
        slots: Sequence[ParamSlot],
        config: RNNConfig,
        transposed: Sequence[bool] | None = None,
        stacked: Sequence[bool] | None = None,
    ):
        self.arrays, self.slots, self.config = tuple(arrays), tuple(slots), config
        self.transposed = (False,) * len(self.arrays) if transposed is None else tuple(transposed)
        self.stacked = (False,) * len(self.arrays) if stacked is None else tuple(stacked)

    def tree_flatten(self):
        return self.arrays, (self.slots, self.config, self.transposed, self.stacked)

    @classmethod
    def tree_unflatten(cls, aux, arrays):
        return cls(arrays, *aux)

    def canonical(self) -> Pieces:
        """The same pieces, every array in its slot's own orientation."""
        if not any(self.transposed):
            return self
        arrays = [jnp.transpose(a) if t else a for a, t in zip(self.arrays, self.transposed, strict=True)]
        return Pieces(arrays, self.slots, self.config)

    def buffer(self) -> jax.Array:
        """The opaque buffer: one concatenation, zeros where no slot holds anything."""
        pieces = self.canonical()
        return assemble(list(zip(pieces.slots, pieces.arrays, strict=True)), self.config)

    def astype(self, dtype: Any) -> Pieces:
        """Every array cast to ``dtype``, the config's dtype with them."""
        config = dataclasses.replace(self.config, dtype=jnp.dtype(dtype).name)
        return Pieces([jnp.asarray(a, dtype) for a in self.arrays], self.slots, config, self.transposed, self.stacked)


def as_buffer(params: Any) -> Any:
    """The opaque buffer of ``params``: ``Pieces`` packed, an array as it is."""
    return params.buffer() if isinstance(params, Pieces) else params


@functools.cache
def _unpack_plan(config: RNNConfig) -> tuple[tuple[int, ...], tuple[tuple[Any, ...], ...]]:
    """(the sizes ``unpack`` splits the buffer into, gaps included; per pseudo-layer, per group of GROUP_NAMES: None
    when absent, else (the indices of its pieces in gate order, its stacked shape))."""
    layers = itertools.product(range(config.num_layers), range(config.num_directions))
    pseudo_layers = [layer_slots(config, layer, direction) for layer, direction in layers]
    runs = []  # (offset, size, pseudo-layer, group, position in the group): a group, or its slots where not adjacent
    for pseudo, groups in enumerate(pseudo_layers):
        for name, slots in groups.items():
            adjacent = all(a.offset + a.size == b.offset for a, b in itertools.pairwise(slots))
            for position, run in enumerate([slots] if adjacent else [[slot] for slot in slots]):
                if run:
                    runs.append((run[0].offset, sum(slot.size for slot in run), pseudo, name, position))
    sizes: list[int] = []
    pieces: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for offset, size, pseudo, name, position in sorted(runs):
        if offset > sum(sizes):
            sizes.append(offset - sum(sizes))
        pieces.setdefault((pseudo, name), []).append((position, len(sizes)))
        sizes.append(size)
    if sum(sizes) < params_size(config):
        sizes.append(params_size(config) - sum(sizes))
    stacked = lambda slots: (sum(slot.shape[0] for slot in slots), *slots[0].shape[1:])  # noqa: E731
    plan = tuple(
        tuple(
            (tuple(index for _, index in sorted(pieces[pseudo, name])), stacked(slots)) if slots else None
            for name, slots in groups.items()
        )
        for pseudo, groups in enumerate(pseudo_layers)
    )
    return tuple(sizes), plan


def unpack(params: jax.Array, config: RNNConfig) -> tuple[tuple[jax.Array | None, ...], ...]:
    """Every pseudo-layer's tensors, indexed by layer * D + direction: (w_input, w_recurrent, w_projection, b_input,
    b_recurrent), each group's gates stacked along rows as the buffer holds them, None where absent.

    One ``lax.split`` of the whole buffer (gaps included), so that the gradient is one concatenation of the groups'
    gradients in buffer order, zeros where a part is absent or unused; slicing each group instead transposes to a pad
    and an add per group, which XLA copied into every consumer of the buffer's gradient (the slices of the NNX
    modules' per-call packing: 1048 adds against 88 for a 2-layer bidirectional LSTM, a 1.3-1.5x slower training step
    on the CPU). The concatenation is split's own transpose, not a custom_vjp, so forward mode (the reference
    implementation's ``jax.jvp``) keeps working.
    """
    sizes, plan = _unpack_plan(config)
    pieces = jax.lax.split(params, sizes)

    def group(indices: tuple[int, ...], shape: tuple[int, ...]) -> jax.Array:
        flat = pieces[indices[0]] if len(indices) == 1 else jnp.concatenate([pieces[i] for i in indices])
        return flat.reshape(shape)

    return tuple(tuple(None if entry is None else group(*entry) for entry in groups) for groups in plan)


def group_offsets(config: RNNConfig) -> tuple[tuple[int | None, ...], ...]:
    """Per pseudo-layer, indexed as ``unpack``'s, the offset (elements) of each of its groups in the buffer where the
    group lies there as one run, as ``unpack`` stacks it (its gates adjacent); None where absent or not one run."""
    sizes, plan = _unpack_plan(config)
    starts = list(itertools.accumulate(sizes, initial=0))
    return tuple(
        tuple(None if entry is None or len(entry[0]) != 1 else starts[entry[0][0]] for entry in groups)
        for groups in plan
    )


class Group(NamedTuple):
    """One group of a pseudo-layer's tensors (its input matrices, recurrent matrices, projection, input or recurrent
    biases) as ``unpack_gates`` gives it: ``gates``, each gate's tensor apart ([H, in], or [in, H] where
    ``transposed``; [H]; None for a held bias: zero); ``stacked``: every gate is a block of columns of one array
    (``stacked`` of ``Pieces``), ``order`` the gates in the order their blocks lie there."""

    gates: tuple[jax.Array | None, ...]
    transposed: tuple[bool, ...]
    stacked: bool = False
    order: tuple[int, ...] = ()


def unpack_gates(pieces: Pieces) -> tuple[tuple[Group | None, ...], ...]:
    """Per pseudo-layer, indexed as ``unpack``'s, (w_input, w_recurrent, w_projection, b_input, b_recurrent), each a
    ``Group`` (None where absent) of the ``pieces``' own arrays as they lie, each gate apart: a call of one step
    (jax_cudnn_rnn/backends/xla.py's) reads each where it is, with no copy of it."""
    config = pieces.config
    found = {
        slot.offset: (*entry, position)
        for position, (slot, *entry) in enumerate(
            zip(pieces.slots, pieces.arrays, pieces.transposed, pieces.stacked, strict=True)
        )
    }

    def group(slots: list[ParamSlot]) -> Group | None:
        if not slots:
            return None
        arrays, transposed, stacked, positions = zip(
            *(found.get(slot.offset, (None, False, False, 0)) for slot in slots), strict=True
        )
        shape = slots[0].shape
        gates = tuple(
            None if a is None else jnp.reshape(a, shape[::-1] if t else shape)
            for a, t in zip(arrays, transposed, strict=True)
        )
        if not all(stacked):
            return Group(gates, transposed)
        return Group(gates, transposed, True, tuple(sorted(range(len(slots)), key=positions.__getitem__)))

    return tuple(
        tuple(group(layer_slots(config, layer, direction)[name]) for name in GROUP_NAMES)
        for layer, direction in itertools.product(range(config.num_layers), range(config.num_directions))
    )


def sub_config(config: RNNConfig, layer: int, direction: int | None = None) -> RNNConfig:
    """Layer ``layer`` of ``config`` as a one-layer network: both its directions, or with ``direction`` (0 forward,
    1 backward) that direction alone as a unidirectional network. Skip input only ever applies to layer 0; no dropout
    (there is no next layer)."""
    return dataclasses.replace(
        config,
        num_layers=1,
        input_size=config.layer_input_size(layer),
        dropout=0.0,
        input_mode=config.input_mode if layer == 0 else "linear_input",
        direction=config.direction if direction is None else "unidirectional",
    )


def sub_params(params: Any, config: RNNConfig, layer: int, direction: int | None = None) -> Any:
    """The params of ``sub_config(config, layer, direction)``: those weights and biases of ``params``, sliced from a
    buffer (differentiable: gradients flow back to the full buffer), or those of its ``Pieces``."""
    single = sub_config(config, layer, direction)
    sources = range(config.num_directions) if direction is None else (direction,)
    moved = {}  # full network's slot offset -> the slot in the single network
    for target, source in enumerate(sources):
        full_groups = layer_slots(config, layer, source)
        single_groups = layer_slots(single, 0, target)
        for group in GROUP_NAMES:
            for full, part in zip(full_groups[group], single_groups[group], strict=True):
                moved[full.offset] = (full, part)
    if isinstance(params, Pieces):
        kept = [
            (moved[slot.offset][1], a, t, s)
            for slot, a, t, s in zip(params.slots, params.arrays, params.transposed, params.stacked, strict=True)
            if slot.offset in moved
        ]
        slots, arrays, transposed, stacked = (list(column) for column in zip(*kept, strict=True)) if kept else ([],) * 4
        return Pieces(arrays, slots, single, transposed, stacked)
    pieces = [
        (part, jax.lax.slice(params, (full.offset,), (full.offset + full.size,))) for full, part in moved.values()
    ]
    return assemble(pieces, single)
