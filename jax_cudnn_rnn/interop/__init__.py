"""Converters between the canonical format and other frameworks' parameters. NumPy in, NumPy out (Equinox: cells).

* PyTorch: the ``state_dict`` of ``torch.nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (``weight_ih_l{l}[_reverse]``,
  ``weight_hh_l…``, ``bias_ih_l…``, ``bias_hh_l…``, ``weight_hr_l…`` with ``proj_size``). PyTorch's rows are the gates
  in the canonical order, so this is concatenation and slicing. ``torch_module_kwargs(config)`` gives the
  constructor arguments of the matching module. torch itself is never imported: torch tensors are read with
  ``.detach().cpu().numpy()``; pass the result to ``torch.from_numpy`` / ``load_state_dict``.
* Plain Flax linen cells (``nn.LSTMCell``, ``nn.GRUCell``, ``nn.SimpleCell``) stacked per layer as in
  ``flax_cells.FlaxCellStack``: kernels are the canonical matrices transposed ([in, H]); Flax cells keep one bias per
  gate (GRUCell: plus the separate ``hn`` bias), so the canonical input and recurrent biases are summed going to Flax,
  and coming back the sum goes to the input bias and the recurrent one is zero (GRU's new-memory gate keeps both
  exactly). Outputs are identical either way; only the split of a summed bias is not recoverable. Skip input becomes
  an identity input kernel (and must be one coming back).

* Keras 3 (``keras.layers.LSTM``, ``GRU`` with ``reset_after=True``, ``SimpleRNN``, each optionally inside
  ``Bidirectional``; ``keras_layers(config)`` builds them): one ``get_weights()`` list per layer, ``[kernel [in, G*H],
  recurrent_kernel [H, G*H], bias]`` (forward, then backward), kernels transposed and the gates side by side in
  Keras's order (LSTM i, f, c, o as ours; GRU z, r, h). LSTM and SimpleRNN keep one bias [G*H] (summed, as for Flax);
  GRU's bias is [2, 3H] (input row, recurrent row), exact both ways. Weights are independent of the Keras backend.
* Equinox (``eqx.nn.LSTMCell``, ``eqx.nn.GRUCell``; Equinox has no vanilla tanh/relu cell): ``cells[layer][direction]``
  with ``weight_ih`` [G*H, in] and ``weight_hh`` [G*H, H] in the canonical gate order, LSTM's one bias [4H] summed,
  GRU's ``bias`` [3H] on the input side (summed for r and z, the input bias for n) and ``bias_n`` [H] = the
  recurrent bias of n, so GRU is exact both ways.

For Flax, Keras and Equinox a summed bias comes back as the input bias with a zero recurrent bias (or as the only
bias ``bias_mode`` keeps), skip input is an identity input kernel both ways, and a value the canonical form has no room
for must be zero (to within ``atol``). Keras and Equinox are imported only by the functions that need them.

Every converter checks names, counts and shapes and says what is missing, unexpected or misshapen.
``canonical`` below means the ``(weights, biases)`` lists of ``layout.params_to_canonical``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import RNNConfig

__all__ = ["Canonical", "KERAS_GATES", "canonical_to_equinox", "canonical_to_flax", "canonical_to_keras",
           "canonical_to_torch", "equinox_to_canonical", "flax_stack_kwargs", "flax_to_canonical", "keras_layers",
           "keras_to_canonical", "torch_module_kwargs", "torch_module_name", "torch_to_canonical"]

#: ``(weights, biases)``: the canonical lists, as ``layout.params_to_canonical`` returns them, in NumPy.
Canonical = tuple[list[np.ndarray], list[np.ndarray]]


def _to_numpy(value: Any, name: str) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().cpu()
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            import ml_dtypes

            return value.float().numpy().astype(ml_dtypes.bfloat16)
        return value.numpy()
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise TypeError(f"{name} must be an array, got {type(value).__name__}")
    return np.asarray(value)


def _canonical_by_name(weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig) -> dict[str, np.ndarray]:
    """{slot name: array} after checking counts and shapes; names as in ``ParamSlot.name``."""
    pairs = layout.check_canonical(weights, biases, config, check_dtype=False)
    return {slot.name(config): _to_numpy(tensor, slot.name(config)) for slot, tensor in pairs}


def _from_named(named: Mapping[str, np.ndarray], config: RNNConfig, dtype: Any) -> Canonical:
    weight_slots, bias_slots = layout.param_slots(config)
    weights = [np.asarray(named[s.name(config)], dtype) for s in weight_slots]
    biases = [np.asarray(named[s.name(config)], dtype) for s in bias_slots]
    return weights, biases


def _gates(config: RNNConfig, layer: int, direction: int, group: str) -> list[str]:
    return [s.name(config) for s in layout.layer_slots(config, layer, direction)[group]]


def _check_no_projection_or_clip(config: RNNConfig, peer: str, lstm_class: str) -> None:
    """For peers whose LSTM (``lstm_class``) neither projects nor clips."""
    if config.proj_size:
        raise ValueError(f"proj_size={config.proj_size} has no {peer} equivalent ({lstm_class} has no projection); "
                         "use proj_size=0")
    if config.cell_clip is not None:
        raise ValueError(f"cell_clip={config.cell_clip} has no {peer} equivalent ({lstm_class} does not clip the "
                         "cell state); use cell_clip=None")


def _pseudo_layers(config: RNNConfig) -> Iterator[tuple[int, int, str]]:
    """(layer, direction, canonical name prefix ``layer_{l}/{forward|backward}``) in canonical order."""
    for layer in range(config.num_layers):
        for direction in range(config.num_directions):
            yield layer, direction, f"layer_{layer}/{layout.DIRECTION_NAMES[direction]}"


def _require_zero(where: str, value: Any, why: str, atol: float) -> None:
    value = np.asarray(value, np.float64)
    worst = float(np.max(np.abs(value))) if value.size else 0.0
    if worst > atol:
        raise ValueError(f"{where} is not representable: {why} (max |value| {worst} > atol {atol})")


def _input_matrix(config: RNNConfig, named: Mapping[str, np.ndarray], layer: int, prefix: str,
                  gate: str) -> np.ndarray:
    """A gate's input matrix [H, in_l]. Skip input stores none on layer 0 (x enters every gate as it is), which is an
    identity matrix for peers that always have one."""
    if config.skip_input and layer == 0:
        return np.eye(config.num_units, dtype=config.dtype)
    return named[f"{prefix}/w_input/{gate}"]


def _store_input_matrix(config: RNNConfig, named: dict[str, np.ndarray], layer: int, prefix: str, gate: str,
                        matrix: np.ndarray, where: str, atol: float) -> None:
    """The inverse of ``_input_matrix``: with skip input, layer 0's matrix must be the identity."""
    if config.skip_input and layer == 0:
        _require_zero(where, np.asarray(matrix, np.float64) - np.eye(config.num_units),
                      "skip input needs an identity input kernel", atol)
    else:
        named[f"{prefix}/w_input/{gate}"] = matrix


