"""Plain Flax linen cells (``nn.LSTMCell``, ``nn.GRUCell``, ``nn.SimpleCell``) stacked per layer as in
``flax_cells.FlaxCellStack``: their params dict and the stack's constructor arguments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jax_cudnn_rnn import layout
from jax_cudnn_rnn._cell_params import LINEN_NAMES
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.interop import _common as common
from jax_cudnn_rnn.interop import _flax_layers

# Flax's own names per gate: (input dense, recurrent dense); which of them carries the (summed) bias.
_FLAX_CELL_NAMES = LINEN_NAMES


def _flax_check(config: RNNConfig) -> None:
    cells = "FlaxCellStack's nn.LSTMCell, nn.GRUCell and nn.SimpleCell"
    common.check_mode(config, "plain-Flax cell", tuple(_FLAX_CELL_NAMES), cells)
    common.check_default_activations(config, "plain-Flax cell", cells)
    common.check_no_projection_or_clip(config, "plain-Flax cell", "nn.LSTMCell")


def _flax_layer_path(config: RNNConfig, layer: int, direction: int) -> tuple[str, ...]:
    if config.num_directions == 1:
        return (f"layer_{layer}", "cell")
    return (f"layer_{layer}", ("forward_rnn", "backward_rnn")[direction], "cell")


def canonical_to_flax(weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig) -> dict[str, Any]:
    """The ``params`` of ``flax_cells.FlaxCellStack(mode, num_units, num_layers, bidirectional)`` (apply with
    ``{'params': result}``). Kernels are [in, H] = canonical matrices transposed; biases summed as the module
    docstring says; skip input gives identity input kernels."""
    _flax_check(config)
    named = common.canonical_by_name(weights, biases, config)
    input_names, recurrent_names = _FLAX_CELL_NAMES[config.mode]
    params: dict[str, Any] = {}
    for layer, direction, prefix in common.pseudo_layers(config):
        cell: dict[str, Any] = {}
        for gate in config.gate_names:
            b_input, b_recurrent = common.gate_biases(config, named, prefix, gate)
            input_dense = {"kernel": np.ascontiguousarray(common.input_matrix(config, named, layer, prefix, gate).T)}
            recurrent_dense = {"kernel": np.ascontiguousarray(named[f"{prefix}/w_recurrent/{gate}"].T)}
            if config.mode == "gru" and gate == "n":  # n = tanh(W x + b_W + r * (R h + b_R)): both kept
                input_dense["bias"] = np.asarray(b_input)
                recurrent_dense["bias"] = np.asarray(b_recurrent)
            elif config.mode == "lstm":
                recurrent_dense["bias"] = np.asarray(b_input + b_recurrent)
            else:
                input_dense["bias"] = np.asarray(b_input + b_recurrent)
            cell[input_names[gate]] = input_dense
            cell[recurrent_names[gate]] = recurrent_dense
        node = params
        for key in _flax_layer_path(config, layer, direction)[:-1]:
            node = node.setdefault(key, {})
        node[_flax_layer_path(config, layer, direction)[-1]] = cell
    return params


def flax_to_canonical(
    params: Mapping[str, Any], config: RNNConfig, *, dtype: Any = None, atol: float = 0.0
) -> common.Canonical:
    """The inverse of ``canonical_to_flax`` (accepts ``{'params': ...}`` too, and the trees Flax's own layers keep:
    a cell's as ``@nn.compact`` stores it, ``nn.RNN(cell)``'s ``{"cell": ...}``, ``nn.Bidirectional``'s
    ``{"forward_rnn": ..., "backward_rnn": ...}``, or a stack of those whose keys end in the layer's index, RNN_0,
    RNN_1, ...: jax_cudnn_rnn/interop/_flax_layers.py). A cell's one bias per gate goes to the side the cell keeps it
    on (the LSTM's recurrent one, the others' input one) where ``config`` has that side, else to the one bias it has;
    a bias with nowhere to go (e.g. bias_mode 'none') and
    skip input's input kernels (which must be the identity) are checked to within ``atol``.

    Raises ValueError naming the missing, unexpected or misshapen path.
    """
    _flax_check(config)
    if isinstance(params, Mapping) and set(params) == {"params"}:
        params = params["params"]
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a nested dict, got {type(params).__name__}")
    if "layer_0" not in params:  # a cell's tree, nn.RNN's {"cell": ...}, nn.Bidirectional's, RNN_0, RNN_1, ...
        params = _flax_layers.as_stack(_flax_layers.cells(params, "params"))
    found = {k: common.to_numpy(v, k) for k, v in layout.flatten_tree(params).items()}
    input_names, recurrent_names = _FLAX_CELL_NAMES[config.mode]
    units = config.num_units
    expected: dict[str, tuple[int, ...]] = {}
    for layer in range(config.num_layers):
        in_size = config.layer_input_size(layer)
        for direction in range(config.num_directions):
            base = "/".join(_flax_layer_path(config, layer, direction))
            for gate in config.gate_names:
                expected[f"{base}/{input_names[gate]}/kernel"] = (in_size, units)
                expected[f"{base}/{recurrent_names[gate]}/kernel"] = (units, units)
                if config.mode == "gru" and gate == "n":
                    expected[f"{base}/{input_names[gate]}/bias"] = (units,)
                    expected[f"{base}/{recurrent_names[gate]}/bias"] = (units,)
                elif config.mode == "lstm":
                    expected[f"{base}/{recurrent_names[gate]}/bias"] = (units,)
                else:
                    expected[f"{base}/{input_names[gate]}/bias"] = (units,)
    missing = [k for k in expected if k not in found]
    extra = sorted(k for k in found if k not in expected)
    if missing or extra:
        raise ValueError(
            f"Flax params do not match FlaxCellStack({config.mode!r}, num_units={units}, num_layers="
            f"{config.num_layers}, bidirectional={config.num_directions == 2}) for input_size "
            f"{config.input_size}: missing {missing[:6]}{'...' if len(missing) > 6 else ''}, "
            f"unexpected {extra[:6]}{'...' if len(extra) > 6 else ''}"
        )
    for key, shape in expected.items():
        if found[key].shape != shape:
            raise ValueError(f"Flax param {key} has shape {found[key].shape}; expected {shape}")

    named: dict[str, np.ndarray] = {}
    for layer, direction, prefix in common.pseudo_layers(config):
        base = "/".join(_flax_layer_path(config, layer, direction))
        for gate in config.gate_names:
            input_key, recurrent_key = f"{base}/{input_names[gate]}", f"{base}/{recurrent_names[gate]}"
            common.store_input_matrix(
                config,
                named,
                layer,
                prefix,
                gate,
                found[f"{input_key}/kernel"].T,
                f"Flax param {input_key}/kernel",
                atol,
            )
            named[f"{prefix}/w_recurrent/{gate}"] = found[f"{recurrent_key}/kernel"].T
            if config.mode == "gru" and gate == "n":
                peer = {
                    group: (f"Flax param {key}/bias", found[f"{key}/bias"])
                    for group, key in (("b_input", input_key), ("b_recurrent", recurrent_key))
                }
            else:
                # The one bias on the side the cell keeps it: the LSTM's recurrent dense, the others' input one.
                group, key = ("b_recurrent", recurrent_key) if config.mode == "lstm" else ("b_input", input_key)
                peer = {group: (f"Flax param {key}/bias", found[f"{key}/bias"])}
            common.store_biases(config, named, prefix, gate, peer, atol)
    return common.from_named(named, config, config.dtype if dtype is None else dtype)


def flax_stack_kwargs(config: RNNConfig) -> dict[str, Any]:
    """Constructor arguments of ``flax_cells.FlaxCellStack`` matching ``config`` (batch-major by default)."""
    _flax_check(config)
    return dict(
        mode=config.mode,
        num_units=config.num_units,
        num_layers=config.num_layers,
        bidirectional=config.num_directions == 2,
        param_dtype=config.dtype,
    )
