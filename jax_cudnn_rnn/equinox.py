"""Equinox modules on the fused kernels: ``LSTM``, ``GRU`` and ``RNN`` (``eqx.Module``), in Equinox's language.

A module trains what Equinox's cells train, so a stack of ``eqx.nn.LSTMCell``/``GRUCell`` ported with ``from_cells``
trains as it did: one bias per gate (the LSTM's ``bias``), the GRU's ``bias`` for r, z and n on the input side and
``bias_n`` inside r * (...), none with ``use_bias=False``; every tensor from U(-1/sqrt(hidden), 1/sqrt(hidden)) as
Equinox initialises its cells. cuDNN's two biases per gate are one argument away (``bias_mode="double"``).

The parameters are the named canonical tensors, ``model.rnn_params["layer_0"]["forward"]["w_input"]["i"]`` [H, I]
(the array leaves; jax_cudnn_rnn/_parameterization.py says which biases a module has), so ``eqx.filter``,
``eqx.filter_jit``, ``eqx.filter_grad``, optax (weight-decay masks by ``ndim`` included), ``eqx.tree_serialise_leaves``
and a plain Orbax checkpointer all see weight matrices and biases; ``model.params`` packs them into the opaque buffer
with its config (the ``RNNParams`` ``rnn`` runs).

Called unbatched, as Equinox's layers are: ``y, state = model(x, state=None)`` with x [T, input_size] and y
[T, D*hidden_size]; ``jax.vmap(model)`` over a batch runs ONE fused call for the whole batch (``rnn``'s vmap rule
folds the mapped axis into the kernel's batch). State: ``(h, c)`` for an LSTM (``eqx.nn.LSTMCell``'s order), ``h``
otherwise, each [num_layers*D, hidden_size] (index layer*D + direction), zeros when None.

``LSTM.from_cells`` / ``GRU.from_cells`` take a stack of ``eqx.nn.LSTMCell`` / ``GRUCell`` (``cells[layer]
[direction]``) and ``to_cells`` gives one back, through ``interop``'s converters (Equinox has no vanilla RNN cell).
Inter-layer dropout (``dropout``, between layers, with ``num_layers > 1``) applies unless ``inference`` is True, from
the ``key`` passed at call time, like ``eqx.nn.Dropout``; ``eqx.nn.inference_mode(model)`` switches it off. So does
``recurrent_dropout`` (Keras's recurrent dropout, ``RNNConfig.recurrent_dropout``: one mask per gate on h_{t-1} for
the whole sequence), from the same key; it runs on the xla implementation. Under
``jax.vmap`` pass one key per sequence (``jax.vmap(model)(xs, key=jax.random.split(key, B))``), or every sequence
gets the same masks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn import _checks, interop, layout, ops
from jax_cudnn_rnn._parameterization import Parameterization, library_biases
from jax_cudnn_rnn.config import RNNConfig, check_int
from jax_cudnn_rnn.params import RNNParams

__all__ = ["GRU", "LSTM", "RNN"]


def _parameters(
    mode: str,
    input_size: Any,
    hidden_size: Any,
    num_layers: Any,
    bidirectional: Any,
    use_bias: Any,
    dropout: Any,
    dtype: Any,
    recurrent_dropout: Any = 0.0,
    bias_mode: str | None = None,
) -> Parameterization:
    """What the module trains: Equinox's cells' biases (``bias_mode`` None) or cuDNN's ``bias_mode``, after checks
    that name this module's arguments (RNNConfig's own would say num_units, direction)."""
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise TypeError(f"bidirectional must be a bool, got {type(bidirectional).__name__} {bidirectional!r}")
    if not isinstance(use_bias, (bool, np.bool_)):
        raise TypeError(f"use_bias must be a bool, got {type(use_bias).__name__} {use_bias!r}")
    for name, rate in (("dropout", dropout), ("recurrent_dropout", recurrent_dropout)):
        if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating)) or not 0 <= rate < 1:
            raise ValueError(f"{name} must be a float in [0, 1), got {rate!r}")
    space, held = library_biases("equinox", mode, bias_mode, bool(use_bias))
    config = RNNConfig(
        mode=mode,
        num_layers=check_int("num_layers", num_layers, 1),
        num_units=check_int("hidden_size", hidden_size, 1),
        input_size=check_int("input_size", input_size, 1),
        direction="bidirectional" if bidirectional else "unidirectional",
        bias_mode=space,
        dropout=float(dropout),
        dtype=jnp.float32 if dtype is None else dtype,
        recurrent_dropout=float(recurrent_dropout),
    )
    return Parameterization(config, held)


def _argument_names(has_cell_state: bool) -> _checks.ArgumentNames:
    """The words the modules' errors use (``_checks.check_inputs``): unbatched x [time, input_size], the state as
    ``state`` (``state[0] (h)`` and ``state[1] (c)`` for an LSTM) without a batch axis, ``seq_length`` one length."""
    h0, c0 = ("state[0] (h)", "state[1] (c)") if has_cell_state else ("state", "state")
    return _checks.ArgumentNames(
        x="x",
        h0=h0,
        c0=c0,
        seq_lengths="seq_length",
        input_size="input_size",
        dtype="the module's dtype",
        axes=("time", None, "input_size"),
        state_axes=("num_layers*num_directions", "hidden_size"),
        caller="The module",
        layout_fix="unbatched: jax.vmap the model over a batch",
    )


class _FusedRNN(eqx.Module):
    """What the three modules share: the parameters, the call and its checks."""

    rnn_params: dict[str, Any]
    inference: bool
    parameters: Parameterization = eqx.field(static=True)
    implementation: str | None = eqx.field(static=True)
    precision: str | None = eqx.field(static=True)

    def _init(
        self, parameters: Parameterization, inference: bool, implementation: str | None, precision: Any, key: Any
    ) -> None:
        if key is None:
            raise ValueError("key is None; pass a JAX PRNG key (jax.random.key(seed)) to initialise the parameters")
        self.parameters = parameters
        self.rnn_params = parameters.from_buffer(layout.init_params(key, parameters.config))
        self.inference = inference
        self.implementation = implementation
        self.precision = precision

    @property
    def config(self) -> RNNConfig:
        """The network the kernels run: mode, sizes, direction, dropout, dtype, the weight space's bias_mode."""
        return self.parameters.config

    @property
    def params(self) -> RNNParams:
        """The parameters packed into the opaque buffer (the held biases zero), with its config (what ``rnn``
        runs)."""
        return RNNParams(self.parameters.pack(self.rnn_params, "rnn_params"), self.config)

    def _split_state(self, state: Any) -> tuple[Any, Any]:
        """(h0, c0 or None) from ``state`` as the caller passed it: the pair ``(h, c)`` for an LSTM, ``h`` otherwise;
        their shapes and dtypes are ``_checks.check_inputs``' to check."""
        config = self.config
        if not config.has_cell_state:
            return state, None
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            shape, meaning = (names := _argument_names(True)).state(config.state_shape(1), names.state_axes[1])
            got = f"a {type(state).__name__}" + (f" of {len(state)}" if isinstance(state, (tuple, list)) else "")
            raise TypeError(f"state must be a tuple (h, c) for an LSTM, each {shape} = {meaning}; got {got}")
        return state[0], state[1]

    def __call__(self, x: Any, state: Any = None, *, seq_length: Any = None, key: Any = None) -> tuple[Any, Any]:
        """Runs the network over one sequence.

        Args:
          x: [T, input_size], the module's dtype.
          state: the initial state, ``(h, c)`` for an LSTM, ``h`` otherwise, each [num_layers*D, hidden_size] in the
            module's dtype; zeros when None.
          seq_length: optional int scalar in [0, T]: steps at and after it are padding (zero outputs; the final
            state is the one after the last valid step, and the backward direction reads from step seq_length - 1),
            ``rnn``'s ``seq_lengths`` for one sequence.
          key: a PRNG key for dropout; needed only when it applies (``dropout > 0`` with ``num_layers > 1``, or
            ``recurrent_dropout > 0``; not ``inference``).

        Returns:
          (y [T, D*hidden_size], final state shaped like ``state``).
        """
        config = self.config
        if state is None:
            zeros = jnp.zeros(config.state_shape(1)[::2], config.dtype)
            state = (zeros, jnp.zeros_like(zeros)) if config.has_cell_state else zeros
        h0, c0 = self._split_state(state)
        seq_length = _checks.as_lengths(seq_length)
        _checks.check_inputs(None, x, h0, c0, config, seq_length, names=_argument_names(config.has_cell_state))
        reason = None if seq_length is None else ops.refuses_lengths(self.implementation, config)
        if reason:  # rnn() would blame seq_lengths, which the caller never passed
            raise ValueError(
                f"seq_length was given, but implementation={self.implementation!r} has no per-sequence "
                f"lengths (it needs {reason}); use implementation=None (the best one that can) or 'xla'"
            )
        lengths = None if seq_length is None else jnp.reshape(jnp.asarray(seq_length, jnp.int32), (1,))
        between = config.dropout > 0 and config.num_layers > 1
        dropout_applies = not self.inference and (between or config.recurrent_dropout > 0)
        if dropout_applies and key is None:
            which = (
                f"dropout={config.dropout} between the {config.num_layers} layers"
                if between
                else f"recurrent_dropout={config.recurrent_dropout}"
            )
            raise ValueError(
                f"key is None; {which} needs a PRNG key when the module is not in inference mode (or use "
                f"eqx.nn.inference_mode)"
            )
        y, h_n, c_n = ops.run_checked(
            self.parameters.pieces(self.rnn_params, "rnn_params"),
            x[:, None],
            h0[:, None],
            None if c0 is None else c0[:, None],
            config,
            seq_lengths=lengths,
            is_training=dropout_applies,
            dropout_key=key if dropout_applies else None,
            implementation=self.implementation,
            precision=self.precision,
        )
        final = (h_n[:, 0], c_n[:, 0]) if config.has_cell_state else h_n[:, 0]
        return y[:, 0], final


