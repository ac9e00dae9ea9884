"""Flax's recurrent cells (linen's and nnx's) as this library's networks of one layer and one direction: which cell runs
as which mode (``cell_network``), and a cell's parameters as the canonical named tensors, both ways (linen's parameter
tree, nnx's Variables).

A cell's parameters are the canonical tensors under Flax's names: a kernel [in, H] is the canonical matrix [H, in]
transposed, and each cell keeps the biases its ``Parameterization`` trains (jax_cudnn_rnn/_parameterization.py):
``nn.LSTMCell``'s recurrent ``hi``... biases, ``nn.GRUCell``'s ``ir``, ``iz``, ``in`` and ``hn``, ``SimpleCell``'s
input bias; nnx's ``OptimizedLSTMCell``, ``GRUCell`` and ``SimpleCell`` keep every gate side by side in one
``dense_i``/``dense_h`` layer (columns in canonical gate order).

Private: the linen and NNX modules built from a cell (``RNN(nn.LSTMCell(64))``) read their cell's parameters through it
on every call, and the Flax converters (jax_cudnn_rnn/interop/_flax.py) read and write trained trees with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from jax_cudnn_rnn._buffer import Pieces
from jax_cudnn_rnn.cells import activations

#: linen's names per gate: {mode: ({gate: input Dense}, {gate: recurrent Dense})}.
LINEN_NAMES = {
    "lstm": ({"i": "ii", "f": "if", "g": "ig", "o": "io"}, {"i": "hi", "f": "hf", "g": "hg", "o": "ho"}),
    "gru": ({"r": "ir", "z": "iz", "n": "in"}, {"r": "hr", "z": "hz", "n": "hn"}),
    "rnn_tanh": ({"h": "i"}, {"h": "h"}),
    "rnn_relu": ({"h": "i"}, {"h": "h"}),
}
#: ``nnx.LSTMCell``'s Linear layers per gate (``if_``: ``if`` is Python's); nnx's other cells stack their gates.
_NNX_LSTM_NAMES = ({"i": "ii", "f": "if_", "g": "ig", "o": "io"}, {"i": "hi", "f": "hf", "g": "hg", "o": "ho"})
_NNX_STACKED = ("dense_i", "dense_h")

#: The cells each library's modules run, by class name: their mode (a SimpleCell's follows its activation).
CELL_MODES = {"LSTMCell": "lstm", "OptimizedLSTMCell": "lstm", "GRUCell": "gru", "SimpleCell": "rnn_tanh"}
_SIMPLE_MODES = {"tanh": "rnn_tanh", "relu": "rnn_relu"}


@dataclasses.dataclass(frozen=True)
class CellNetwork:
    """What a Flax cell is as this library's network: ``library`` ("linen" or "nnx"), its class name ``kind``, its
    ``mode``, ``activation`` and ``recurrent_activation`` (RNNConfig's: None for the cell's own), hidden size
    ``num_units`` and, for nnx's cells, ``in_features`` (linen's cells take theirs from the input)."""

    library: str
    kind: str
    mode: str
    activation: Any
    recurrent_activation: Any
    num_units: int
    in_features: int | None

    @property
    def fields(self) -> dict[str, Any]:
        """RNNConfig's fields the cell sets besides its sizes."""
        return {"activation": self.activation, "recurrent_activation": self.recurrent_activation}


def _named(function: Any) -> Any:
    """An activation as RNNConfig takes it: its name where it is one of the named ones (Flax's ``nn.tanh`` is
    ``jnp.tanh``, ``nn.sigmoid`` ``jax.nn.sigmoid``), else the callable."""
    for name, known in activations.ACTIVATIONS.items():
        if known is function:
            return name
    return function