def _gate_biases(config: RNNConfig, named: Mapping[str, np.ndarray], prefix: str,
                 gate: str) -> tuple[np.ndarray, np.ndarray]:
    """(input bias, recurrent bias) [H] of one gate; zeros for a bias that ``config.bias_mode`` does not have."""
    zeros = np.zeros((config.num_units,), config.dtype)
    return named.get(f"{prefix}/b_input/{gate}", zeros), named.get(f"{prefix}/b_recurrent/{gate}", zeros)


def _store_biases(config: RNNConfig, named: dict[str, np.ndarray], prefix: str, gate: str,
                  peer: Mapping[str, tuple[str, np.ndarray]], atol: float) -> None:
    """Stores one gate's canonical biases from a peer's. ``peer`` maps "b_input" / "b_recurrent" to (the peer's name
    for that bias, its value [H]); a peer that keeps one summed bias gives it as "b_input".

    Both biases are added before the gate's nonlinearity, so they can be summed and moved freely, except in GRU's
    new-memory gate, where the recurrent bias sits inside r * (R h + b_R): there each side is kept as it is and a
    bias that ``config.bias_mode`` has no room for must be zero to within ``atol``. Elsewhere the peer's total goes to
    the input bias (the recurrent one is then zero), or to the one bias ``bias_mode`` keeps.
    """
    kept = [group for group, has in (("b_input", config.has_input_bias), ("b_recurrent", config.has_recurrent_bias))
            if has]
    if (config.mode == "gru" and gate == "n") or set(peer) == set(kept):
        for group, (where, value) in peer.items():
            if group in kept:
                named[f"{prefix}/{group}/{gate}"] = value
            else:
                _require_zero(where, value, f"bias_mode {config.bias_mode!r} has no {group} for GRU's gate n", atol)
        for group in kept:
            named.setdefault(f"{prefix}/{group}/{gate}", np.zeros((config.num_units,), config.dtype))
        return
    if not kept:
        for where, value in peer.values():
            _require_zero(where, value, "bias_mode 'none' has no biases", atol)
        return
    values = [value for _, value in peer.values()]
    total = values[0] + values[1] if len(values) == 2 else values[0]
    named[f"{prefix}/{kept[0]}/{gate}"] = total
    for group in kept[1:]:
        named[f"{prefix}/{group}/{gate}"] = np.zeros_like(total)


