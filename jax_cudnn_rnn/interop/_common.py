"""The canonical tensors by name, and the rules every peer's converter shares: reading any array as NumPy (torch tensors
without importing torch), skip input as an identity matrix, and moving biases between the canonical pair and a peer's
one summed bias (exact for GRU's new-memory gate)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.cells import activations
from jax_cudnn_rnn.config import RNNConfig, check_config

#: ``(weights, biases)``: the canonical lists, as ``layout.params_to_canonical`` returns them, in NumPy.
Canonical = tuple[list[np.ndarray], list[np.ndarray]]


def to_numpy(value: Any, name: str) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without importing torch
        value = value.detach().cpu()
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            import ml_dtypes

            return value.float().numpy().astype(ml_dtypes.bfloat16)
        return value.numpy()
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise TypeError(f"{name} must be an array, got {type(value).__name__}")
    return np.asarray(value)


def canonical_by_name(weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig) -> dict[str, np.ndarray]:
    """{slot name: array} after checking counts and shapes; names as in ``ParamSlot.name``."""
    pairs = layout.check_canonical(weights, biases, config, check_dtype=False)
    return {slot.name(config): to_numpy(tensor, slot.name(config)) for slot, tensor in pairs}


def from_named(named: Mapping[str, np.ndarray], config: RNNConfig, dtype: Any) -> Canonical:
    weight_slots, bias_slots = layout.param_slots(config)
    weights = [np.asarray(named[s.name(config)], dtype) for s in weight_slots]
    biases = [np.asarray(named[s.name(config)], dtype) for s in bias_slots]
    return weights, biases


def gates(config: RNNConfig, layer: int, direction: int, group: str) -> list[str]:
    return [s.name(config) for s in layout.layer_slots(config, layer, direction)[group]]


def check_no_projection_or_clip(config: RNNConfig, peer: str, lstm_class: str) -> None:
    """For peers whose LSTM (``lstm_class``) neither projects nor clips."""
    if check_config(config).proj_size:
        raise ValueError(
            f"proj_size={config.proj_size} has no {peer} equivalent ({lstm_class} has no projection); use proj_size=0"
        )
    if config.cell_clip is not None:
        raise ValueError(
            f"cell_clip={config.cell_clip} has no {peer} equivalent ({lstm_class} does not clip the "
            "cell state); use cell_clip=None"
        )


def check_mode(config: RNNConfig, peer: str, modes: Sequence[str], cells: str) -> None:
    """For peers whose cells (``cells``, e.g. "torch.nn.LSTM, GRU and RNN") are ``modes``: the reset-before GRU and
    any other mode by name."""
    if check_config(config).mode not in modes:
        hint = (
            " (it applies the reset gate before the recurrent matrix; their GRU applies it after: mode 'gru')"
            if config.mode == "gru_reset_before"
            else ""
        )
        raise ValueError(
            f"mode {config.mode!r} has no {peer} equivalent: {cells} compute modes {list(modes)} only{hint}"
        )


def check_default_activations(config: RNNConfig, peer: str, cells: str) -> None:
    """For peers whose cells (``cells``) have fixed activations: only the cell's own ones."""
    if not config.default_activations:
        given = ", ".join(
            f"{name}={activations.activation_name(getattr(config, name))}"
            for name in ("activation", "recurrent_activation")
            if getattr(config, name) is not None
        )
        raise ValueError(f"{given} has no {peer} equivalent ({cells} use their fixed activations); use None")


def pseudo_layers(config: RNNConfig) -> Iterator[tuple[int, int, str]]:
    """(layer, direction, canonical name prefix ``layer_{l}/{forward|backward}``) in canonical order."""
    for layer in range(config.num_layers):
        for direction in range(config.num_directions):
            yield layer, direction, f"layer_{layer}/{layout.DIRECTION_NAMES[direction]}"


