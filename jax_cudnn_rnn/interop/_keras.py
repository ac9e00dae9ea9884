"""Keras 3: one ``get_weights()`` list per ``LSTM`` / ``GRU`` (``reset_after=True``: mode "gru"; ``reset_after=False``:
mode "gru_reset_before") / ``SimpleRNN`` layer, plain or in ``Bidirectional``, and the Keras layers a config describes
(Keras imported only by the functions that need it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.interop import _common as common

#: The gates side by side in Keras's kernels, recurrent kernels and biases, as canonical gate names. Public: the
#: traceable conversion of jax_cudnn_rnn/keras.py reads the same order, so that this fact lives here only.
KERAS_GATES = {
    "lstm": ("i", "f", "g", "o"),
    "gru": ("z", "r", "n"),
    "rnn_tanh": ("h",),
    "rnn_relu": ("h",),
    "gru_reset_before": ("z", "r", "n"),
}
_KERAS_CLASSES = {
    "lstm": "LSTM",
    "gru": "GRU",
    "rnn_tanh": "SimpleRNN",
    "rnn_relu": "SimpleRNN",
    "gru_reset_before": "GRU",
}
# Keras on JAX cannot build half-precision recurrent layers (its orthogonal initializer runs a QR decomposition, which
# has no float16/bfloat16 kernel), so half precision uses Keras's mixed policies: float32 variables, half compute.
_KERAS_POLICIES = {"float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}


def _import_keras() -> Any:
    try:
        import keras
    except ImportError as e:
        raise ImportError(
            "the Keras converters need Keras 3: pip install keras (any backend works for the weights; "
            "set KERAS_BACKEND=jax before importing keras to run the layers on JAX)"
        ) from e
    if int(keras.__version__.split(".")[0]) < 3:
        raise ImportError(f"the Keras converters need Keras 3, found keras {keras.__version__}")
    return keras


def _keras_check(config: RNNConfig) -> None:
    common.check_no_projection_or_clip(config, "Keras", "keras.layers.LSTM")


def _keras_dtype(config: RNNConfig) -> np.dtype:
    """The dtype of the variables of ``keras_layers(config)``: float32 for half precision (a mixed policy)."""
    return np.dtype(np.float32) if config.dtype.name in _KERAS_POLICIES else config.dtype


def _keras_shapes(config: RNNConfig, layer: int) -> dict[str, tuple[int, ...]]:
    """Shapes of one direction's arrays, in ``get_weights()`` order."""
    width = config.num_gates * config.num_units
    shapes = {"kernel": (config.layer_input_size(layer), width), "recurrent_kernel": (config.num_units, width)}
    if config.bias_mode != "none":
        shapes["bias"] = (2, width) if config.mode == "gru" else (width,)
    return shapes


