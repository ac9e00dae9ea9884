"""Where trained Flax models keep recurrent parameters, read as cells per layer and direction: ``nn.RNN``'s tree
(``{"cell": ...}``), a bare cell's (as ``@nn.compact`` stores a cell built in its parent, ``GRUCell_0/...``),
``nn.Bidirectional``'s (``{"forward_rnn": ..., "backward_rnn": ...}``), a stack of those (a mapping whose keys end in
the layer's index, ``layer_0``, ``RNN_1``..., as ``flax_cells.FlaxCellStack`` and ``@nn.compact`` name them, or a
list; for a bidirectional network, 2L cells of one direction in the order forward, backward: ``paired``), at a
``path`` inside a whole model's parameters. Every error names the path as the caller would index it
(``params['encoder']['RNN_1']['cell']['hi']['bias']``) and says what was expected.

Private: the linen modules' ``params_from_flax``/``params_to_flax`` and ``flax_to_canonical`` use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from jax_cudnn_rnn import _cell_params

#: The mode whose cell's parameter names a tree's keys are.
_MODE_OF_NAMES = {
    frozenset(inputs.values()) | frozenset(recurrent.values()): mode
    for mode, (inputs, recurrent) in _cell_params.LINEN_NAMES.items()
    if mode != "rnn_relu"
}
_CELL_KINDS = {"lstm": "nn.LSTMCell", "gru": "nn.GRUCell", "rnn_tanh": "nn.SimpleCell"}
_DIRECTIONS = ("forward_rnn", "backward_rnn")


def _index(path: str, key: Any) -> str:
    return f"{path}[{key!r}]"


def cell_mode(tree: Any) -> str | None:
    """The mode ("lstm", "gru", "rnn_tanh") whose linen cell's parameters ``tree`` holds (its keys are exactly that
    cell's Dense layers), or None."""
    if not isinstance(tree, Mapping) or not tree:
        return None
    return _MODE_OF_NAMES.get(frozenset(tree))


def follow(params: Any, path: Any, name: str = "params") -> tuple[Any, str]:
    """(the subtree at ``path``, how it is indexed from ``name``): ``path`` a string "a/b/c" or a sequence of keys;
    ``params`` may be a whole ``variables`` dict ({"params": ...})."""
    if isinstance(params, Mapping) and set(params) == {"params"}:
        params = params["params"]
    where = name
    if path is None:
        return params, where
    keys = path.split("/") if isinstance(path, str) else list(path)
    for key in keys:
        if not isinstance(params, Mapping) or key not in params:
            has = sorted(params) if isinstance(params, Mapping) else type(params).__name__
            raise ValueError(f"{where} has no {key!r} (path {path!r}); it has {has}")
        params, where = params[key], _index(where, key)
    return params, where


def _layer(tree: Any, where: str) -> list[tuple[Any, str]] | None:
    """[(cell tree, its path)] per direction of one layer's tree (a cell's, nn.RNN's or nn.Bidirectional's), or None
    when ``tree`` is none of those."""
    if cell_mode(tree) is not None:
        return [(tree, where)]
    if isinstance(tree, Mapping) and set(tree) == {"cell"}:
        return [(tree["cell"], _index(where, "cell"))]
    if isinstance(tree, Mapping) and set(tree) == set(_DIRECTIONS):
        found = []
        for direction in _DIRECTIONS:
            one = _layer(tree[direction], _index(where, direction))
            if one is None or len(one) != 1:
                raise ValueError(
                    f"{_index(where, direction)} is not one direction's parameters; expected nn.RNN's "
                    "({'cell': ...}) or a cell's"
                )
            found += one
        return found
    return None


def _trailing_index(key: Any) -> int | None:
    match = re.search(r"(\d+)$", str(key))
    return None if match is None else int(match.group(1))