# --------------------------------------------------------------------------------------------------------- PyTorch

def _torch_check(config: RNNConfig) -> None:
    if config.skip_input:
        raise ValueError("input_mode 'skip_input' has no PyTorch equivalent (torch.nn.LSTM/GRU/RNN always have "
                         "weight_ih_l0); use input_mode='linear_input'")
    if config.bias_mode not in ("double", "none"):
        raise ValueError(f"bias_mode {config.bias_mode!r} has no PyTorch equivalent; torch has both biases "
                         "(bias=True, bias_mode='double') or none (bias=False, bias_mode='none')")
    if config.cell_clip is not None:
        raise ValueError(f"cell_clip={config.cell_clip} has no PyTorch equivalent (torch.nn.LSTM does not clip the "
                         "cell state); use cell_clip=None")


def torch_module_kwargs(config: RNNConfig) -> dict[str, Any]:
    """Constructor arguments of the PyTorch module matching ``config`` (class: ``torch_module_name(config)``);
    time-major (``batch_first=False``) like ``rnn``."""
    _torch_check(config)
    kwargs: dict[str, Any] = dict(input_size=config.input_size, hidden_size=config.num_units,
                                  num_layers=config.num_layers, bias=config.bias_mode == "double",
                                  batch_first=False, dropout=config.dropout,
                                  bidirectional=config.num_directions == 2)
    if config.mode == "lstm":
        kwargs["proj_size"] = config.proj_size
    elif config.mode in ("rnn_tanh", "rnn_relu"):
        kwargs["nonlinearity"] = config.mode[4:]
    return kwargs


def torch_module_name(config: RNNConfig) -> str:
    """"LSTM", "GRU" or "RNN": the ``torch.nn`` class for ``config.mode``."""
    return {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}[config.mode]


def _torch_names(config: RNNConfig, layer: int, direction: int) -> dict[str, str]:
    suffix = f"l{layer}{'_reverse' if direction else ''}"
    names = {"w_input": f"weight_ih_{suffix}", "w_recurrent": f"weight_hh_{suffix}"}
    if config.has_input_bias:
        names["b_input"] = f"bias_ih_{suffix}"
    if config.has_recurrent_bias:
        names["b_recurrent"] = f"bias_hh_{suffix}"
    if config.proj_size:
        names["w_projection"] = f"weight_hr_{suffix}"
    return names


def canonical_to_torch(weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig) -> dict[str, np.ndarray]:
    """The ``state_dict`` (as NumPy arrays, in PyTorch's key order) of the module ``torch_module_kwargs(config)``
    builds: ``weight_ih_l{l}`` is the row-concatenation of the G input matrices [G*H, in_l], and so on."""
    _torch_check(config)
    named = _canonical_by_name(weights, biases, config)
    state: dict[str, np.ndarray] = {}
    for layer in range(config.num_layers):
        for direction in range(config.num_directions):
            for group, key in _torch_names(config, layer, direction).items():
                state[key] = np.concatenate([named[n] for n in _gates(config, layer, direction, group)], axis=0)
    return state


