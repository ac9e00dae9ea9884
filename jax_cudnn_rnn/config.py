"""RNNConfig: the static description of a stacked recurrent network.

Everything else (the opaque buffer layout, both implementations, the Flax modules and the checkpoint handler) is a
function of this object, so it is frozen and hashable and can be a static argument of ``jax.jit``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import ml_dtypes
import numpy as np

from jax_cudnn_rnn import cells
from jax_cudnn_rnn.cells import activations

__all__ = ["ACTIVATIONS", "BIAS_MODES", "DIRECTIONS", "GATE_NAMES", "INPUT_MODES", "MODES", "SUPPORTED_DTYPES"]

#: The values of ``RNNConfig.mode``: the cells jax_cudnn_rnn/cells/ defines (cuDNN's four, then "gru_reset_before").
MODES = cells.MODES
#: The activations ``RNNConfig.activation`` and ``recurrent_activation`` take by name: Keras 3's elementwise ones
#: (jax_cudnn_rnn/cells/activations.py), besides their aliases "swish" and "hard_swish".
ACTIVATIONS = tuple(sorted(activations.ACTIVATIONS))
#: The values of ``RNNConfig.direction`` (D = 1, 2).
DIRECTIONS = ("unidirectional", "bidirectional")
#: The values of ``RNNConfig.input_mode`` ("auto_select" is resolved on construction).
INPUT_MODES = ("linear_input", "skip_input", "auto_select")
#: The values of ``RNNConfig.bias_mode``, which biases exist: both (cuDNN's CUDNN_RNN_DOUBLE_BIAS, the canonical
#: format's default), only the input ones (SINGLE_INP_BIAS), only the recurrent ones (SINGLE_REC_BIAS), or none
#: (NO_BIAS).
BIAS_MODES = ("double", "single_input", "single_recurrent", "none")

#: Gates per mode, in cuDNN's linLayerID order (== PyTorch's row order inside weight_ih / weight_hh): each cell's own
#: (jax_cudnn_rnn/cells/).
GATE_NAMES: dict[str, tuple[str, ...]] = {mode: cell.gate_names for mode, cell in cells.CELLS.items()}

#: The dtypes a config may have: float16, bfloat16 (NumPy's from ml_dtypes, a dependency of jax), float32, float64.
SUPPORTED_DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.float64))


def canonical_dtype(dtype: Any, *, argument: str = "dtype") -> np.dtype:
    """Returns ``dtype`` as a NumPy dtype if it is one of float16, bfloat16, float32, float64, else raises."""
    if dtype is None:  # np.dtype(None) is float64: a dtype left unset must not become one
        raise TypeError(f"{argument} is None; expected one of {[d.name for d in SUPPORTED_DTYPES]}")
    try:
        result = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(
            f"{argument} is {dtype!r}, which is not a dtype; expected one of {[d.name for d in SUPPORTED_DTYPES]}"
        ) from e
    if result not in SUPPORTED_DTYPES:
        raise TypeError(f"{argument} is {result.name}; expected one of {[d.name for d in SUPPORTED_DTYPES]}")
    return result


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int after checking that it is one (a Python or NumPy integer, not a bool) and at least
    ``minimum``; the TypeError or ValueError names it as ``name``, the caller's word for it (``"num_units"``,
    ``"hidden_size"``). A value traced by ``jax.jit`` is called one, with the fix: sizes must be static."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        kind = (
            "a traced value (mark it static under jax.jit)"
            if isinstance(value, jax.core.Tracer)
            else f"{type(value).__name__} {value!r}"
        )
        raise TypeError(f"{name} must be an int, got {kind}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} is {value!r}; expected one of {list(choices)}")
    return value


#: Fields of RNNConfig that decide which canonical tensors exist and their shapes (and so the buffer's layout); the
#: others (dtype, dropout, cell_clip, the activations, recurrent_dropout) change how the weights are stored or used,
#: not which weights there are.
LAYOUT_FIELDS = ("mode", "num_layers", "num_units", "input_size", "direction", "input_mode", "proj_size", "bias_mode")

#: Fields added after checkpoints of format version 1 were first written, with their defaults: ``to_json`` writes one
#: only where it differs from its default, so that a checkpoint of a config an earlier version knows stays readable
#: by that version.
_LATER_FIELDS = {"activation": None, "recurrent_activation": None, "recurrent_dropout": 0.0}

Activation = str | Callable[[Any], Any] | None


def _check_activation(name: str, value: Any) -> Activation:
    """None, a known name (aliases resolved) or a callable; TypeError/ValueError naming ``name`` otherwise."""
    if value is None or callable(value):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be None, an activation's name or a callable, got {type(value).__name__}")
    return activations.canonical_name(value, name)


def _check_rate(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} {value!r}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class RNNConfig:
    """A stacked RNN as cuDNN sees it.

    Attributes:
      mode: "lstm", "gru", "rnn_tanh", "rnn_relu" or "gru_reset_before" (the GRU that applies the reset gate
        before R: Keras's ``GRU(reset_after=False)``; jax_cudnn_rnn/cells/gru_reset_before.py).
      num_layers: number of stacked layers L >= 1.
      num_units: hidden size H.
      input_size: feature size I of the input x.
      direction: "unidirectional" or "bidirectional" (D = 1 or 2).
      input_mode: "linear_input", "skip_input" (only when input_size == num_units) or "auto_select", which is
        resolved on construction to skip_input when input_size == num_units and to linear_input otherwise, as in
        ``tf.contrib.cudnn_rnn``. The stored value is always the resolved one.
      dropout: probability of zeroing an element of a layer's output before the next layer, in [0, 1); applied only
        in training, never after the last layer.
      dtype: float16, bfloat16, float32 or float64; the dtype of the parameters, inputs and outputs.
      proj_size: LSTM only: 0 (off) or P with 0 < P < num_units. The hidden state is then projected,
        h = W_proj (o * tanh(c)) with W_proj [P, num_units]: h, h0, h_n and y are P wide (y is D*P), the recurrent
        matrices are [num_units, P] and later layers take D*P inputs; the cell state stays num_units wide.
      cell_clip: LSTM only: None (off) or a positive bound. cuDNN's semantics (cudnnRNNSetClip_v9 with
        CUDNN_RNN_CLIP_MINMAX, observed on an H100): the cell state is clipped to [-cell_clip, cell_clip] where it is
        read, c_t = f * clip(c_{t-1}) + i * g and h_t = o * tanh(clip(c_t)), and the state itself is kept unclipped,
        so c_n may lie outside the bound and c0 is clipped on its first use. y and h_n equal those of clipping the
        stored state (TensorFlow's LSTMCell) whenever c0 lies within the bound.
      bias_mode: "double" (separate input and recurrent biases, the default), "single_input", "single_recurrent" or
        "none"; absent biases have no storage and are absent from the canonical lists.
      activation: the candidate activation (LSTM: of g and of c' in h' = o * act(c'); GRU: of n; vanilla RNN: of
        h'): None for the cell's own (tanh; relu for "rnn_relu"), one of ``ACTIVATIONS`` by name (Keras 3's
        definitions; "swish"/"hard_swish" are read as "silu"/"hard_silu"), or a callable applied elementwise (it
        must be traceable by JAX and is a static part of the config, compared and hashed by identity; a checkpoint
        cannot record it). The cell's own name is stored as None; for the vanilla RNN, "tanh" and "relu" select the
        mode ("rnn_tanh" with activation "relu" is stored as mode "rnn_relu"), as cuDNN's modes do. Note: Keras's
        ``activation=None`` means "linear" here.
      recurrent_activation: the gates' activation (LSTM i, f, o; GRU r, z): None for sigmoid, or as ``activation``.
        Only for the gated modes; the vanilla RNN has none.
      recurrent_dropout: Keras's recurrent (variational) dropout, in [0, 1), applied only in training: per layer and
        direction, each gate's recurrent product reads h_{t-1} times a mask drawn once per sequence (the same at
        every step), each entry 0 with probability ``recurrent_dropout`` or 1/(1 - recurrent_dropout); the state
        itself (GRU's z * h) is not masked (jax_cudnn_rnn/dropout.py).

    Non-default activations, mode "gru_reset_before" and recurrent dropout in training run on the pure-JAX
    implementations ("xla", "reference"); the fused backends refuse them (``implementation_for`` says why).
    """

    mode: str
    num_layers: int
    num_units: int
    input_size: int
    direction: str = "unidirectional"
    input_mode: str = "linear_input"
    dropout: float = 0.0
    dtype: Any = np.float32
    proj_size: int = 0
    cell_clip: float | None = None
    bias_mode: str = "double"
    activation: Activation = None
    recurrent_activation: Activation = None
    recurrent_dropout: float = 0.0

    def __post_init__(self) -> None:
        _check_choice("mode", self.mode, MODES)
        activation = _check_activation("activation", self.activation)
        recurrent_activation = _check_activation("recurrent_activation", self.recurrent_activation)
        mode = self.mode
        if mode in ("rnn_tanh", "rnn_relu") and activation in ("tanh", "relu"):
            mode = f"rnn_{activation}"
        cell = cells.CELLS[mode]
        if activation == cell.activation:
            activation = None
        if cell.recurrent_activation is None and recurrent_activation is not None:
            raise ValueError(
                f"recurrent_activation is {recurrent_activation!r}; mode {mode!r} has no gates, so it takes None"
            )
        if recurrent_activation == cell.recurrent_activation:
            recurrent_activation = None
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "activation", activation)
        object.__setattr__(self, "recurrent_activation", recurrent_activation)
        object.__setattr__(self, "recurrent_dropout", _check_rate("recurrent_dropout", self.recurrent_dropout))
        check_int("num_layers", self.num_layers, 1)
        check_int("num_units", self.num_units, 1)
        check_int("input_size", self.input_size, 1)
        _check_choice("direction", self.direction, DIRECTIONS)
        _check_choice("input_mode", self.input_mode, INPUT_MODES)
        input_mode = self.input_mode
        if input_mode == "auto_select":
            input_mode = "skip_input" if self.input_size == self.num_units else "linear_input"
        if input_mode == "skip_input" and self.input_size != self.num_units:
            raise ValueError(
                f"input_mode 'skip_input' needs input_size == num_units, got input_size "
                f"{self.input_size} and num_units {self.num_units}"
            )
        _check_rate("dropout", self.dropout)
        check_int("proj_size", self.proj_size, 0)
        if self.proj_size and self.mode != "lstm":
            raise ValueError(
                f"proj_size is {self.proj_size}; projection exists only for mode 'lstm', got mode "
                f"{self.mode!r} (use proj_size=0)"
            )
        if self.proj_size >= self.num_units:
            raise ValueError(
                f"proj_size must be 0 (off) or in [1, num_units) = [1, {self.num_units}), got {self.proj_size}"
            )
        if self.cell_clip is not None:
            if isinstance(self.cell_clip, bool) or not isinstance(self.cell_clip, (int, float, np.floating)):
                raise TypeError(f"cell_clip must be None or a float, got {type(self.cell_clip).__name__}")
            if self.mode != "lstm":
                raise ValueError(
                    f"cell_clip is {self.cell_clip}; clipping exists only for mode 'lstm', got mode "
                    f"{self.mode!r} (use cell_clip=None)"
                )
            if not (np.isfinite(self.cell_clip) and self.cell_clip > 0):
                raise ValueError(f"cell_clip must be None or a finite value > 0, got {self.cell_clip}")
            object.__setattr__(self, "cell_clip", float(self.cell_clip))
        _check_choice("bias_mode", self.bias_mode, BIAS_MODES)
        object.__setattr__(self, "proj_size", int(self.proj_size))
        object.__setattr__(self, "num_layers", int(self.num_layers))
        object.__setattr__(self, "num_units", int(self.num_units))
        object.__setattr__(self, "input_size", int(self.input_size))
        object.__setattr__(self, "input_mode", input_mode)
        object.__setattr__(self, "dropout", float(self.dropout))
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))

    # Derived quantities, named as in docs/architecture.md.
    @property
    def cell(self) -> cells.Cell:
        """The mode's cell (jax_cudnn_rnn/cells/): its gates, state and step."""
        return cells.CELLS[self.mode]

    @property
    def default_activations(self) -> bool:
        """Whether the cell runs with its own activations (``activation`` and ``recurrent_activation`` None), the
        only ones the fused backends run."""
        return self.activation is None and self.recurrent_activation is None

    @property
    def activation_functions(self) -> tuple[Callable[[Any], Any], Callable[[Any], Any] | None]:
        """(candidate activation, gates' activation or None for the vanilla RNN) as functions."""
        cell = self.cell
        gates = self.recurrent_activation or cell.recurrent_activation
        return (
            activations.resolve(self.activation or cell.activation),
            None if gates is None else activations.resolve(gates),
        )

    @property
    def num_gates(self) -> int:
        """G: 4 for LSTM, 3 for GRU, 1 for the vanilla RNNs."""
        return self.cell.num_gates

    @property
    def gate_names(self) -> tuple[str, ...]:
        """The gates in canonical order: ("i", "f", "g", "o") for LSTM, ("r", "z", "n") for GRU, ("h",) else."""
        return self.cell.gate_names

    @property
    def num_directions(self) -> int:
        """D: 1 or 2."""
        return 2 if self.direction == "bidirectional" else 1

    @property
    def skip_input(self) -> bool:
        """Whether layer 0 has no input matrices (x enters every gate as it is; input_size == num_units)."""
        return self.input_mode == "skip_input"

    @property
    def has_cell_state(self) -> bool:
        """Whether the network carries a cell state c (LSTM only): c0 and c_n are None otherwise."""
        return self.cell.has_cell_state

    @property
    def hidden_size(self) -> int:
        """Width of h: proj_size when projecting, else num_units."""
        return self.proj_size or self.num_units

    @property
    def has_input_bias(self) -> bool:
        """Whether the input biases b_W exist (``bias_mode`` "double" or "single_input")."""
        return self.bias_mode in ("double", "single_input")

    @property
    def has_recurrent_bias(self) -> bool:
        """Whether the recurrent biases b_R exist (``bias_mode`` "double" or "single_recurrent")."""
        return self.bias_mode in ("double", "single_recurrent")

    @property
    def output_size(self) -> int:
        """Feature size of y: D * hidden_size (D * H without projection)."""
        return self.num_directions * self.hidden_size

    def layer_input_size(self, layer: int) -> int:
        """in_l: I for layer 0, D * hidden_size after."""
        return self.input_size if layer == 0 else self.output_size

    def state_shape(self, batch_size: int) -> tuple[int, int, int]:
        """Shape of h0 and h_n: (L * D, B, hidden_size); (L * D, B, H) without projection."""
        return (self.num_layers * self.num_directions, check_int("batch_size", batch_size, 0), self.hidden_size)

    def cell_shape(self, batch_size: int) -> tuple[int, int, int]:
        """Shape of c0 and c_n (LSTM): (L * D, B, num_units)."""
        return (self.num_layers * self.num_directions, check_int("batch_size", batch_size, 0), self.num_units)

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict from which ``from_json`` rebuilds an equal config; the fields added later
        (activations, recurrent_dropout) only where they differ from their defaults. TypeError for an activation
        given as a callable, which JSON cannot record."""
        for name in ("activation", "recurrent_activation"):
            value = getattr(self, name)
            if callable(value):
                raise TypeError(
                    f"{name} is {activations.activation_name(value)}, which a checkpoint or JSON cannot record; "
                    f"use one of the named activations ({', '.join(ACTIVATIONS)}) to save this config"
                )
        fields = dataclasses.asdict(self)
        fields["dtype"] = self.dtype.name
        for name, default in _LATER_FIELDS.items():
            if fields[name] == default:
                del fields[name]
        return fields

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> RNNConfig:
        """The config ``to_json`` wrote (fields missing from ``fields`` take their defaults); unknown fields are a
        ValueError."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(fields) - known
        if unknown:
            raise ValueError(f"RNNConfig fields {sorted(unknown)} are unknown; expected a subset of {sorted(known)}")
        return cls(**fields)


def check_config(config: Any, argument: str = "config") -> RNNConfig:
    """``config`` after checking that it is an ``RNNConfig``; the TypeError names it as ``argument``. A config that
    ``jax.jit`` traced (passed as an array argument) gets the fix: configs are static."""
    if isinstance(config, jax.core.Tracer):
        raise TypeError(
            f"{argument} is a traced value ({type(config).__name__}): jax.jit traced the RNNConfig like an "
            "array argument, but it must be static. Use jax.jit(jcr.rnn, static_argnames=('config',)) "
            "and pass config=cfg by keyword, or pass params as an RNNParams (jcr.RNNParams.init(key, cfg) "
            "or RNNParams(buffer, cfg)), which carries its config as static pytree metadata"
        )
    if not isinstance(config, RNNConfig):
        raise TypeError(f"{argument} must be an RNNConfig, got {type(config).__name__}")
    return config