def require_zero(where: str, value: Any, why: str, atol: float) -> None:
    value = np.asarray(value, np.float64)
    worst = float(np.max(np.abs(value))) if value.size else 0.0
    if worst > atol:
        raise ValueError(f"{where} is not representable: {why} (max |value| {worst} > atol {atol})")


def input_matrix(config: RNNConfig, named: Mapping[str, np.ndarray], layer: int, prefix: str, gate: str) -> np.ndarray:
    """A gate's input matrix [H, in_l]. Skip input stores none on layer 0 (x enters every gate as it is), which is an
    identity matrix for peers that always have one."""
    if config.skip_input and layer == 0:
        return np.eye(config.num_units, dtype=config.dtype)
    return named[f"{prefix}/w_input/{gate}"]


def store_input_matrix(
    config: RNNConfig,
    named: dict[str, np.ndarray],
    layer: int,
    prefix: str,
    gate: str,
    matrix: np.ndarray,
    where: str,
    atol: float,
) -> None:
    """The inverse of ``input_matrix``: with skip input, layer 0's matrix must be the identity."""
    if config.skip_input and layer == 0:
        require_zero(
            where,
            np.asarray(matrix, np.float64) - np.eye(config.num_units),
            "skip input needs an identity input kernel",
            atol,
        )
    else:
        named[f"{prefix}/w_input/{gate}"] = matrix


def gate_biases(
    config: RNNConfig, named: Mapping[str, np.ndarray], prefix: str, gate: str
) -> tuple[np.ndarray, np.ndarray]:
    """(input bias, recurrent bias) [H] of one gate; zeros for a bias that ``config.bias_mode`` does not have."""
    zeros = np.zeros((config.num_units,), config.dtype)
    return named.get(f"{prefix}/b_input/{gate}", zeros), named.get(f"{prefix}/b_recurrent/{gate}", zeros)


def store_biases(
    config: RNNConfig,
    named: dict[str, np.ndarray],
    prefix: str,
    gate: str,
    peer: Mapping[str, tuple[str, np.ndarray]],
    atol: float,
) -> None:
    """Stores one gate's canonical biases from a peer's. ``peer`` maps "b_input" / "b_recurrent" to (the peer's name
    for that bias, its value [H]); a peer that keeps one summed bias gives it as "b_input".

    Both biases are added before the gate's nonlinearity, so they can be summed and moved freely (the reset-before
    GRU's n gate included: n = act(W_n x + b_Wn + R_n (r h) + b_Rn)), except in GRU's (reset-after) new-memory gate,
    where the recurrent bias sits inside r * (R h + b_R): there each side is kept as it is and a
    bias that ``config.bias_mode`` has no room for must be zero to within ``atol``. Elsewhere a peer's one bias stays
    on its side where ``bias_mode`` has it (Flax's LSTM keeps its bias on the recurrent side, as its module here does:
    the other side is then zero), else the peer's total goes to the input bias (the recurrent one zero), or to the one
    bias ``bias_mode`` keeps.
    """
    kept = [
        group for group, has in (("b_input", config.has_input_bias), ("b_recurrent", config.has_recurrent_bias)) if has
    ]
    if (config.mode == "gru" and gate == "n") or set(peer) == set(kept) or (len(peer) == 1 and set(peer) <= set(kept)):
        for group, (where, value) in peer.items():
            if group in kept:
                named[f"{prefix}/{group}/{gate}"] = value
            else:
                require_zero(where, value, f"bias_mode {config.bias_mode!r} has no {group} for GRU's gate n", atol)
        for group in kept:
            named.setdefault(f"{prefix}/{group}/{gate}", np.zeros((config.num_units,), config.dtype))
        return
    if not kept:
        for where, value in peer.values():
            require_zero(where, value, "bias_mode 'none' has no biases", atol)
        return
    values = [value for _, value in peer.values()]
    total = values[0] + values[1] if len(values) == 2 else values[0]
    named[f"{prefix}/{kept[0]}/{gate}"] = total
    for group in kept[1:]:
        named[f"{prefix}/{group}/{gate}"] = np.zeros_like(total)
