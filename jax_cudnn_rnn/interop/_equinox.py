"""Equinox: ``cells[layer][direction]`` of ``eqx.nn.LSTMCell`` / ``eqx.nn.GRUCell`` (Equinox has no vanilla tanh/relu
cell; Equinox imported only by the functions that need it)."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jax_cudnn_rnn.config import RNNConfig, check_config
from jax_cudnn_rnn.interop import _common as common

# Equinox's cells keep the gates in the canonical order (LSTM i, f, g, o; GRU reset, update, new); equinox.nn has no
# vanilla tanh/relu cell.
_EQUINOX_CELLS = {"lstm": "LSTMCell", "gru": "GRUCell"}


def _import_equinox() -> Any:
    try:
        import equinox
    except ImportError as e:
        raise ImportError("the Equinox converters need Equinox: pip install equinox") from e
    return equinox


def _equinox_check(config: RNNConfig) -> None:
    if check_config(config).mode in ("rnn_tanh", "rnn_relu"):
        raise ValueError(
            f"mode {config.mode!r} has no Equinox equivalent: equinox.nn has LSTMCell and GRUCell but no "
            "vanilla tanh/relu RNN cell; use mode 'lstm' or 'gru'"
        )
    common.check_mode(config, "Equinox", tuple(_EQUINOX_CELLS), "eqx.nn.LSTMCell and GRUCell")
    common.check_default_activations(config, "Equinox", "eqx.nn.LSTMCell and GRUCell")
    common.check_no_projection_or_clip(config, "Equinox", "eqx.nn.LSTMCell")


def _equinox_shapes(config: RNNConfig, layer: int) -> dict[str, tuple[int, ...]]:
    width = config.num_gates * config.num_units
    shapes = {"weight_ih": (width, config.layer_input_size(layer)), "weight_hh": (width, config.num_units)}
    if config.bias_mode != "none":
        shapes["bias"] = (width,)
        if config.mode == "gru":
            shapes["bias_n"] = (config.num_units,)
    return shapes


def canonical_to_equinox(weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig) -> list[list[Any]]:
    """``cells[layer][direction]`` (forward, then backward): ``eqx.nn.LSTMCell`` or ``eqx.nn.GRUCell`` with
    ``input_size=in_l``, ``hidden_size=H``, ``use_bias=(bias_mode != 'none')``, dtype config.dtype, holding the
    canonical weights: ``weight_ih`` [G*H, in_l] and ``weight_hh`` [G*H, H] are the gate matrices stacked in the
    canonical order; LSTM's ``bias`` [4H] is the summed pair; GRU's ``bias`` [3H] is (b_W + b_R for r and z, b_W for
    n) and ``bias_n`` [H] the recurrent bias of n. Skip input gives identity ``weight_ih`` on layer 0.

    Running a stack as ``rnn`` does: a cell maps (x_t [in_l], state) to the next state (``(h, c)`` for LSTM, ``h``
    for GRU, each [H]; ``jax.vmap`` it over the batch); the forward cell reads steps 0..T-1 and the backward cell
    T-1..0, both starting from h0/c0 at index ``layer * D + direction``; a layer's output, the next layer's input, is
    the forward and backward h at each step concatenated (forward first).
    """
    _equinox_check(config)
    eqx = _import_equinox()
    import jax
    import jax.numpy as jnp

    named = common.canonical_by_name(weights, biases, config)
    dtype = config.dtype
    cell_class = getattr(eqx.nn, _EQUINOX_CELLS[config.mode])
    cells: list[list[Any]] = [[] for _ in range(config.num_layers)]
    for layer, _, prefix in common.pseudo_layers(config):
        leaves = {
            "weight_ih": np.concatenate(
                [common.input_matrix(config, named, layer, prefix, gate) for gate in config.gate_names]
            ),
            "weight_hh": np.concatenate([named[f"{prefix}/w_recurrent/{g}"] for g in config.gate_names]),
        }
        if config.bias_mode != "none":
            pairs = {g: common.gate_biases(config, named, prefix, g) for g in config.gate_names}
            if config.mode == "gru":  # n = tanh(W x + b_W + r * (R h + b_R)): b_R stays inside, as bias_n
                leaves["bias"] = np.concatenate(
                    [pairs["r"][0] + pairs["r"][1], pairs["z"][0] + pairs["z"][1], pairs["n"][0]]
                )
                leaves["bias_n"] = pairs["n"][1]
            else:
                leaves["bias"] = np.concatenate([b_input + b_recurrent for b_input, b_recurrent in pairs.values()])
        # The key only fills the weights that tree_at replaces right away.
        cell = cell_class(
            config.layer_input_size(layer),
            config.num_units,
            use_bias=config.bias_mode != "none",
            dtype=jnp.dtype(dtype),
            key=jax.random.key(0),
        )
        cells[layer].append(
            eqx.tree_at(
                operator.attrgetter(*leaves), cell, tuple(jnp.asarray(np.asarray(v, dtype)) for v in leaves.values())
            )
        )
    return cells


def equinox_to_canonical(
    cells: Sequence[Sequence[Any]], config: RNNConfig, *, dtype: Any = None, atol: float = 0.0
) -> common.Canonical:
    """The inverse of ``canonical_to_equinox``: ``cells[layer][direction]`` of ``eqx.nn.LSTMCell`` /
    ``eqx.nn.GRUCell``. LSTM's summed bias goes to the input bias with a zero recurrent bias (or to the one bias
    ``bias_mode`` keeps); GRU's are exact. ``dtype`` defaults to config.dtype.

    Raises TypeError for a cell of the wrong class and ValueError naming the cell and field whose count, shape or
    ``use_bias`` is wrong, or whose value the canonical form has no room for (beyond ``atol``).
    """
    _equinox_check(config)
    eqx = _import_equinox()
    cell_class = getattr(eqx.nn, _EQUINOX_CELLS[config.mode])
    directions = "[forward, backward]" if config.num_directions == 2 else "[forward]"
    if isinstance(cells, (str, bytes, Mapping)) or not isinstance(cells, Sequence) or len(cells) != config.num_layers:
        got = f"{len(cells)} entries" if isinstance(cells, Sequence) else f"a {type(cells).__name__}"
        raise ValueError(
            f"cells must hold num_layers = {config.num_layers} lists {directions} of "
            f"eqx.nn.{_EQUINOX_CELLS[config.mode]}, got {got}"
        )
    units = config.num_units
    named: dict[str, np.ndarray] = {}
    for layer, direction, prefix in common.pseudo_layers(config):
        row = cells[layer]
        if not isinstance(row, Sequence) or len(row) != config.num_directions:
            got = f"{len(row)} cells" if isinstance(row, Sequence) else f"a {type(row).__name__}"
            raise ValueError(f"cells[{layer}] must be {directions} ({config.direction}), got {got}")
        cell, where = row[direction], f"cells[{layer}][{direction}]"
        if not isinstance(cell, cell_class):
            raise TypeError(
                f"{where} is a {type(cell).__name__}; expected eqx.nn.{_EQUINOX_CELLS[config.mode]} for "
                f"mode {config.mode!r}"
            )
        if cell.use_bias != (config.bias_mode != "none"):
            raise ValueError(
                f"{where} has use_bias={cell.use_bias}; bias_mode {config.bias_mode!r} needs "
                f"use_bias={config.bias_mode != 'none'}"
            )
        found = {}
        for name, shape in _equinox_shapes(config, layer).items():
            found[name] = common.to_numpy(getattr(cell, name), f"{where}.{name}")
            if found[name].shape != shape:
                raise ValueError(f"{where}.{name} has shape {found[name].shape}; expected {shape}")
        for j, gate in enumerate(config.gate_names):
            rows, span = slice(j * units, (j + 1) * units), f"{j * units}:{(j + 1) * units}"
            common.store_input_matrix(
                config,
                named,
                layer,
                prefix,
                gate,
                found["weight_ih"][rows],
                f"{where}.weight_ih[{span}] (gate {gate})",
                atol,
            )
            named[f"{prefix}/w_recurrent/{gate}"] = found["weight_hh"][rows]
            if "bias" not in found:
                continue
            peer = {"b_input": (f"{where}.bias[{span}] (gate {gate})", found["bias"][rows])}
            if config.mode == "gru" and gate == "n":
                peer["b_recurrent"] = (f"{where}.bias_n", found["bias_n"])
            common.store_biases(config, named, prefix, gate, peer, atol)
    return common.from_named(named, config, config.dtype if dtype is None else dtype)