class _FromCells(_FusedRNN):
    """``from_cells``/``to_cells`` and the constructor of the modes Equinox has cells for (``_mode``)."""

    _mode: ClassVar[str] = ""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        use_bias: bool = True,
        bias_mode: str | None = None,
        dropout: float = 0.0,
        inference: bool = False,
        dtype: Any = None,
        implementation: str | None = None,
        precision: Any = None,
        recurrent_dropout: float = 0.0,
        key: Any,
    ):
        parameters = _parameters(
            self._mode,
            input_size,
            hidden_size,
            num_layers,
            bidirectional,
            use_bias,
            dropout,
            dtype,
            recurrent_dropout,
            bias_mode,
        )
        self._init(parameters, inference, implementation, precision, key)

    def to_cells(self) -> list[list[Any]]:
        """``cells[layer][direction]`` of ``eqx.nn.LSTMCell`` / ``GRUCell`` computing what this module computes (an
        LSTM's biases summed into the cell's one; a GRU's input side as ``bias`` and n's recurrent bias as ``bias_n``):
        ``interop.canonical_to_equinox``."""
        weights, biases = self.params.to_canonical()
        return interop.canonical_to_equinox(weights, biases, self.config)

    @classmethod
    def from_cells(
        cls,
        cells: Sequence[Sequence[Any]],
        *,
        dropout: float = 0.0,
        inference: bool = False,
        implementation: str | None = None,
        precision: Any = None,
        recurrent_dropout: float = 0.0,
    ):
        """A module holding the weights of ``cells[layer][direction]`` (``eqx.nn.LSTMCell`` for ``LSTM``,
        ``eqx.nn.GRUCell`` for ``GRU``; one direction, or [forward, backward]); sizes, ``use_bias`` and dtype are
        the cells', and it trains what they train. Errors name the cell and field that do not fit
        (``interop.equinox_to_canonical``)."""
        if (
            isinstance(cells, (str, bytes))
            or not isinstance(cells, Sequence)
            or not cells
            or not isinstance(cells[0], Sequence)
            or not cells[0]
        ):
            raise TypeError(
                f"cells must be a non-empty list of lists cells[layer][direction], got {type(cells).__name__}"
            )
        first = cells[0][0]
        if not hasattr(first, "weight_ih"):
            raise TypeError(f"cells[0][0] is a {type(first).__name__}; expected an eqx.nn cell")
        module = cls(
            first.input_size,
            first.hidden_size,
            num_layers=len(cells),
            bidirectional=len(cells[0]) == 2,
            use_bias=bool(first.use_bias),
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            inference=inference,
            dtype=np.dtype(first.weight_ih.dtype),
            implementation=implementation,
            precision=precision,
            key=jax.random.key(0),
        )  # the key only fills what tree_at replaces
        weights, biases = interop.equinox_to_canonical(cells, module.config)
        tree = module.parameters.from_canonical(weights, biases)
        return eqx.tree_at(lambda m: m.rnn_params, module, tree)