def torch_to_canonical(state_dict: Mapping[str, Any], config: RNNConfig, *, dtype: Any = None) -> Canonical:
    """The inverse of ``canonical_to_torch``: accepts torch tensors or arrays; ``dtype`` defaults to config.dtype.

    Raises ValueError naming missing keys, unexpected keys or the key whose shape is wrong.
    """
    _torch_check(config)
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping of name -> tensor, got {type(state_dict).__name__}")
    expected = {}
    for layer in range(config.num_layers):
        for direction in range(config.num_directions):
            for group, key in _torch_names(config, layer, direction).items():
                expected[key] = (layer, direction, group)
    missing = [k for k in expected if k not in state_dict]
    extra = sorted(k for k in state_dict if k not in expected)
    if missing or extra:
        raise ValueError(f"state_dict does not match {torch_module_name(config)}({torch_module_kwargs(config)}): "
                         f"missing {missing}, unexpected {extra}")
    named: dict[str, np.ndarray] = {}
    for key, (layer, direction, group) in expected.items():
        array = _to_numpy(state_dict[key], f"state_dict[{key!r}]")
        slots = layout.layer_slots(config, layer, direction)[group]
        want = (sum(s.shape[0] for s in slots),) + slots[0].shape[1:]
        if array.shape != want:
            raise ValueError(f"state_dict[{key!r}] has shape {array.shape}; expected {want}")
        start = 0
        for slot in slots:
            named[slot.name(config)] = array[start:start + slot.shape[0]]
            start += slot.shape[0]
    return _from_named(named, config, config.dtype if dtype is None else dtype)


# ------------------------------------------------------------------------------------------------------ Flax cells

# Flax's own names per gate: (input dense, recurrent dense); which of them carries the (summed) bias.
_FLAX_CELL_NAMES = {
    "lstm": ({"i": "ii", "f": "if", "g": "ig", "o": "io"}, {"i": "hi", "f": "hf", "g": "hg", "o": "ho"}),
    "gru": ({"r": "ir", "z": "iz", "n": "in"}, {"r": "hr", "z": "hz", "n": "hn"}),
    "rnn_tanh": ({"h": "i"}, {"h": "h"}),
    "rnn_relu": ({"h": "i"}, {"h": "h"}),
}


def _flax_check(config: RNNConfig) -> None:
    _check_no_projection_or_clip(config, "plain-Flax cell", "nn.LSTMCell")


def _flax_layer_path(config: RNNConfig, layer: int, direction: int) -> tuple[str, ...]:
    if config.num_directions == 1:
        return (f"layer_{layer}", "cell")
    return (f"layer_{layer}", ("forward_rnn", "backward_rnn")[direction], "cell")


def canonical_to_flax(weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig) -> dict[str, Any]:
    """The ``params`` of ``flax_cells.FlaxCellStack(mode, num_units, num_layers, bidirectional)`` (apply with
    ``{'params': result}``). Kernels are [in, H] = canonical matrices transposed; biases summed as the module
    docstring says; skip input gives identity input kernels."""
    _flax_check(config)
    named = _canonical_by_name(weights, biases, config)
    input_names, recurrent_names = _FLAX_CELL_NAMES[config.mode]
    params: dict[str, Any] = {}
    for layer, direction, prefix in _pseudo_layers(config):
        cell: dict[str, Any] = {}
        for gate in config.gate_names:
            b_input, b_recurrent = _gate_biases(config, named, prefix, gate)
            input_dense = {"kernel": np.ascontiguousarray(_input_matrix(config, named, layer, prefix, gate).T)}
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


def flax_to_canonical(params: Mapping[str, Any], config: RNNConfig, *, dtype: Any = None,
                      atol: float = 0.0) -> Canonical:
    """The inverse of ``canonical_to_flax`` (accepts ``{'params': ...}`` too). Summed biases go to the input bias
    (``bias_mode='single_recurrent'``: to the recurrent one); a bias with nowhere to go (e.g. bias_mode 'none') and
    skip input's input kernels (which must be the identity) are checked to within ``atol``.

    Raises ValueError naming the missing, unexpected or misshapen path.
    """
    _flax_check(config)
    if isinstance(params, Mapping) and set(params) == {"params"}:
        params = params["params"]
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a nested dict, got {type(params).__name__}")
    found = {k: _to_numpy(v, k) for k, v in layout.flatten_tree(params).items()}
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
        raise ValueError(f"Flax params do not match FlaxCellStack({config.mode!r}, num_units={units}, num_layers="
                         f"{config.num_layers}, bidirectional={config.num_directions == 2}) for input_size "
                         f"{config.input_size}: missing {missing[:6]}{'...' if len(missing) > 6 else ''}, "
                         f"unexpected {extra[:6]}{'...' if len(extra) > 6 else ''}")
    for key, shape in expected.items():
        if found[key].shape != shape:
            raise ValueError(f"Flax param {key} has shape {found[key].shape}; expected {shape}")

    named: dict[str, np.ndarray] = {}
    for layer, direction, prefix in _pseudo_layers(config):
        base = "/".join(_flax_layer_path(config, layer, direction))
        for gate in config.gate_names:
            input_key, recurrent_key = f"{base}/{input_names[gate]}", f"{base}/{recurrent_names[gate]}"
            _store_input_matrix(config, named, layer, prefix, gate, found[f"{input_key}/kernel"].T,
                                f"Flax param {input_key}/kernel", atol)
            named[f"{prefix}/w_recurrent/{gate}"] = found[f"{recurrent_key}/kernel"].T
            if config.mode == "gru" and gate == "n":
                peer = {group: (f"Flax param {key}/bias", found[f"{key}/bias"])
                        for group, key in (("b_input", input_key), ("b_recurrent", recurrent_key))}
            else:
                key = recurrent_key if config.mode == "lstm" else input_key
                peer = {"b_input": (f"Flax param {key}/bias", found[f"{key}/bias"])}
            _store_biases(config, named, prefix, gate, peer, atol)
    return _from_named(named, config, config.dtype if dtype is None else dtype)