def cells(tree: Any, where: str) -> list[list[tuple[Any, str]]]:
    """The cells' trees with their paths, ``[layer][direction]``, of a layer's tree or a stack's (see the module
    docstring)."""
    one = _layer(tree, where)
    if one is not None:
        return [one]
    if isinstance(tree, Sequence) and not isinstance(tree, (str, bytes)):
        entries = [(i, _index(where, i), layer) for i, layer in enumerate(tree)]
    elif isinstance(tree, Mapping) and tree:
        order = {key: _trailing_index(key) for key in tree}
        if None in order.values() or len(set(order.values())) != len(order):
            raise ValueError(
                f"{where} holds {sorted(map(str, tree))[:6]}: not a cell's parameters ({_expected()}), nor layers "
                "whose names end in their index (layer_0, RNN_1, ...); pass path= to the recurrent layer, or a list "
                "of the layers in order"
            )
        entries = sorted(((order[key], _index(where, key), tree[key]) for key in tree), key=lambda e: e[0])
    else:
        raise ValueError(f"{where} is a {type(tree).__name__}; expected {_expected()}")
    layers = []
    for _, path, layer in entries:
        found = _layer(layer, path)
        if found is None:
            keys = sorted(map(str, layer))[:6] if isinstance(layer, Mapping) else type(layer).__name__
            raise ValueError(f"{path} holds {keys}; expected one layer: {_expected()}")
        layers.append(found)
    if len({len(layer) for layer in layers}) != 1:
        raise ValueError(f"{where}'s layers differ in their directions: {[len(layer) for layer in layers]}")
    return layers


def _expected() -> str:
    return (
        "a cell's parameters (nn.LSTMCell's ii..., nn.GRUCell's ir..., nn.SimpleCell's i and h), nn.RNN's "
        "{'cell': ...}, nn.Bidirectional's {'forward_rnn': ..., 'backward_rnn': ...}, or a stack of those"
    )


def paired(layers: list[list[tuple[Any, str]]], num_layers: int, directions: int) -> list[list[tuple[Any, str]]]:
    """``layers`` for a bidirectional network: 2L cells of one direction each (``@nn.compact`` numbers the cells of
    ``nn.Bidirectional(nn.RNN(nn.LSTMCell(H)), nn.RNN(nn.LSTMCell(H)))`` built inline in its parent as its own,
    ``LSTMCell_0``, ``LSTMCell_1``, in the order they were built) as L layers of (forward, backward)."""
    if directions == 2 and len(layers) == 2 * num_layers and all(len(layer) == 1 for layer in layers):
        return [layers[2 * i] + layers[2 * i + 1] for i in range(num_layers)]
    return layers


def check_shape_of(
    layers: list[list[tuple[Any, str]]], where: str, mode: str, num_layers: int, directions: int
) -> None:
    """Refuses layers whose count, directions or cells differ from the module's (``mode``, ``num_layers``,
    ``directions``), naming the path."""
    if len(layers) != num_layers or len(layers[0]) != directions:
        found = f"{len(layers)} layer{'s' if len(layers) != 1 else ''} of {len(layers[0])} direction"
        found += "s" if len(layers[0]) != 1 else ""
        raise ValueError(
            f"{where} holds {found}; the module has num_layers={num_layers} and "
            f"direction={'bidirectional' if directions == 2 else 'unidirectional'!r}"
        )
    for layer in layers:
        for tree, path in layer:
            found_mode = cell_mode(tree)
            if found_mode != ("rnn_tanh" if mode == "rnn_relu" else mode):
                raise ValueError(
                    f"{path} holds {_CELL_KINDS[found_mode]}'s parameters; the module runs mode {mode!r} "
                    f"({_CELL_KINDS['rnn_tanh' if mode == 'rnn_relu' else mode]}'s)"
                )


def as_stack(layers: list[list[tuple[Any, str]]]) -> dict[str, Any]:
    """``flax_cells.FlaxCellStack``'s parameters of the cells ``[layer][direction]``."""
    stack = {}
    for index, layer in enumerate(layers):
        if len(layer) == 1:
            stack[f"layer_{index}"] = {"cell": layer[0][0]}
        else:
            stack[f"layer_{index}"] = {d: {"cell": tree} for d, (tree, _) in zip(_DIRECTIONS, layer, strict=True)}
    return stack


def from_stack(stack: Mapping[str, Any]) -> Any:
    """``FlaxCellStack``'s parameters as Flax's own layer keeps them: one layer of one direction ``nn.RNN``'s
    ``{"cell": ...}``, one bidirectional layer ``nn.Bidirectional``'s, a stack as it is (``layer_{l}``)."""
    return stack["layer_0"] if len(stack) == 1 else dict(stack)
