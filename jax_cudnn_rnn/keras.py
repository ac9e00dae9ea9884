"""Keras 3 layers on the fused kernels: ``LSTM``, ``GRU`` and ``SimpleRNN`` (JAX backend).

Each is a subclass of its ``keras.layers`` namesake with the same constructor arguments, call signature, variables
(``kernel`` [I, G*H], ``recurrent_kernel`` [H, G*H], ``bias``: the cell's, in Keras's gate order) and configuration,
so ``ours.set_weights(keras_layer.get_weights())`` and back just work, and ``keras.layers.Bidirectional``,
``Sequential``/``Model``, ``fit``, stateful layers and ``.keras`` files work as with Keras's layers. Only the loop over
time changes: ``inner_loop`` builds the opaque buffer from the variables with traceable jnp ops (under ``jit`` and
``grad``) and runs one ``jax_cudnn_rnn.rnn`` call: cuDNN on a GPU (also for GRUs and masked sequences, which Keras on
JAX runs as a ``lax.scan``), oneDNN or pure JAX on the CPU.

Semantics are Keras's, tested against ``keras.layers.LSTM/GRU/SimpleRNN`` (tests/frontends/test_keras.py):

* LSTM and SimpleRNN keep one bias per gate: it is the input bias, on cuDNN's double-bias weight space with the
  recurrent biases held at zero (the space cuDNN's persistent algorithms run: they refuse a single-bias one); GRU is
  Keras's ``reset_after=True`` GRU, cuDNN's, with its input and recurrent biases (``bias`` [2, 3H]).
  ``use_bias=False``: no biases.
* ``mask`` [batch, timesteps] (bool, or anything Keras casts to bool), any pattern: a masked step leaves the state as
  it is and outputs the previous output (``h0`` before the first valid step), or zeros with ``zero_output_for_mask``
  (which ``Bidirectional`` sets when it returns sequences). The valid steps of each sequence are gathered to its
  front, run as one fused call with ``seq_lengths`` = their count, and the outputs gathered back: a right-padded mask
  is the fused call with ``seq_lengths`` plus two identity gathers; left padding (``pad_sequences``'s default) and
  holes cost nothing more. Nothing depends on the mask's values at trace time, so masks work under ``jit``.
* ``go_backwards`` reads the steps last to first and returns the outputs in that order (Keras's "reversed sequence").
* ``unroll=True``: Keras unrolls its Python loop over the steps instead of a scan, the same arithmetic, which these
  run fused as ever. What differs is Keras's: its unrolled loop gives a masked step the previous output (zeros, not
  h0, before the first valid step) and ignores ``zero_output_for_mask``; these do the same.
* ``activation``/``recurrent_activation``: any of Keras's (``activation=None`` is Keras's linear), by name when it
  is one of ``jax_cudnn_rnn.config.ACTIVATIONS`` (a config that can be saved), else the callable itself. LSTM/GRU with
  tanh and sigmoid and SimpleRNN with tanh or relu run fused; any other runs on the xla implementation.
* GRU ``reset_after=False`` (Keras 2's default) is mode ``"gru_reset_before"`` with Keras's variables (``bias`` [3H],
  ``bias_mode="single_input"``), on the xla implementation.
* ``dropout`` (Keras's input dropout: one mask per sequence, reused at every step) multiplies the input before the
  fused call, as Keras's own cuDNN path does, with the mask drawn from the cell's seed generator like Keras's. With
  Keras's ``implementation=1`` (which ``recurrent_dropout`` implies) Keras draws one input mask per gate: these run
  the call on the inputs of every gate side by side ([B, T, G*I], each times its gate's mask) and a kernel that is
  block-diagonal in them ([G*I, G*H]), so each gate reads its own masked inputs, Keras's masks exactly.
* ``recurrent_dropout`` is Keras's (one mask per gate on h_{t-1}, drawn once per call; ``RNNConfig.recurrent_dropout``)
  in training, with the masks drawn from a key that the cell's seed generator gives (so from the layer's ``seed``,
  not Keras's own mask values), on the xla implementation; at inference it changes nothing and the call runs fused.
  Keras clamps both rates to [0, 1]; its LSTM and GRU drop nothing at a rate of 1, its SimpleRNN everything; so do
  these.

Extra constructor arguments: ``implementation`` (``rnn``'s: None, "cudnn", "onednn", "xla" or "reference"; Keras's
legacy ``implementation=0``/``1``/``2``, which only reorder the same arithmetic, are accepted and mean None) and
``precision`` (``rnn``'s, as a string). Both are in ``get_config``.

``swap_layers(model_or_path)`` puts these layers in place of Keras's in an existing model or saved ``.keras`` file
(inside ``Bidirectional``, ``TimeDistributed`` and nested models too) with the weights, and reports each layer it met
(``Swap``): replaced, or kept as Keras's with the reason (a configuration our constructors refuse).
``keras.models.load_model(path, custom_objects={"LSTM": LSTM})`` does not swap: Keras resolves its own layers first.

Importing this module imports Keras, which must run on JAX: set ``KERAS_BACKEND=jax`` before Keras is first imported
(this package changes no environment variable); Keras on any other backend is an ImportError. Loading a saved model
needs ``import jax_cudnn_rnn.keras`` first (it registers the classes as ``jax_cudnn_rnn>LSTM`` and so on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import jax.numpy as jnp
import keras
import numpy as np

from jax_cudnn_rnn import _checks, interop, ops
from jax_cudnn_rnn._buffer import Pieces
from jax_cudnn_rnn._parameterization import Parameterization
from jax_cudnn_rnn.cells import activations
from jax_cudnn_rnn.config import RNNConfig

if keras.backend.backend() != "jax":
    raise ImportError(
        f"jax_cudnn_rnn.keras needs Keras 3 on the JAX backend; keras was imported with backend "
        f"{keras.backend.backend()!r}. Set the environment variable KERAS_BACKEND=jax before keras is "
        f"first imported"
    )

__all__ = ["GRU", "LSTM", "SimpleRNN", "Swap", "swap_layers"]

# after the backend check: the model surgery imports keras too
from jax_cudnn_rnn._keras_swap import Swap, swap_layers

# Keras's legacy `implementation` values (LSTMCell/GRUCell): they order the same arithmetic differently (0, from old
# configs, computes as 2).
_KERAS_IMPLEMENTATIONS = (0, 1, 2)


def _activation(function: Any) -> Any:
    """A Keras cell's activation as ``RNNConfig`` takes it: its name when it is Keras's function of one of
    ``config.ACTIVATIONS`` (or their aliases; Keras's ``activation=None`` is its ``linear``), else the callable itself
    (Keras's activations act on JAX arrays)."""
    name = getattr(function, "__name__", None)
    known = name in activations.ACTIVATIONS or name in activations.ALIASES
    if known and keras.activations.get(name) is function:
        return name
    return function


def _rate(rate: float) -> float:
    """Keras's dropout rate as it acts: Keras clamps it to [0, 1] and applies it only below 1."""
    return rate if 0.0 < rate < 1.0 else 0.0


def _block_diagonal(kernel: Any, gates: int) -> Any:
    """kernel [I, G*H] -> [G*I, G*H] whose row block j feeds only gate j's columns: each gate reads its own copy of
    the inputs (Keras's implementation=1 input masks). Zeros elsewhere add nothing; gradients reach only ``kernel``."""
    rows, columns = kernel.shape
    blocks = kernel.reshape(rows, gates, columns // gates)
    eye = jnp.eye(gates, dtype=kernel.dtype)
    return jnp.einsum("igh,jg->jigh", blocks, eye).reshape(gates * rows, columns)


def _pieces(kernel: Any, recurrent_kernel: Any, bias: Any, config: RNNConfig) -> Pieces:
    """One Keras layer's weights as the buffer's ``Pieces``, each read where it lies rather than packed into the
    buffer at every call (jnp ops only: it runs under ``jit`` and ``grad``). A packed buffer cost a one-step call of the
    LSTM at B=4, H=512 9x Flax's cell step (its concatenation at every call, then the buffer's step); the pieces give
    the xla implementation's one step the tensors as Flax's cells hold them, and oneDNN's kernels read them in place.

    kernel [I, G*H] and recurrent_kernel [H, G*H] hold the gates side by side in Keras's order
    (``interop.KERAS_GATES``): each gate's columns are a piece marked transposed ([in, H]) and stacked, the pieces in
    Keras's order (a product of every gate reads the kernel whole; the GRU's z before r); bias is [G*H] (LSTM,
    SimpleRNN: the input biases; where ``config`` has the recurrent ones too, ``bias_mode="double"``, those are held
    at zero: no piece, no gradient; the reset-before GRU's ``"single_input"``), [2, G*H] (GRU: the input row, then the
    recurrent row, ``bias_mode="double"``) or None (``"none"``). All in ``config.dtype``.
    """
    order = interop.KERAS_GATES[config.mode]

    def gates(array: Any) -> dict[str, Any]:  # [..., G*H] -> {gate: [..., H]}, one split
        return dict(zip(order, jnp.split(array, len(order), axis=-1), strict=True))

    groups = {"w_input": gates(kernel), "w_recurrent": gates(recurrent_kernel)}
    held: tuple[str, ...] = ()
    if bias is not None:
        rows = bias[None] if bias.ndim == 1 else bias
        present = {"b_input": config.has_input_bias, "b_recurrent": config.has_recurrent_bias}
        sides = [side for side, has in present.items() if has]
        groups.update({side: gates(row) for side, row in zip(sides[: len(rows)], rows, strict=True)})
        held = tuple(f"{side}/{gate}" for side in sides[len(rows) :] for gate in config.gate_names)
    # each group's pieces in Keras's order: the order of the kernels' blocks, which a stacked group's product reads
    position = {gate: order.index(name) for gate, name in enumerate(config.gate_names)}
    slots = sorted(Parameterization(config, held).slots, key=lambda slot: (slot.group, position[slot.gate]))
    arrays = [groups[slot.group][config.gate_names[slot.gate]] for slot in slots]
    matrices = [not slot.is_bias for slot in slots]
    return Pieces(arrays, slots, config, matrices, matrices)


def _choose_implementation(implementation: Any, use_cudnn: Any, kwargs: dict[str, Any]) -> str | None:
    """``rnn``'s implementation from the constructor's ``implementation`` and ``use_cudnn`` (None for
    ``use_cudnn=True``: the layer decides at each call, ``_Fused._cudnn_or_refuse``); Keras's legacy integer
    ``implementation`` goes back into ``kwargs`` for the cell."""
    if isinstance(implementation, (int, np.integer)) and not isinstance(implementation, bool):
        if implementation not in _KERAS_IMPLEMENTATIONS:
            raise ValueError(
                f"implementation is {implementation!r}; expected None, one of rnn()'s implementations "
                f"('cudnn', 'onednn', 'xla', 'reference'), or Keras's legacy 0, 1 or 2"
            )
        kwargs["implementation"] = int(implementation)
        implementation = None
    if implementation is not None and not isinstance(implementation, str):
        raise TypeError(f"implementation must be None or a str, got {type(implementation).__name__} {implementation!r}")
    if use_cudnn not in ("auto", True, False):
        raise ValueError(f"use_cudnn is {use_cudnn!r}; expected 'auto', True or False")
    if use_cudnn == "auto":
        return implementation
    if implementation is not None and (implementation == "cudnn") != (use_cudnn is True):
        meaning = "cuDNN where it can run the call" if use_cudnn is True else "implementation='xla'"
        raise ValueError(
            f"use_cudnn={use_cudnn} contradicts implementation={implementation!r}; pass one of them "
            f"(use_cudnn={use_cudnn} means {meaning})"
        )
    return None if use_cudnn is True else implementation or "xla"


def _shape(value: Any, argument: str) -> tuple[Any, ...]:
    shape = getattr(value, "shape", None)
    if shape is None:
        try:
            shape = np.shape(value)
        except Exception:  # noqa: BLE001 - anything NumPy cannot read is not an array
            shape = None
    if shape is None or isinstance(value, (str, bytes)):
        raise TypeError(f"{argument} must be an array, got {type(value).__name__}")
    return tuple(shape)


def _argument_names(mode: str) -> _checks.ArgumentNames:
    """Keras's words for ``_checks.check_inputs``: ``inputs`` [batch, timesteps, features], the states
    ``initial_state[0] (h)`` and ``initial_state[1] (c)`` (LSTM), each [batch, units], without a layer axis."""
    h0, c0 = ("initial_state[0] (h)", "initial_state[1] (c)") if mode == "lstm" else ("initial_state[0] (h)",) * 2
    return _checks.ArgumentNames(
        x="inputs",
        h0=h0,
        c0=c0,
        input_size="the number of features the layer was built for",
        dtype=None,
        axes=("timesteps", "batch", "features"),
        state_axes=(None, "units"),
        batch_major=True,
        caller="The layer",
        layout_fix="pass keras.ops.swapaxes(inputs, 0, 1)",
    )


class _Fused:
    """What the three layers share: the checks, the extra configuration and the fused ``inner_loop``. Mixed in before
    the Keras class, so ``call``/``build``/``inner_loop``/``get_config`` here run first and defer to Keras's."""

    _mode: str  # "lstm", "gru" (reset_after=True) or "gru_reset_before", "rnn_tanh" (the config takes the activation)
    #: Whether Keras's class takes ``use_cudnn`` (LSTM, GRU; not SimpleRNN).
    _keras_use_cudnn: ClassVar[bool] = True

    def __init__(
        self,
        units: int,
        *args: Any,
        implementation: Any = None,
        precision: Any = None,
        use_cudnn: Any = "auto",
        **kwargs: Any,
    ):
        chosen = _choose_implementation(implementation, use_cudnn, kwargs)
        if self._keras_use_cudnn:
            kwargs["use_cudnn"] = False  # the choice is ours (``_setup``)
        elif use_cudnn != "auto":  # as Keras's SimpleRNN refuses it
            raise TypeError(f"Unrecognized keyword arguments passed to SimpleRNN: {{'use_cudnn': {use_cudnn!r}}}")
        elif "implementation" in kwargs:  # SimpleRNNCell has no legacy implementation argument
            raise ValueError(
                f"implementation is {kwargs['implementation']}; SimpleRNN has no Keras implementation "
                "modes: expected None or one of rnn()'s implementations"
            )
        super().__init__(units, *args, **kwargs)
        self._setup(chosen, precision, use_cudnn)

    def _setup(self, implementation: str | None, precision: Any, use_cudnn: Any = "auto") -> None:
        if precision is not None and not isinstance(precision, str):
            raise TypeError(
                f"precision must be None or a str (it is saved with the layer's config), got "
                f"{type(precision).__name__} {precision!r}"
            )
        self.implementation = implementation
        self.precision = precision
        # Keras's `use_cudnn` attribute is False on these layers (Keras's Bidirectional would otherwise put its own
        # fused LSTM in their place); what the caller asked for is kept here, and in get_config.
        self.cudnn_requested = use_cudnn
        self.input_spec = None  # the rank is checked in build() and call(), with messages that name `inputs`

    def _bias_mode(self) -> str:
        return "double" if self.cell.use_bias else "none"  # the recurrent biases held at zero (_pieces)

    def _rnn_config(self, input_size: int, dtype: Any) -> RNNConfig:
        """The one-layer, one-direction network this layer is, in the compute dtype, with the cell's activations and
        recurrent dropout rate (which acts only in training)."""
        cell = self.cell
        return RNNConfig(
            mode=self._mode,
            num_layers=1,
            num_units=cell.units,
            input_size=input_size,
            bias_mode=self._bias_mode(),
            dtype=dtype,
            activation=_activation(cell.activation),
            recurrent_activation=_activation(getattr(cell, "recurrent_activation", None)),
            recurrent_dropout=_rate(cell.recurrent_dropout),
        )

    def get_config(self) -> dict[str, Any]:
        """Keras's config of the layer plus this package's ``implementation`` and ``precision``, and ``use_cudnn``
        (LSTM, GRU; Keras does not save it)."""
        config = super().get_config()
        config.update(implementation=self.implementation, precision=self.precision)
        if self._mode != "rnn_tanh":
            config.update(use_cudnn=self.cudnn_requested)
        return config

    def _cudnn_or_refuse(self, config: RNNConfig, xs: Any, masked: bool) -> str | None:
        """The implementation for ``use_cudnn=True``, Keras's: cuDNN when it can run this call; where it cannot, Keras's
        LSTM raises a ValueError naming ``use_cudnn``, and Keras's GRU (on JAX) runs its own loop off a CUDA device,
        as ours then runs what ``use_cudnn="auto"`` would."""
        # Keras's cuDNN path refuses recurrent dropout training or not: asked as a call that applies it.
        recurrent_dropout = bool(_rate(self.cell.recurrent_dropout))
        platform, reason = ops.where_and_why_not("cudnn", config, xs, masked, recurrent_dropout)
        if reason is None:
            return "cudnn"
        if self._mode != "lstm" and platform != "cuda":
            return None
        raise ValueError(
            f"use_cudnn=True was specified, but cuDNN cannot run this call: it needs {reason}. Pass "
            f"use_cudnn='auto' to run the best implementation available (as Keras's {type(self).__name__} says)"
        )

    # ------------------------------------------------------------------------------------------------- checks

    def build(self, sequences_shape: Any, initial_state_shape: Any = None) -> None:
        """Keras's ``build``, after checking that the inputs' shape is (batch, timesteps, features)."""
        _checks.x_shape_dims(tuple(sequences_shape), _argument_names(self._mode))
        super().build(sequences_shape, initial_state_shape)

    def _check_call(self, sequences: Any, initial_state: Any, mask: Any) -> None:
        """Checks what the caller passed, named as Keras names it: ``inputs``, ``initial_state[i]``, ``mask``. The
        list structure of ``initial_state`` and the mask (Keras's own arguments) here, the arrays by
        ``_checks.check_inputs`` in Keras's words."""
        names = _argument_names(self._mode)
        steps, batch, features = _checks.x_dims(sequences, names)
        kernel = getattr(self.cell, "kernel", None)
        config = self._rnn_config(features if kernel is None else kernel.shape[0], jnp.dtype(self.cell.compute_dtype))
        if initial_state is None:  # Keras starts from zeros
            _checks.x_dims(sequences, names, config.input_size)
        else:
            states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
            parts = ("h", "c") if config.has_cell_state else ("h",)
            if len(states) != len(parts):
                raise ValueError(
                    f"initial_state has {len(states)} tensor{'s' if len(states) != 1 else ''}; "
                    f"expected {len(parts)}: [{', '.join(parts)}], each (batch, units) = ({batch}, "
                    f"{self.cell.units})"
                )
            for i, state in enumerate(states):
                _shape(state, f"initial_state[{i}]")
            h0, c0 = [jnp.asarray(state) for state in states] + [None] * (2 - len(states))
            _checks.check_inputs(None, sequences, h0, c0, config, names=names)
        if mask is not None:
            if isinstance(mask, (list, tuple)):
                mask = mask[0]
            got = _shape(mask, "mask")
            if got != (batch, steps):
                raise ValueError(f"mask has shape {got}; expected ({batch}, {steps}) = (batch, timesteps) of inputs")
            reason = ops.refuses_lengths(self.implementation, config)
            if reason:  # rnn() would blame seq_lengths, which the caller never passed
                raise ValueError(
                    f"mask was given, but implementation={self.implementation!r} has no per-sequence "
                    f"lengths, which a masked call runs on (it needs {reason}); use implementation=None "
                    f"(the best one that can) or 'xla'"
                )

    def call(self, sequences: Any, initial_state: Any = None, mask: Any = None, training: bool = False) -> Any:
        """inputs [batch, timesteps, features]; ``initial_state`` [h, c] (LSTM) or [h], each [batch, units];
        ``mask`` [batch, timesteps]. Returns what Keras's layer returns: the outputs [batch, timesteps, units]
        (``return_sequences``) or the last output [batch, units], followed by the final states with
        ``return_state``. The compute dtype is the layer's."""
        self._check_call(sequences, initial_state, mask)
        return super().call(sequences, initial_state=initial_state, mask=mask, training=training)

    # ---------------------------------------------------------------------------------------------- the loop

    def inner_loop(self, sequences: Any, initial_state: Sequence[Any], mask: Any, training: bool = False):
        """Keras's ``keras.layers.RNN.inner_loop`` contract: sequences [B, T, I], initial_state the list of [B, H]
        states, mask [B, T] or None. Returns (last output [B, H], outputs [B, T, H] in the order the steps were read,
        final states list)."""
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        cell = self.cell
        dtype = jnp.dtype(cell.compute_dtype)
        x = jnp.asarray(sequences).astype(dtype)
        kernel = jnp.asarray(cell.kernel.value, dtype)
        training = bool(training)  # Keras passes a Python bool or None
        # Keras's SimpleRNN, unlike its LSTM and GRU, applies a rate of 1: everything dropped (zero masks).
        drops_all = isinstance(self, keras.layers.SimpleRNN) and training
        # Keras's input dropout: one mask per sequence, every step.
        if (training and _rate(cell.dropout)) or (drops_all and cell.dropout >= 1):
            masks = cell.get_dropout_mask(sequences[:, 0, :])  # drawn by Keras's call, from the cell's seed generator
            if isinstance(masks, (list, tuple)):  # implementation=1: one per gate, in Keras's gate order
                x = jnp.concatenate([x * jnp.asarray(mask, dtype)[:, None, :] for mask in masks], axis=-1)
                kernel = _block_diagonal(kernel, len(masks))
            else:
                x = x * jnp.asarray(masks, dtype)[:, None, :]
        config = self._rnn_config(x.shape[-1], dtype)
        recurrent = jnp.asarray(cell.recurrent_kernel.value, dtype)
        if drops_all and cell.recurrent_dropout >= 1:  # h_{t-1} times zeros: no recurrent product at all
            recurrent = recurrent * 0
        params = _pieces(
            kernel,
            recurrent,
            None if cell.bias is None else jnp.asarray(cell.bias.value, dtype),
            config,
        )
        recurrent_dropout = training and config.recurrent_dropout > 0
        key = cell.seed_generator.next() if recurrent_dropout else None  # a raw uint32[2] JAX key, Keras's seeds
        states = [jnp.asarray(state, dtype)[None] for state in initial_state]  # [1, B, H]: one layer, one direction
        h0, c0 = states[0], (states[1] if config.has_cell_state else None)
        xs = jnp.swapaxes(x, 0, 1)  # time-major [T, B, I]
        if self.go_backwards:
            xs = xs[::-1]
        implementation = self.implementation
        if self.cudnn_requested is True:
            implementation = self._cudnn_or_refuse(config, xs, mask is not None)
        run = dict(
            implementation=implementation, precision=self.precision, is_training=recurrent_dropout, dropout_key=key
        )
        if mask is None:
            outputs, h_n, c_n = ops.run_checked(params, xs, h0, c0, config, **run)
        else:
            valid = jnp.swapaxes(jnp.asarray(mask).astype(bool), 0, 1)  # [T, B], in reading order
            if self.go_backwards:
                valid = valid[::-1]
            rank = jnp.cumsum(valid, axis=0, dtype=jnp.int32) - 1  # index of the latest valid step among the valid
            order = jnp.argsort(~valid, axis=0, stable=True)  # each sequence's valid steps first, in order
            packed = jnp.take_along_axis(xs, order[..., None], axis=0)
            y, h_n, c_n = ops.run_checked(params, packed, h0, c0, config, seq_lengths=rank[-1] + 1, **run)
            # A masked step keeps the state: its output is the latest valid step's, before the first one h0 (Keras's
            # scan) or zeros (Keras's unrolled loop, which carries its previous output and has no zero_output_for_mask).
            latest = jnp.take_along_axis(y, jnp.maximum(rank, 0)[..., None], axis=0)
            outputs = jnp.where((rank >= 0)[..., None], latest, jnp.zeros((), dtype) if self.unroll else h0)
            if self.zero_output_for_mask and not self.unroll:
                outputs = jnp.where(valid[..., None], outputs, jnp.zeros((), dtype))
        finals = [h_n[0], c_n[0]] if config.has_cell_state else [h_n[0]]
        return outputs[-1], jnp.swapaxes(outputs, 0, 1), finals


@keras.saving.register_keras_serializable(package="jax_cudnn_rnn")
class LSTM(_Fused, keras.layers.LSTM):
    """``keras.layers.LSTM`` on the fused kernels: the same arguments, variables and results.

    ``LSTM(units, activation="tanh", recurrent_activation="sigmoid", use_bias=True, ..., dropout=0.0,
    recurrent_dropout=0.0, return_sequences=False, return_state=False, go_backwards=False, stateful=False, ...,
    implementation=None, precision=None)``; called as ``layer(inputs [B, T, I], initial_state=[h, c], mask=[B, T],
    training=...)``. See the module docstring for what runs where.
    """

    _mode = "lstm"


@keras.saving.register_keras_serializable(package="jax_cudnn_rnn")
class GRU(_Fused, keras.layers.GRU):
    """``keras.layers.GRU`` on the fused kernels: the same arguments, variables (``bias`` [2, 3H]: input row, recurrent
    row; [3H] with ``reset_after=False``, which runs on the xla implementation) and results. Called as
    ``layer(inputs, initial_state=[h], mask=...)``.
    """

    @property
    def _mode(self) -> str:
        return "gru" if self.cell.reset_after else "gru_reset_before"

    def _bias_mode(self) -> str:
        if not self.cell.use_bias:
            return "none"
        return "double" if self.cell.reset_after else "single_input"  # bias [2, 3H], or [3H]


@keras.saving.register_keras_serializable(package="jax_cudnn_rnn")
class SimpleRNN(_Fused, keras.layers.SimpleRNN):
    """``keras.layers.SimpleRNN``: with ``activation="tanh"`` or ``"relu"`` on the fused kernels (cuDNN's RNN_TANH,
    RNN_RELU), with any other on the xla implementation; the same arguments, variables and results. Called as
    ``layer(inputs, initial_state=[h], mask=...)``."""

    _keras_use_cudnn: ClassVar[bool] = False
    _mode = "rnn_tanh"  # RNNConfig makes activation="relu" mode "rnn_relu" (cuDNN's RNN_RELU)
