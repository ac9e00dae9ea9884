"""The opaque parameter buffer: the one module that knows where every matrix and bias lives in it.

The buffer is a 1-D array of ``params_size(config)`` elements of ``config.dtype``, byte-identical to cuDNN's weight
space (CUDNN_RNN_ALGO_STANDARD, CUDNN_RNN_DOUBLE_BIAS). The layout below is computed from the config alone:

* all matrices of all pseudo-layers first, pseudo-layer = layer * D + direction, inside one pseudo-layer the G input
  matrices W_0..W_{G-1} (each row-major [H, in_l]) then the G recurrent matrices R_0..R_{G-1} ([H, H]);
* then all biases of all pseudo-layers in the same order: b_W0..b_W{G-1}, b_R0..b_R{G-1}, each [H];
* with skip input, layer 0's input matrices have no storage (cuDNN reports a NULL address for them);
* a projected LSTM (proj_size P) has its projection matrix [P, H] (linLayerID 8) after the recurrent matrices of each
  pseudo-layer, recurrent matrices [H, P], and no projection bias; absent biases (bias_mode) have no storage.
  Where projection and single/no-bias modes put their bytes is the least certain part of this layout: the GPU layout
  test covers them.

This is what jax.experimental.rnn, MXNet and Knet.jl use. On a GPU, ``tests/cudnn/test_cudnn_layout.py`` compares every
offset and the total with ``cudnnGetRNNWeightParams`` / ``cudnnGetRNNWeightSpaceSize``; if cuDNN disagrees, this module
is the only one to change (``_slot_offsets`` and ``params_size``): every other module goes through ``param_slots``.

The canonical format (docs/architecture.md) is two flat lists: weights (per layer, per direction: W_0..W_{G-1},
R_0..R_{G-1}) and biases (same order), with skip input's absent matrices left out. The named view ``params_to_tree``
nests the same arrays as ``layer_{l}/{forward|backward}/{w_input|w_recurrent|b_input|b_recurrent}/{gate}``, and a
projected LSTM's projection as ``layer_{l}/{direction}/w_projection``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn.config import RNNConfig, canonical_dtype, check_config

# The documented names; layer_slots, assemble and _check_buffer serve the package's own modules
# (jax_cudnn_rnn/_buffer.py has the implementations' views of the buffer: unpacking, one layer as a network of its own).
__all__ = [
    "DIRECTION_NAMES",
    "GROUP_NAMES",
    "ParamSlot",
    "check_canonical",
    "flatten_tree",
    "param_slots",
    "tree_to_canonical",
    "unflatten_tree",
]

#: The directions' names in the named tree (``params_to_tree``), by direction index.
DIRECTION_NAMES = ("forward", "backward")
#: Names of the groups of one pseudo-layer in the named tree, in canonical order.
GROUP_NAMES = ("w_input", "w_recurrent", "w_projection", "b_input", "b_recurrent")


@dataclasses.dataclass(frozen=True)
class ParamSlot:
    """One matrix or bias of the network and where it lives in the opaque buffer.

    ``offset`` is in elements of ``config.dtype``; ``shape`` is (H, in) for a matrix and (H,) for a bias.
    """

    layer: int
    direction: int
    group: str  # one of GROUP_NAMES
    gate: int  # index into config.gate_names; 0 for the projection
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        """Elements of the tensor (the product of ``shape``)."""
        return math.prod(self.shape)

    @property
    def is_bias(self) -> bool:
        """Whether the tensor is a bias (group ``b_input`` or ``b_recurrent``), not a matrix."""
        return self.group.startswith("b_")

    def name(self, config: RNNConfig) -> str:
        """A readable path such as ``layer_1/backward/w_recurrent/f``, used in error messages and the named tree."""
        path = f"layer_{self.layer}/{DIRECTION_NAMES[self.direction]}/{self.group}"
        return path if self.group == "w_projection" else f"{path}/{config.gate_names[self.gate]}"


def _canonical_slots(config: RNNConfig) -> tuple[list[ParamSlot], list[ParamSlot]]:
    """(matrix slots, bias slots) in canonical order, with offsets still unset (-1)."""
    weights, biases = [], []
    units, hidden = config.num_units, config.hidden_size
    gates = range(config.num_gates)
    for layer in range(config.num_layers):
        in_size = config.layer_input_size(layer)
        for direction in range(config.num_directions):
            slot = functools.partial(ParamSlot, layer, direction, offset=-1)
            if not (config.skip_input and layer == 0):  # cuDNN stores no layer-0 input matrices with skip input
                weights += [slot("w_input", gate, shape=(units, in_size)) for gate in gates]
            weights += [slot("w_recurrent", gate, shape=(units, hidden)) for gate in gates]
            if config.proj_size:
                weights.append(slot("w_projection", 0, shape=(config.proj_size, units)))
            if config.has_input_bias:
                biases += [slot("b_input", gate, shape=(units,)) for gate in gates]
            if config.has_recurrent_bias:
                biases += [slot("b_recurrent", gate, shape=(units,)) for gate in gates]
    return weights, biases


def _layout(config: RNNConfig) -> tuple[tuple[ParamSlot, ...], tuple[ParamSlot, ...], int]:
    return _placed_slots(check_config(config))


@functools.cache
def _placed_slots(config: RNNConfig) -> tuple[tuple[ParamSlot, ...], tuple[ParamSlot, ...], int]:
    weights, biases = _canonical_slots(config)
    # cuDNN's weight space: every matrix (canonical order is pseudo-layer order), then every bias.
    offset = 0
    placed = []
    for slot in weights + biases:
        placed.append(dataclasses.replace(slot, offset=offset))
        offset += slot.size
    return tuple(placed[: len(weights)]), tuple(placed[len(weights) :]), offset


def params_size(config: RNNConfig) -> int:
    """Number of elements of ``config.dtype`` in the opaque parameter buffer."""
    return _layout(config)[2]


def param_slots(config: RNNConfig) -> tuple[tuple[ParamSlot, ...], tuple[ParamSlot, ...]]:
    """(weight slots, bias slots) in canonical order, each with its offset in the opaque buffer."""
    weights, biases, _ = _layout(config)
    return weights, biases


def layer_slots(config: RNNConfig, layer: int, direction: int) -> dict[str, list[ParamSlot]]:
    """The slots of one pseudo-layer grouped as w_input (empty with skip input on layer 0), w_recurrent, w_projection,
    b_input, b_recurrent (each empty when absent), each list in gate order."""
    groups: dict[str, list[ParamSlot]] = {name: [] for name in GROUP_NAMES}
    for slot in (*_layout(config)[0], *_layout(config)[1]):
        if slot.layer == layer and slot.direction == direction:
            groups[slot.group].append(slot)
    return groups


def _check_buffer(params: Any, config: RNNConfig, argument: str = "params") -> jax.Array:
    size = params_size(config)
    shape = getattr(params, "shape", None)
    if shape is None:
        raise TypeError(f"{argument} must be an array, got {type(params).__name__}")
    if tuple(shape) != (size,):
        raise ValueError(f"{argument} has shape {tuple(shape)}; expected ({size},) = params_size(config) for {config}")
    if np.dtype(params.dtype) != config.dtype:
        raise TypeError(
            f"{argument} has dtype {np.dtype(params.dtype).name}; expected {config.dtype.name} (config.dtype)"
        )
    return params


def assemble(pieces: Sequence[tuple[ParamSlot, jax.Array]], config: RNNConfig) -> jax.Array:
    """Builds an opaque buffer from (slot, array) pairs that together cover every slot; gaps (if cuDNN ever pads) are
    zero. Arrays may be a group's gates stacked along rows: pass the group's first slot."""
    pieces = sorted(pieces, key=lambda p: p[0].offset)
    parts, cursor = [], 0
    for slot, array in pieces:
        if slot.offset > cursor:
            parts.append(jnp.zeros((slot.offset - cursor,), config.dtype))
        flat = jnp.ravel(array).astype(config.dtype)
        parts.append(flat)
        cursor = slot.offset + flat.shape[0]
    total = params_size(config)
    if cursor != total:
        if cursor > total:
            raise ValueError(f"pieces cover {cursor} elements; params_size is {total}")
        parts.append(jnp.zeros((total - cursor,), config.dtype))
    return jnp.concatenate(parts)


def _buffer_and_config(params: Any, config: RNNConfig | None) -> tuple[Any, RNNConfig]:
    """(the buffer, its config) from a buffer with its config, or from an ``RNNParams`` alone, which carries its own
    (a config given with one must be that one)."""
    carried = getattr(params, "config", None)
    if isinstance(carried, RNNConfig) and hasattr(params, "buffer"):
        if config is not None and config != carried:
            raise ValueError(f"config {config} differs from params.config {carried}; pass one of them")
        return params.buffer, carried
    if config is None:
        raise TypeError("config is None; pass an RNNConfig, or params as an RNNParams that carries one")
    return params, config


def params_to_canonical(params: Any, config: RNNConfig | None = None) -> tuple[list[jax.Array], list[jax.Array]]:
    """Splits an opaque buffer (with its ``config``), or an ``RNNParams`` alone, into canonical (weights, biases)
    lists (order in the module docstring)."""
    params, config = _buffer_and_config(params, config)
    params = _check_buffer(params, config)
    weights, biases = param_slots(config)
    take = lambda s: jax.lax.slice(params, (s.offset,), (s.offset + s.size,)).reshape(s.shape)  # noqa: E731
    return [take(s) for s in weights], [take(s) for s in biases]


def _check_tensor(
    name: str, tensor: Any, slot: ParamSlot, config: RNNConfig, label: str, check_dtype: bool = True
) -> None:
    shape = getattr(tensor, "shape", None)
    if shape is None or not hasattr(tensor, "dtype"):
        raise TypeError(f"{name} ({label}) must be an array, got {type(tensor).__name__}")
    if tuple(shape) != slot.shape:
        raise ValueError(f"{name} ({label}) has shape {tuple(shape)}; expected {slot.shape}")
    dtype = np.dtype(tensor.dtype)
    if check_dtype and dtype != config.dtype:
        raise TypeError(f"{name} ({label}) has dtype {dtype.name}; expected {config.dtype.name} (config.dtype)")


def check_canonical(
    weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig, *, check_dtype: bool = True
) -> list[tuple[ParamSlot, Any]]:
    """Checks canonical (weights, biases) lists against ``config`` and pairs every tensor with its slot.

    Raises ValueError/TypeError naming the first tensor whose count, shape or (with ``check_dtype``) dtype is wrong.
    """
    weight_slots, bias_slots = param_slots(config)
    for argument, given, slots in (("weights", weights, weight_slots), ("biases", biases, bias_slots)):
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise TypeError(f"{argument} must be a list of arrays, got {type(given).__name__}")
        if len(given) != len(slots):
            raise ValueError(f"{argument} has {len(given)} tensors; expected {len(slots)} for {config}")
        for i, (tensor, slot) in enumerate(zip(given, slots, strict=True)):
            _check_tensor(f"{argument}[{i}]", tensor, slot, config, slot.name(config), check_dtype)
    return list(zip(weight_slots + bias_slots, list(weights) + list(biases), strict=True))


def canonical_to_params(weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig) -> jax.Array:
    """Packs canonical (weights, biases) lists into an opaque buffer; the inverse of ``params_to_canonical``.

    Raises ValueError/TypeError naming the first tensor whose count, shape or dtype is wrong.
    """
    return assemble([(slot, jnp.asarray(t)) for slot, t in check_canonical(weights, biases, config)], config)


def flatten_tree(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as {"a/b/c": leaf}: the path spelling of ``ParamSlot.name``."""
    if not isinstance(tree, Mapping):
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, child in tree.items():
        flat.update(flatten_tree(child, f"{prefix}/{key}" if prefix else str(key)))
    return flat