def cell_network(cell: Any, library: str, argument: str = "cell") -> CellNetwork:
    """``cell`` (one of Flax's ``LSTMCell``, ``OptimizedLSTMCell``, ``GRUCell`` or ``SimpleCell`` of ``library``,
    "linen" or "nnx") as a ``CellNetwork``. Any other cell, a subclass with a call of its own, or a ``SimpleCell`` with
    ``residual=True`` is a TypeError/ValueError that says to keep Flax's ``RNN`` for it."""
    import flax.linen as nn
    from flax import nnx

    module = nn if library == "linen" else nnx
    prefix = "nn" if library == "linen" else "nnx"
    kind = type(cell).__name__
    own = getattr(module, kind, None) if kind in CELL_MODES else None
    keep = (
        f"keep {prefix}.RNN for it (this library fuses the cells whose arithmetic it knows: {prefix}.LSTMCell, "
        f"OptimizedLSTMCell, GRUCell, SimpleCell with tanh or relu)"
    )
    if own is None or not isinstance(cell, own):
        raise TypeError(f"{argument} is a {kind}, which has no fused kernel here; {keep}")
    if type(cell).__call__ is not own.__call__:
        raise TypeError(f"{argument} is a {kind}, a subclass of {prefix}.{own.__name__} with a call of its own; {keep}")
    mode = CELL_MODES[kind]
    activation = _named(cell.activation_fn)
    recurrent_activation = None
    if kind == "SimpleCell":
        if getattr(cell, "residual", False):
            raise ValueError(f"{argument} is a SimpleCell with residual=True, which has no fused kernel; {keep}")
        mode = _SIMPLE_MODES.get(activation) if isinstance(activation, str) else None
        if mode is None:
            raise ValueError(
                f"{argument} is a SimpleCell with activation_fn {activations.activation_name(activation)}; the fused "
                f"vanilla RNNs are tanh and relu ({prefix}.tanh, {prefix}.relu): {keep}"
            )
        activation = None
    else:
        recurrent_activation = _named(cell.gate_fn)
    units = cell.features if library == "linen" else cell.hidden_features
    in_features = None if library == "linen" else cell.in_features
    return CellNetwork(library, kind, mode, activation, recurrent_activation, units, in_features)


def _split(name: str) -> tuple[str, str]:
    """(group, gate) of a one-layer, one-direction canonical name ``layer_0/forward/{group}/{gate}``."""
    parts = name.split("/")
    return parts[2], parts[3]


def linen_location(mode: str, name: str) -> tuple[str, str]:
    """(Dense layer, "kernel" or "bias") holding canonical tensor ``name`` in linen's cell of ``mode``."""
    group, gate = _split(name)
    inputs, recurrent = LINEN_NAMES[mode]
    dense = inputs[gate] if group in ("w_input", "b_input") else recurrent[gate]
    return dense, "kernel" if group.startswith("w_") else "bias"


def linen_expected(mode: str, shapes: Mapping[str, tuple[int, ...]]) -> dict[tuple[str, str], tuple[int, ...]]:
    """{(Dense layer, leaf): shape} of linen's cell of ``mode`` holding the canonical tensors of ``shapes``
    ({name: canonical shape}, one layer and direction)."""
    return {linen_location(mode, name): (shape[::-1] if len(shape) == 2 else shape) for name, shape in shapes.items()}


def check_linen_tree(tree: Any, network: CellNetwork, shapes: Mapping[str, tuple[int, ...]], where: str) -> None:
    """Raises a ValueError/TypeError naming the path (from ``where``, e.g. ``params['cell']``) unless ``tree`` holds
    exactly the parameters of linen's ``network.kind`` for the canonical tensors of ``shapes``, with their shapes."""
    expected = linen_expected(network.mode, shapes)
    described = f"{'nn' if network.library == 'linen' else 'nnx'}.{network.kind}({network.num_units})"
    if not isinstance(tree, Mapping):
        raise TypeError(f"{where} is a {type(tree).__name__}; expected the parameter tree of {described}")
    found = {}
    for dense, node in tree.items():
        if isinstance(node, Mapping):
            found.update({(dense, leaf): value for leaf, value in node.items()})
        else:
            found[(dense, None)] = node
    path = lambda key: f"{where}[{key[0]!r}]" + ("" if key[1] is None else f"[{key[1]!r}]")  # noqa: E731
    missing = [key for key in expected if key not in found]
    extra = [key for key in found if key not in expected]
    if missing or extra:
        raise ValueError(
            f"{where} does not hold the parameters of {described}: missing "
            f"{[path(k) for k in missing][:6]}, unexpected {[path(k) for k in extra][:6]} (expected "
            f"{sorted({d for d, _ in expected})} with their kernels and {network.kind}'s biases)"
        )
    for key, want in expected.items():
        shape = getattr(found[key], "shape", None)
        if shape is None:
            raise TypeError(f"{path(key)} must be an array, got {type(found[key]).__name__}")
        if tuple(shape) != want:
            axes = "(num_units,)" if len(want) == 1 else "(inputs, num_units)"
            raise ValueError(f"{path(key)} has shape {tuple(shape)}; expected {want} = {axes} of {described}")