def keras_layers(config: RNNConfig, *, return_state: bool = False) -> list[Any]:
    """The Keras 3 layers that compute what ``rnn`` computes for ``config``, one per layer, built for their input
    width (so ``set_weights`` works at once) and batch-major like Keras: [B, T, in_l] -> [B, T, D*H].

    ``keras.layers.LSTM``, ``GRU(reset_after=True)`` (cuDNN's GRU; ``reset_after=False`` for "gru_reset_before") or
    ``SimpleRNN``, with the config's activations (a named one by its name, a callable as it is), its
    ``recurrent_dropout`` (Keras's semantics are the config's), ``return_sequences=True``,
    ``zero_output_for_mask=True`` (a ``mask`` [B, T] of ``t < seq_lengths`` then gives ``rnn``'s ``seq_lengths``
    results) and ``use_bias=(bias_mode != 'none')``; inside ``keras.layers.Bidirectional``
    (merge_mode "concat", forward first) when bidirectional. ``initial_state`` is a list per layer: [h, c] for an
    LSTM (forward then backward: [h_f, c_f, h_b, c_b]), [h] (or [h_f, h_b]) otherwise, each [B, H]; with
    ``return_state=True`` a layer returns its output followed by its final states in that order.
    float16/bfloat16 configs get Keras's mixed policies (float32 variables); float64 ones hold float64 only where
    the backend does (JAX: with ``jax_enable_x64``). Load weights with
    ``layer.set_weights(arrays)`` for each layer and ``canonical_to_keras``'s lists.

    Raises ValueError for what Keras cannot express (proj_size, cell_clip), and for ``dropout > 0``: cuDNN drops each
    element of a layer's output at every step, Keras's ``dropout=`` reuses one mask over all steps; weights do not
    depend on it, so build from ``dataclasses.replace(config, dropout=0.0)`` and put
    ``keras.layers.Dropout(config.dropout)`` between the layers to train with cuDNN's dropout.
    """
    _keras_check(config)
    if config.dropout:
        raise ValueError(
            f"dropout={config.dropout} has no Keras recurrent-layer equivalent (Keras's dropout= reuses "
            "one input mask at every step; cuDNN draws a new one per step): build the layers from "
            "dataclasses.replace(config, dropout=0.0) and add keras.layers.Dropout between them"
        )
    keras = _import_keras()
    policy = _KERAS_POLICIES.get(config.dtype.name, config.dtype.name)
    kwargs: dict[str, Any] = dict(
        units=config.num_units,
        use_bias=config.bias_mode != "none",
        return_sequences=True,
        return_state=return_state,
        zero_output_for_mask=True,
        dtype=policy,
    )
    cell = config.cell
    kwargs["activation"] = config.activation or cell.activation
    if cell.recurrent_activation is not None:
        kwargs["recurrent_activation"] = config.recurrent_activation or cell.recurrent_activation
    if config.mode in ("gru", "gru_reset_before"):
        kwargs["reset_after"] = config.mode == "gru"
    if config.recurrent_dropout:
        kwargs["recurrent_dropout"] = config.recurrent_dropout
    layers = []
    for layer in range(config.num_layers):
        keras_layer = getattr(keras.layers, _KERAS_CLASSES[config.mode])(**kwargs)
        if config.num_directions == 2:
            keras_layer = keras.layers.Bidirectional(keras_layer, merge_mode="concat", dtype=policy)
        keras_layer.build((None, None, config.layer_input_size(layer)))
        layers.append(keras_layer)
    return layers


def canonical_to_keras(weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig) -> list[list[np.ndarray]]:
    """Per layer, the list that ``set_weights`` of that layer of ``keras_layers(config)`` takes: ``[kernel [in_l,
    G*H], recurrent_kernel [H, G*H], bias]`` (forward, then backward when bidirectional), the canonical matrices
    transposed and side by side in Keras's gate order. bias: [G*H], the input and recurrent biases summed (LSTM,
    SimpleRNN, the reset-before GRU: Keras's ``reset_after=False`` layer has that one bias), or [2, 3H] = (input,
    recurrent) for GRU; absent with bias_mode 'none'. Skip input gives identity
    kernels. dtype: config.dtype, float32 for float16/bfloat16 (Keras's mixed policy keeps float32 variables)."""
    _keras_check(config)
    named = common.canonical_by_name(weights, biases, config)
    dtype = _keras_dtype(config)
    gates = KERAS_GATES[config.mode]
    result: list[list[np.ndarray]] = [[] for _ in range(config.num_layers)]
    for layer, _, prefix in common.pseudo_layers(config):
        arrays = [
            np.concatenate([common.input_matrix(config, named, layer, prefix, g).T for g in gates], axis=1),
            np.concatenate([named[f"{prefix}/w_recurrent/{g}"].T for g in gates], axis=1),
        ]
        if config.bias_mode != "none":
            pairs = [[np.asarray(b, dtype) for b in common.gate_biases(config, named, prefix, g)] for g in gates]
            if config.mode == "gru":
                arrays.append(np.stack([np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])]))
            else:
                arrays.append(np.concatenate([p[0] + p[1] for p in pairs]))
        result[layer].extend(np.ascontiguousarray(a, dtype) for a in arrays)
    return result


