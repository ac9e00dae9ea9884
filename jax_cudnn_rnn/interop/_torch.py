"""PyTorch: the ``state_dict`` of ``torch.nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` and the constructor arguments of the
module a config describes (the package never imports torch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.interop import _common as common

_TORCH_MODULES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}


def _torch_check(config: RNNConfig) -> None:
    common.check_mode(config, "PyTorch", tuple(_TORCH_MODULES), "torch.nn.LSTM, GRU and RNN")
    common.check_default_activations(config, "PyTorch", "torch.nn.LSTM, GRU and RNN")
    if config.skip_input:
        raise ValueError(
            "input_mode 'skip_input' has no PyTorch equivalent (torch.nn.LSTM/GRU/RNN always have "
            "weight_ih_l0); use input_mode='linear_input'"
        )
    if config.cell_clip is not None:
        raise ValueError(
            f"cell_clip={config.cell_clip} has no PyTorch equivalent (torch.nn.LSTM does not clip the "
            "cell state); use cell_clip=None"
        )


def torch_module_kwargs(config: RNNConfig) -> dict[str, Any]:
    """Constructor arguments of the PyTorch module matching ``config`` (class: ``torch_module_name(config)``);
    time-major (``batch_first=False``) like ``rnn``. ValueError for ``recurrent_dropout``, which torch's modules
    lack (the weights do not depend on it: ``canonical_to_torch`` converts them)."""
    _torch_check(config)
    if config.recurrent_dropout:
        raise ValueError(
            f"recurrent_dropout={config.recurrent_dropout} has no PyTorch equivalent (torch.nn's RNNs have no "
            "recurrent dropout); build the module from dataclasses.replace(config, recurrent_dropout=0.0)"
        )
    kwargs: dict[str, Any] = dict(
        input_size=config.input_size,
        hidden_size=config.num_units,
        num_layers=config.num_layers,
        bias=config.bias_mode != "none",
        batch_first=False,
        dropout=config.dropout,
        bidirectional=config.num_directions == 2,
    )
    if config.mode == "lstm":
        kwargs["proj_size"] = config.proj_size
    elif config.mode in ("rnn_tanh", "rnn_relu"):
        kwargs["nonlinearity"] = config.mode[4:]
    return kwargs


_TORCH_MODES = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}


def _is_torch_module(value: Any) -> bool:
    """Whether ``value`` is a ``torch.nn.LSTM``/``GRU``/``RNN`` (or another ``nn.RNNBase``), without importing torch."""
    return callable(getattr(value, "state_dict", None)) and isinstance(getattr(value, "mode", None), str)


def torch_config(module: Any) -> RNNConfig:
    """The ``RNNConfig`` of a ``torch.nn.LSTM``, ``nn.GRU`` or ``nn.RNN`` (its mode, sizes, layers, direction, biases,
    dropout, projection and its parameters' dtype): the inverse of ``torch_module_kwargs``."""
    if not _is_torch_module(module):
        raise TypeError(f"module is a {type(module).__name__}; expected a torch.nn.LSTM, GRU or RNN")
    if module.mode not in _TORCH_MODES:
        raise ValueError(f"module.mode is {module.mode!r}; expected one of {sorted(_TORCH_MODES)}")
    dtype = str(next(iter(module.state_dict().values())).dtype).removeprefix("torch.")
    return RNNConfig(
        mode=_TORCH_MODES[module.mode],
        num_layers=module.num_layers,
        num_units=module.hidden_size,
        input_size=module.input_size,
        direction="bidirectional" if module.bidirectional else "unidirectional",
        bias_mode="double" if module.bias else "none",
        dropout=float(module.dropout),
        proj_size=int(getattr(module, "proj_size", 0) or 0),
        dtype=dtype,
    )


def torch_module_name(config: RNNConfig) -> str:
    """ "LSTM", "GRU" or "RNN": the ``torch.nn`` class for ``config.mode``."""
    _torch_check(config)
    return _TORCH_MODULES[config.mode]


def _torch_names(config: RNNConfig, layer: int, direction: int) -> dict[str, str]:
    suffix = f"l{layer}{'_reverse' if direction else ''}"
    names = {"w_input": f"weight_ih_{suffix}", "w_recurrent": f"weight_hh_{suffix}"}
    if config.bias_mode != "none":  # torch has both or none: a bias mode with one side has zeros on the other
        names["b_input"] = f"bias_ih_{suffix}"
        names["b_recurrent"] = f"bias_hh_{suffix}"
    if config.proj_size:
        names["w_projection"] = f"weight_hr_{suffix}"
    return names


def canonical_to_torch(weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig) -> dict[str, np.ndarray]:
    """The ``state_dict`` (as NumPy arrays, in PyTorch's key order) of the module ``torch_module_kwargs(config)``
    builds: ``weight_ih_l{l}`` is the row-concatenation of the G input matrices [G*H, in_l], and so on. A bias mode
    with one side ("single_input", "single_recurrent") gives zeros on the other, which computes the same."""
    _torch_check(config)
    named = common.canonical_by_name(weights, biases, config)
    state: dict[str, np.ndarray] = {}
    for layer, direction, prefix in common.pseudo_layers(config):
        for group, key in _torch_names(config, layer, direction).items():
            if group in ("b_input", "b_recurrent"):
                pairs = [common.gate_biases(config, named, prefix, gate) for gate in config.gate_names]
                state[key] = np.concatenate([pair[group == "b_recurrent"] for pair in pairs])
            else:
                gates = common.gates(config, layer, direction, group)
                state[key] = np.concatenate([named[n] for n in gates], axis=0)
    return state


def torch_to_canonical(
    state_dict: Any, config: RNNConfig | None = None, *, prefix: str = "", dtype: Any = None, atol: float = 0.0
) -> common.Canonical:
    """The inverse of ``canonical_to_torch``: accepts torch tensors or arrays; ``dtype`` defaults to config.dtype.

    ``state_dict`` may also be the ``torch.nn.LSTM``/``GRU``/``RNN`` itself, whose ``state_dict()`` is read and whose
    config is ``torch_config(module)`` (``config`` may then be omitted). ``prefix``: the module's keys in a larger
    model's state_dict (``"encoder.rnn."``, as ``model.state_dict()`` names them): only those keys are read, without it.
    Into a config with one bias per gate ("single_input", "single_recurrent"), a gate's two biases are summed into the
    one it keeps (exact: they only add up), except the GRU's new-memory gate, whose other bias must be zero (to within
    ``atol``).

    Raises ValueError naming missing keys, unexpected keys or the key whose shape is wrong.
    """
    if _is_torch_module(state_dict):
        module_config = torch_config(state_dict)
        if config is not None and config != module_config:
            raise ValueError(f"config {config} differs from the module's, {module_config}; pass one of them")
        config, state_dict = module_config, state_dict.state_dict()
    if config is None:
        raise TypeError("config is None; pass the RNNConfig of the state_dict, or the torch.nn module itself")
    _torch_check(config)
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping of name -> tensor, got {type(state_dict).__name__}")
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    if prefix:
        dotted = prefix if prefix.endswith(".") else prefix + "."
        state_dict = {key[len(dotted) :]: value for key, value in state_dict.items() if key.startswith(dotted)}
        if not state_dict:
            raise ValueError(f"state_dict has no key starting with prefix {dotted!r}")
    expected = {}
    for layer in range(config.num_layers):
        for direction in range(config.num_directions):
            for group, key in _torch_names(config, layer, direction).items():
                expected[key] = (layer, direction, group)
    missing = [k for k in expected if k not in state_dict]
    extra = sorted(k for k in state_dict if k not in expected)
    if missing or extra:
        under = f" under prefix {prefix!r}" if prefix else ""
        raise ValueError(
            f"state_dict{under} does not match {torch_module_name(config)}({torch_module_kwargs(config)}): "
            f"missing {missing}, unexpected {extra}"
        )
    named: dict[str, np.ndarray] = {}
    biases: dict[tuple[int, int], dict[str, tuple[str, np.ndarray]]] = {}
    units = config.num_units
    for key, (layer, direction, group) in expected.items():
        where = f"state_dict[{prefix + key!r}]"
        array = common.to_numpy(state_dict[key], where)
        if group in ("b_input", "b_recurrent"):
            want = (config.num_gates * units,)
            if array.shape != want:
                raise ValueError(f"{where} has shape {array.shape}; expected {want}")
            biases.setdefault((layer, direction), {})[group] = (where, array)
            continue
        slots = layout.layer_slots(config, layer, direction)[group]
        want = (sum(s.shape[0] for s in slots), *slots[0].shape[1:])
        if array.shape != want:
            raise ValueError(f"{where} has shape {array.shape}; expected {want}")
        start = 0
        for slot in slots:
            named[slot.name(config)] = array[start : start + slot.shape[0]]
            start += slot.shape[0]
    for layer, direction, name_prefix in common.pseudo_layers(config):
        pair = biases.get((layer, direction))
        if pair is None:
            continue
        for g, gate in enumerate(config.gate_names):
            rows = slice(g * units, (g + 1) * units)
            peer = {group: (where, array[rows]) for group, (where, array) in pair.items()}
            common.store_biases(config, named, name_prefix, gate, peer, atol)
    return common.from_named(named, config, config.dtype if dtype is None else dtype)
