"""A trained Flax model's recurrent parameters as a linen module's, and back: the one call of a port
(``RNN.params_from_flax``, ``RNN.params_to_flax``).

The parameters come as Flax's own layers keep them (jax_cudnn_rnn/interop/_flax_layers.py: ``nn.RNN``'s tree, a bare
cell's, ``nn.Bidirectional``'s, a stack's, at a ``path`` in a whole model's); each cell is checked against the
module's layers (its mode, sizes and Flax's biases), every error naming the path; then the canonical tensors go
through ``interop.flax_to_canonical`` into the module's parameterization, so that a module with cuDNN's bias modes
(``bias_mode="double"``...) takes a Flax model too.

Private: jax_cudnn_rnn/flax.py's methods call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jax_cudnn_rnn import _cell_params, _flax_core
from jax_cudnn_rnn.interop import _flax_layers, canonical_to_flax, flax_to_canonical

_KINDS = {"lstm": "LSTMCell", "gru": "GRUCell", "rnn_tanh": "SimpleCell", "rnn_relu": "SimpleCell"}


def _check_cells(layers: list[list[tuple[Any, str]]], mode: str, units: int, input_size: int) -> None:
    """Each cell's tree against linen's cell of ``mode`` with ``units`` for its layer's input size."""
    for index, layer in enumerate(layers):
        size = input_size if index == 0 else len(layer) * units
        shapes = _flax_core.parameterization("flax", mode, units, 1, size, None).shapes
        network = _cell_params.CellNetwork("linen", _KINDS[mode], mode, None, None, units, None)
        for tree, where in layer:
            _cell_params.check_linen_tree(tree, network, shapes, where)


def _input_size(layers: list[list[tuple[Any, str]]], mode: str) -> int:
    tree, where = layers[0][0]
    dense = next(iter(_cell_params.LINEN_NAMES[mode][0].values()))
    kernel = tree.get(dense, {}).get("kernel") if isinstance(tree.get(dense), dict) else None
    shape = getattr(kernel, "shape", None)
    if shape is None or len(shape) != 2:
        raise ValueError(f"{where}[{dense!r}]['kernel'] is missing or not a matrix [in_features, num_units]")
    return int(shape[0])


def from_flax(module: Any, params: Any, path: Any = None) -> dict[str, Any]:
    """``module``'s ``params`` collection holding the recurrent parameters of a trained Flax model (see the module
    docstring); ``path``: where they are in ``params`` ("encoder/RNN_0" or a sequence of keys)."""
    tree, where = _flax_layers.follow(params, path)
    layers = _flax_layers.cells(tree, where)
    if module.cell is not None:
        network = _cell_params.cell_network(module.cell, "linen")
        _flax_layers.check_shape_of(layers, where, network.mode, 1, 1)
        _check_cells(layers, network.mode, network.num_units, _input_size(layers, network.mode))
        return {"cell": layers[0][0][0]}
    directions = 2 if module.direction == "bidirectional" else 1
    units = module.num_units if module.num_units is not None else module.features
    layers = _flax_layers.paired(layers, module.num_layers, directions)
    _flax_layers.check_shape_of(layers, where, module.mode, module.num_layers, directions)
    input_size = _input_size(layers, module.mode)
    _check_cells(layers, module.mode, units, input_size)
    parameters = module.parameters(input_size)
    weights, biases = flax_to_canonical(_flax_layers.as_stack(layers), parameters.config)
    return {"rnn_params": parameters.from_canonical(weights, biases)}


def to_flax(module: Any, params: Any) -> Any:
    """The parameters of ``module`` (``variables``, ``variables["params"]`` or its own tree) as Flax's own layer of the
    same network keeps them: one layer of one direction ``nn.RNN``'s ``{"cell": ...}``, one bidirectional layer
    ``nn.Bidirectional``'s, a stack ``flax_cells.FlaxCellStack``'s ``layer_{l}``."""
    if module.cell is not None:  # the cell's own tree, as nn.RNN keeps it
        if isinstance(params, Mapping) and "params" in params:
            params = params["params"]
        return {"cell": params["cell"] if isinstance(params, Mapping) and "cell" in params else params}
    packed = module.packed(params)
    weights, biases = packed.to_canonical()
    return _flax_layers.from_stack(canonical_to_flax(weights, biases, packed.config))