def keras_to_canonical(
    layer_weights: Sequence[Any], config: RNNConfig, *, dtype: Any = None, atol: float = 0.0
) -> common.Canonical:
    """The inverse of ``canonical_to_keras``: ``layer_weights`` holds one ``get_weights()`` list per layer (or the
    layers themselves), as ``keras_layers(config)`` lays them out. A summed bias goes to the input bias with a zero
    recurrent bias (or to the one bias ``bias_mode`` keeps); GRU's are exact. ``dtype`` defaults to config.dtype.

    Raises ValueError naming the layer and array whose count or shape is wrong (a GRU with ``reset_after=True`` is
    mode "gru", one with ``reset_after=False`` mode "gru_reset_before"),
    and a value the canonical form has no room for (skip input's kernel must be the identity; a GRU n-gate bias that
    ``bias_mode`` lacks must be zero) beyond ``atol``.
    """
    _keras_check(config)
    if isinstance(layer_weights, (str, bytes, Mapping)) or not isinstance(layer_weights, Sequence):
        raise TypeError(
            f"layer_weights must be a list with one get_weights() list per layer, got {type(layer_weights).__name__}"
        )
    if len(layer_weights) != config.num_layers:
        raise ValueError(
            f"layer_weights has {len(layer_weights)} entries; expected num_layers = {config.num_layers} "
            "(one get_weights() list per layer)"
        )
    gates = KERAS_GATES[config.mode]
    units = config.num_units
    named: dict[str, np.ndarray] = {}
    for layer in range(config.num_layers):
        arrays = layer_weights[layer]
        if hasattr(arrays, "get_weights"):
            arrays = arrays.get_weights()
        shapes = _keras_shapes(config, layer)
        want = len(shapes) * config.num_directions
        if not isinstance(arrays, Sequence) or len(arrays) != want:
            got = f"{len(arrays)} arrays" if isinstance(arrays, Sequence) else f"a {type(arrays).__name__}"
            order = ", ".join(shapes) + (" (forward, then backward)" if config.num_directions == 2 else "")
            raise ValueError(
                f"layer_weights[{layer}] has {got}; expected {want}: {order}, for "
                f"{_KERAS_CLASSES[config.mode]}(use_bias={config.bias_mode != 'none'}) as bias_mode "
                f"{config.bias_mode!r} says"
            )
        for direction, prefix in [(d, p) for at, d, p in common.pseudo_layers(config) if at == layer]:
            found: dict[str, np.ndarray] = {}
            where: dict[str, str] = {}
            for k, (name, shape) in enumerate(shapes.items()):
                index = direction * len(shapes) + k
                where[name] = f"layer_weights[{layer}][{index}]"
                found[name] = common.to_numpy(arrays[index], where[name])
                if found[name].shape != shape:
                    hint = {
                        "gru": " (mode 'gru' is Keras's GRU(reset_after=True); reset_after=False is mode "
                        "'gru_reset_before')",
                        "gru_reset_before": " (mode 'gru_reset_before' is Keras's GRU(reset_after=False); "
                        "reset_after=True is mode 'gru')",
                    }.get(config.mode, "")
                    hint = hint if name == "bias" else ""
                    raise ValueError(
                        f"{where[name]} ({layout.DIRECTION_NAMES[direction]} {name}) has shape "
                        f"{found[name].shape}; expected {shape}{hint}"
                    )
            for j, gate in enumerate(gates):
                columns = slice(j * units, (j + 1) * units)
                span = f"{j * units}:{(j + 1) * units}"
                common.store_input_matrix(
                    config,
                    named,
                    layer,
                    prefix,
                    gate,
                    found["kernel"][:, columns].T,
                    f"{where['kernel']}[:, {span}] (kernel of gate {gate})",
                    atol,
                )
                named[f"{prefix}/w_recurrent/{gate}"] = found["recurrent_kernel"][:, columns].T
                if "bias" not in found:
                    continue
                bias = found["bias"]
                if config.mode == "gru":
                    peer = {
                        group: (f"{where['bias']}[{row}, {span}] ({group[2:]} bias of gate {gate})", bias[row, columns])
                        for row, group in enumerate(("b_input", "b_recurrent"))
                    }
                else:
                    peer = {"b_input": (f"{where['bias']}[{span}] (bias of gate {gate})", bias[columns])}
                common.store_biases(config, named, prefix, gate, peer, atol)
    return common.from_named(named, config, config.dtype if dtype is None else dtype)