def from_linen(tree: Mapping[str, Any], mode: str, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """{canonical name: array} of a linen cell's parameter tree (checked by the caller: ``linen_expected``), kernels
    transposed; traceable."""
    out = {}
    for name in shapes:
        dense, leaf = linen_location(mode, name)
        value = tree[dense][leaf]
        out[name] = jnp.transpose(value) if leaf == "kernel" else value
    return out


def linen_pieces(tree: Mapping[str, Any], parameters: Any) -> Pieces:
    """A linen cell's parameter tree (checked by the caller) as the ``Pieces`` of ``parameters`` (its
    ``Parameterization``), each array as the cell keeps it, the kernels marked transposed ([in, H]: no copy of them on
    the way to a kernel that reads them so), in the config's dtype."""
    config = parameters.config
    arrays, transposed = [], []
    for slot in parameters.slots:
        dense, leaf = linen_location(config.mode, slot.name(config))
        arrays.append(jnp.asarray(tree[dense][leaf], config.dtype))
        transposed.append(leaf == "kernel")
    return Pieces(arrays, parameters.slots, config, transposed)


def to_linen(named: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """A linen cell's parameter tree of {canonical name: array} (one layer and direction; the inverse of
    ``from_linen``)."""
    tree: dict[str, Any] = {}
    for name, value in named.items():
        dense, leaf = linen_location(mode, name)
        tree.setdefault(dense, {})[leaf] = value.T if leaf == "kernel" else value
    return tree


def _nnx_location(cell: Any, name: str) -> tuple[str, str, bool]:
    """(Linear layer, "kernel" or "bias", whether the layer stacks every gate) holding canonical tensor ``name`` in an
    nnx cell."""
    group, gate = _split(name)
    side = 0 if group in ("w_input", "b_input") else 1
    stacked = type(cell).__name__ != "LSTMCell"
    layer = _NNX_STACKED[side] if stacked else _NNX_LSTM_NAMES[side][gate]
    return layer, "kernel" if group.startswith("w_") else "bias", stacked


def nnx_pieces(cell: Any, parameters: Any, argument: str) -> Pieces:
    """An nnx cell's Variables as they are now (shared: each call reads them; traceable) as the ``Pieces`` of
    ``parameters`` (its ``Parameterization``): the kernels as the cell keeps them, [in, H], marked transposed (a
    stacked layer's columns of one gate each, marked stacked), in the config's dtype. A missing or misshapen tensor,
    or a bias the cell has and ``parameters`` does not train, is a ValueError naming ``argument``'s attribute."""
    config = parameters.config
    arrays, transposed, stacked_columns, read = [], [], [], set()
    gates, parts = len(config.gate_names), {}
    for slot in parameters.slots:
        name, shape = slot.name(config), slot.shape
        layer, leaf, stacked = _nnx_location(cell, name)
        read.add((layer, leaf))
        param = getattr(getattr(cell, layer, None), leaf, None)
        if param is None:
            raise ValueError(f"{argument}.{layer}.{leaf} is missing; the module trains {name} {shape}")
        value = jnp.asarray(param[...], config.dtype)
        if stacked and value.shape[-1] == gates * shape[0]:
            # one split, whose transpose is one concatenation of the gates' gradients, which XLA folds into the
            # product's gradient where a product reads the gates at once (slices' transposes: a pad and an add each)
            if (layer, leaf) not in parts:
                parts[layer, leaf] = jnp.split(value, gates, axis=-1)
            value = parts[layer, leaf][config.gate_names.index(_split(name)[1])]
        want = shape[::-1] if leaf == "kernel" else shape
        if tuple(value.shape) != want:
            raise ValueError(f"{argument}.{layer}.{leaf} holds {name} of shape {tuple(value.shape)}; expected {want}")
        arrays.append(value)
        transposed.append(leaf == "kernel")
        stacked_columns.append(stacked and leaf == "kernel")
    if type(cell).__name__ == "LSTMCell":  # a Linear layer per gate; the others stack their gates' columns
        layers = {*_NNX_LSTM_NAMES[0].values(), *_NNX_LSTM_NAMES[1].values()}
    else:
        layers = set(_NNX_STACKED)
    extra = sorted(
        f"{argument}.{layer}.bias"
        for layer in layers
        if getattr(getattr(cell, layer, None), "bias", None) is not None and (layer, "bias") not in read
    )
    if extra:
        raise ValueError(
            f"{', '.join(extra)} {'is a bias' if len(extra) == 1 else 'are biases'} the module does not train "
            f"(bias_mode {config.bias_mode!r}); build it from the cell with the bias it has"
        )
    return Pieces(arrays, parameters.slots, config, transposed, stacked_columns)