class LSTM(_FromCells):
    """A stacked LSTM: ``LSTM(input_size, hidden_size, *, num_layers=1, bidirectional=False, use_bias=True,
    bias_mode=None, dropout=0.0, inference=False, dtype=None, implementation=None, precision=None,
    recurrent_dropout=0.0, key)``.

    ``eqx.nn.LSTMCell``'s parameters: one bias per gate (``bias_mode=None``; "double" trains cuDNN's two), every tensor
    from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)); dtype float32 unless given (float16, bfloat16, float64 too).
    ``implementation`` and ``precision`` are ``rnn``'s. Call: ``y, (h, c) = model(x, state=None, *, seq_length=None,
    key=None)``, see ``__call__``.
    """

    _mode: ClassVar[str] = "lstm"


class GRU(_FromCells):
    """A stacked GRU (cuDNN's: ``eqx.nn.GRUCell``'s equations), arguments as ``LSTM``'s; ``eqx.nn.GRUCell``'s
    parameters (``bias`` on the input side, ``bias_n`` inside r * (...)); call: ``y, h = model(x, state=None, *,
    seq_length=None, key=None)``."""

    _mode: ClassVar[str] = "gru"


class RNN(_FusedRNN):
    """A stacked vanilla RNN, h' = tanh or relu(W x + b + R h) (Equinox has no such cell; one bias, as its cells keep,
    ``bias_mode="double"`` PyTorch's ``nn.RNN``'s two): arguments as ``LSTM``'s plus ``nonlinearity`` ("tanh" or
    "relu"); call: ``y, h = model(x, state=None, ...)``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        nonlinearity: str = "tanh",
        num_layers: int = 1,
        bidirectional: bool = False,
        use_bias: bool = True,
        bias_mode: str | None = None,
        dropout: float = 0.0,
        inference: bool = False,
        dtype: Any = None,
        implementation: str | None = None,
        precision: Any = None,
        recurrent_dropout: float = 0.0,
        key: Any,
    ):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity is {nonlinearity!r}; expected 'tanh' or 'relu'")
        parameters = _parameters(
            "rnn_" + nonlinearity,
            input_size,
            hidden_size,
            num_layers,
            bidirectional,
            use_bias,
            dropout,
            dtype,
            recurrent_dropout,
            bias_mode,
        )
        self._init(parameters, inference, implementation, precision, key)