def flax_stack_kwargs(config: RNNConfig) -> dict[str, Any]:
    """Constructor arguments of ``flax_cells.FlaxCellStack`` matching ``config`` (batch-major by default)."""
    _flax_check(config)
    return dict(mode=config.mode, num_units=config.num_units, num_layers=config.num_layers,
                bidirectional=config.num_directions == 2, param_dtype=config.dtype)


# ------------------------------------------------------------------------------------------------------------ Keras

#: The gates side by side in Keras's kernels, recurrent kernels and biases, as canonical gate names. Public: the
#: traceable conversion of jax_cudnn_rnn/keras.py reads the same order, so that this fact lives here only.
KERAS_GATES = {"lstm": ("i", "f", "g", "o"), "gru": ("z", "r", "n"), "rnn_tanh": ("h",), "rnn_relu": ("h",)}
_KERAS_CLASSES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "SimpleRNN", "rnn_relu": "SimpleRNN"}
# Keras on JAX cannot build half-precision recurrent layers (its orthogonal initializer runs a QR decomposition, which
# has no float16/bfloat16 kernel), so half precision uses Keras's mixed policies: float32 variables, half compute.
_KERAS_POLICIES = {"float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}


def _import_keras() -> Any:
    try:
        import keras
    except ImportError as e:
        raise ImportError("the Keras converters need Keras 3: pip install keras (any backend works for the weights; "
                          "set KERAS_BACKEND=jax before importing keras to run the layers on JAX)") from e
    if int(keras.__version__.split(".")[0]) < 3:
        raise ImportError(f"the Keras converters need Keras 3, found keras {keras.__version__}")
    return keras


def _keras_check(config: RNNConfig) -> None:
    _check_no_projection_or_clip(config, "Keras", "keras.layers.LSTM")


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

    ``keras.layers.LSTM``, ``GRU(reset_after=True)`` (cuDNN's GRU) or ``SimpleRNN(activation='tanh'|'relu')``, with
    ``return_sequences=True``, ``zero_output_for_mask=True`` (a ``mask`` [B, T] of ``t < seq_lengths`` then gives
    ``rnn``'s ``seq_lengths`` results) and ``use_bias=(bias_mode != 'none')``; inside ``keras.layers.Bidirectional``
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
        raise ValueError(f"dropout={config.dropout} has no Keras recurrent-layer equivalent (Keras's dropout= reuses "
                         "one input mask at every step; cuDNN draws a new one per step): build the layers from "
                         "dataclasses.replace(config, dropout=0.0) and add keras.layers.Dropout between them")
    keras = _import_keras()
    policy = _KERAS_POLICIES.get(config.dtype.name, config.dtype.name)
    kwargs: dict[str, Any] = dict(units=config.num_units, use_bias=config.bias_mode != "none", return_sequences=True,
                                  return_state=return_state, zero_output_for_mask=True, dtype=policy)
    if config.mode in ("lstm", "gru"):
        kwargs.update(activation="tanh", recurrent_activation="sigmoid")
    if config.mode == "gru":
        kwargs["reset_after"] = True
    if config.mode in ("rnn_tanh", "rnn_relu"):
        kwargs["activation"] = config.mode[4:]
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
    SimpleRNN), or [2, 3H] = (input, recurrent) for GRU; absent with bias_mode 'none'. Skip input gives identity
    kernels. dtype: config.dtype, float32 for float16/bfloat16 (Keras's mixed policy keeps float32 variables)."""
    _keras_check(config)
    named = _canonical_by_name(weights, biases, config)
    dtype = _keras_dtype(config)
    gates = KERAS_GATES[config.mode]
    result: list[list[np.ndarray]] = [[] for _ in range(config.num_layers)]
    for layer, _, prefix in _pseudo_layers(config):
        arrays = [np.concatenate([_input_matrix(config, named, layer, prefix, g).T for g in gates], axis=1),
                  np.concatenate([named[f"{prefix}/w_recurrent/{g}"].T for g in gates], axis=1)]
        if config.bias_mode != "none":
            pairs = [[np.asarray(b, dtype) for b in _gate_biases(config, named, prefix, g)] for g in gates]
            if config.mode == "gru":
                arrays.append(np.stack([np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])]))
            else:
                arrays.append(np.concatenate([p[0] + p[1] for p in pairs]))
        result[layer].extend(np.ascontiguousarray(a, dtype) for a in arrays)
    return result


def keras_to_canonical(layer_weights: Sequence[Any], config: RNNConfig, *, dtype: Any = None,
                       atol: float = 0.0) -> Canonical:
    """The inverse of ``canonical_to_keras``: ``layer_weights`` holds one ``get_weights()`` list per layer (or the
    layers themselves), as ``keras_layers(config)`` lays them out. A summed bias goes to the input bias with a zero
    recurrent bias (or to the one bias ``bias_mode`` keeps); GRU's are exact. ``dtype`` defaults to config.dtype.

    Raises ValueError naming the layer and array whose count or shape is wrong (a GRU needs ``reset_after=True``),
    and a value the canonical form has no room for (skip input's kernel must be the identity; a GRU n-gate bias that
    ``bias_mode`` lacks must be zero) beyond ``atol``.
    """
    _keras_check(config)
    if isinstance(layer_weights, (str, bytes, Mapping)) or not isinstance(layer_weights, Sequence):
        raise TypeError(f"layer_weights must be a list with one get_weights() list per layer, got "
                        f"{type(layer_weights).__name__}")
    if len(layer_weights) != config.num_layers:
        raise ValueError(f"layer_weights has {len(layer_weights)} entries; expected num_layers = {config.num_layers} "
                         "(one get_weights() list per layer)")
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
            raise ValueError(f"layer_weights[{layer}] has {got}; expected {want}: {order}, for "
                             f"{_KERAS_CLASSES[config.mode]}(use_bias={config.bias_mode != 'none'}) as bias_mode "
                             f"{config.bias_mode!r} says")
        for direction, prefix in [(d, p) for l, d, p in _pseudo_layers(config) if l == layer]:
            found: dict[str, np.ndarray] = {}
            where: dict[str, str] = {}
            for k, (name, shape) in enumerate(shapes.items()):
                index = direction * len(shapes) + k
                where[name] = f"layer_weights[{layer}][{index}]"
                found[name] = _to_numpy(arrays[index], where[name])
                if found[name].shape != shape:
                    hint = " (a Keras GRU must have reset_after=True, cuDNN's GRU)" \
                        if config.mode == "gru" and name == "bias" else ""
                    raise ValueError(f"{where[name]} ({layout.DIRECTION_NAMES[direction]} {name}) has shape "
                                     f"{found[name].shape}; expected {shape}{hint}")
            for j, gate in enumerate(gates):
                columns = slice(j * units, (j + 1) * units)
                span = f"{j * units}:{(j + 1) * units}"
                _store_input_matrix(config, named, layer, prefix, gate, found["kernel"][:, columns].T,
                                    f"{where['kernel']}[:, {span}] (kernel of gate {gate})", atol)
                named[f"{prefix}/w_recurrent/{gate}"] = found["recurrent_kernel"][:, columns].T
                if "bias" not in found:
                    continue
                bias = found["bias"]
                if config.mode == "gru":
                    peer = {group: (f"{where['bias']}[{row}, {span}] ({group[2:]} bias of gate {gate})",
                                    bias[row, columns]) for row, group in enumerate(("b_input", "b_recurrent"))}
                else:
                    peer = {"b_input": (f"{where['bias']}[{span}] (bias of gate {gate})", bias[columns])}
                _store_biases(config, named, prefix, gate, peer, atol)
    return _from_named(named, config, config.dtype if dtype is None else dtype)


# ---------------------------------------------------------------------------------------------------------- Equinox

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
    if config.mode not in _EQUINOX_CELLS:
        raise ValueError(f"mode {config.mode!r} has no Equinox equivalent: equinox.nn has LSTMCell and GRUCell but no "
                         "vanilla tanh/relu RNN cell; use mode 'lstm' or 'gru'")
    _check_no_projection_or_clip(config, "Equinox", "eqx.nn.LSTMCell")


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

    named = _canonical_by_name(weights, biases, config)
    dtype = config.dtype
    cell_class = getattr(eqx.nn, _EQUINOX_CELLS[config.mode])
    cells: list[list[Any]] = [[] for _ in range(config.num_layers)]
    for layer, _, prefix in _pseudo_layers(config):
        leaves = {
            "weight_ih": np.concatenate([_input_matrix(config, named, layer, prefix, g) for g in config.gate_names]),
            "weight_hh": np.concatenate([named[f"{prefix}/w_recurrent/{g}"] for g in config.gate_names]),
        }
        if config.bias_mode != "none":
            pairs = {g: _gate_biases(config, named, prefix, g) for g in config.gate_names}
            if config.mode == "gru":  # n = tanh(W x + b_W + r * (R h + b_R)): b_R stays inside, as bias_n
                leaves["bias"] = np.concatenate([pairs["r"][0] + pairs["r"][1], pairs["z"][0] + pairs["z"][1],
                                                 pairs["n"][0]])
                leaves["bias_n"] = pairs["n"][1]
            else:
                leaves["bias"] = np.concatenate([b_input + b_recurrent for b_input, b_recurrent in pairs.values()])
        # The key only fills the weights that tree_at replaces right away.
        cell = cell_class(config.layer_input_size(layer), config.num_units, use_bias=config.bias_mode != "none",
                          dtype=jnp.dtype(dtype), key=jax.random.key(0))
        cells[layer].append(eqx.tree_at(lambda c: tuple(getattr(c, name) for name in leaves), cell,
                                        tuple(jnp.asarray(np.asarray(v, dtype)) for v in leaves.values())))
    return cells


def equinox_to_canonical(cells: Sequence[Sequence[Any]], config: RNNConfig, *, dtype: Any = None,
                         atol: float = 0.0) -> Canonical:
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
        raise ValueError(f"cells must hold num_layers = {config.num_layers} lists {directions} of "
                         f"eqx.nn.{_EQUINOX_CELLS[config.mode]}, got {got}")
    units = config.num_units
    named: dict[str, np.ndarray] = {}
    for layer, direction, prefix in _pseudo_layers(config):
        row = cells[layer]
        if not isinstance(row, Sequence) or len(row) != config.num_directions:
            got = f"{len(row)} cells" if isinstance(row, Sequence) else f"a {type(row).__name__}"
            raise ValueError(f"cells[{layer}] must be {directions} ({config.direction}), got {got}")
        cell, where = row[direction], f"cells[{layer}][{direction}]"
        if not isinstance(cell, cell_class):
            raise TypeError(f"{where} is a {type(cell).__name__}; expected eqx.nn.{_EQUINOX_CELLS[config.mode]} for "
                            f"mode {config.mode!r}")
        if cell.use_bias != (config.bias_mode != "none"):
            raise ValueError(f"{where} has use_bias={cell.use_bias}; bias_mode {config.bias_mode!r} needs "
                             f"use_bias={config.bias_mode != 'none'}")
        found = {}
        for name, shape in _equinox_shapes(config, layer).items():
            found[name] = _to_numpy(getattr(cell, name), f"{where}.{name}")
            if found[name].shape != shape:
                raise ValueError(f"{where}.{name} has shape {found[name].shape}; expected {shape}")
        for j, gate in enumerate(config.gate_names):
            rows, span = slice(j * units, (j + 1) * units), f"{j * units}:{(j + 1) * units}"
            _store_input_matrix(config, named, layer, prefix, gate, found["weight_ih"][rows],
                                f"{where}.weight_ih[{span}] (gate {gate})", atol)
            named[f"{prefix}/w_recurrent/{gate}"] = found["weight_hh"][rows]
            if "bias" not in found:
                continue
            peer = {"b_input": (f"{where}.bias[{span}] (gate {gate})", found["bias"][rows])}
            if config.mode == "gru" and gate == "n":
                peer["b_recurrent"] = (f"{where}.bias_n", found["bias_n"])
            _store_biases(config, named, prefix, gate, peer, atol)
    return _from_named(named, config, config.dtype if dtype is None else dtype)