def unflatten_tree(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of ``flatten_tree``."""
    tree: dict[str, Any] = {}
    for path, value in flat.items():
        *parents, leaf = path.split("/")
        node = tree
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return tree


def params_to_tree(params: Any, config: RNNConfig | None = None) -> dict[str, Any]:
    """The canonical named view of a buffer (with its ``config``) or of an ``RNNParams`` alone:
    ``tree['layer_0']['forward']['w_input']['i']`` is W_i of layer 0, shape [H, I].

    Skip input's absent matrices are absent (layer 0 has no ``w_input``).
    """
    params, config = _buffer_and_config(params, config)
    weights, biases = params_to_canonical(params, config)
    slots = param_slots(config)[0] + param_slots(config)[1]
    return unflatten_tree({slot.name(config): array for slot, array in zip(slots, weights + biases, strict=True)})


def tree_to_canonical(tree: Any, config: RNNConfig, *, check_dtype: bool = True) -> tuple[list[Any], list[Any]]:
    """The canonical (weights, biases) lists held by a named tree (``params_to_tree``'s form), as given (no copy).

    Errors name the path that is missing, extra or of the wrong shape (or dtype, with ``check_dtype``).
    """
    weight_slots, bias_slots = param_slots(config)
    expected = {slot.name(config): slot for slot in weight_slots + bias_slots}
    if not isinstance(tree, Mapping):
        raise TypeError(f"tree must be a nested dict, got {type(tree).__name__}")
    found = flatten_tree(tree)
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    if missing or extra:
        raise ValueError(
            f"tree does not match {config}: missing {missing[:4]}{'...' if len(missing) > 4 else ''}, "
            f"unexpected {extra[:4]}{'...' if len(extra) > 4 else ''}"
        )
    for name, slot in expected.items():
        _check_tensor(f"tree['{name}']", found[name], slot, config, "canonical tensor", check_dtype)
    return ([found[slot.name(config)] for slot in weight_slots], [found[slot.name(config)] for slot in bias_slots])


def tree_to_params(tree: Any, config: RNNConfig) -> jax.Array:
    """The inverse of ``params_to_tree``; errors name the path that is missing, extra or of the wrong shape/dtype."""
    weights, biases = tree_to_canonical(tree, config)
    return canonical_to_params(weights, biases, config)


def init_params(key: jax.Array, config: RNNConfig, *, scale: float | None = None) -> jax.Array:
    """A fresh opaque buffer with every weight and bias drawn from U(-k, k), k = 1/sqrt(hidden_size) by default
    (PyTorch's initialisation of nn.LSTM/GRU/RNN, which uses the projected size when projecting); ``scale``
    overrides k."""
    dtype = canonical_dtype(check_config(config).dtype)
    if dtype == np.float64 and not jax.config.jax_enable_x64:
        raise TypeError(
            "config.dtype is float64 but jax_enable_x64 is off; enable it with "
            "jax.config.update('jax_enable_x64', True)"
        )
    bound = 1.0 / math.sqrt(config.hidden_size) if scale is None else float(scale)
    values = jax.random.uniform(
        key, (params_size(config),), jnp.float32 if dtype.itemsize < 4 else dtype, -bound, bound
    )
    return values.astype(dtype)
