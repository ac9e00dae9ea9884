"""Equinox modules on the fused kernels: ``LSTM``, ``GRU`` and ``RNN`` (``eqx.Module``).

A module holds one ``RNNParams`` (the opaque buffer, the only array leaf; its ``RNNConfig`` static), so ``eqx.filter``,
``eqx.filter_jit``, ``eqx.filter_grad``, optax (whose states mirror the ``RNNParams``), ``eqx.tree_serialise_leaves``
and the Orbax handler of ``jax_cudnn_rnn.checkpoint`` all see it as they see any parameter.

Called unbatched, as Equinox's layers are: ``y, state = model(x, state=None)`` with x [T, input_size] and y
[T, D*hidden_size]; ``jax.vmap(model)`` over a batch runs ONE fused call for the whole batch (``rnn``'s vmap rule
folds the mapped axis into the kernel's batch). State: ``(h, c)`` for an LSTM, ``h`` otherwise, each
[num_layers*D, hidden_size] (index layer*D + direction), zeros when None.

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
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn import _checks, interop, ops
from jax_cudnn_rnn.config import RNNConfig, check_int
from jax_cudnn_rnn.params import RNNParams

__all__ = ["GRU", "LSTM", "RNN"]


def _make_config(
    mode: str,
    input_size: Any,
    hidden_size: Any,
    num_layers: Any,
    bidirectional: Any,
    use_bias: Any,
    dropout: Any,
    dtype: Any,
    recurrent_dropout: Any = 0.0,
) -> RNNConfig:
    """The config, after checks that name this module's arguments (RNNConfig's own would say num_units, direction)."""
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise TypeError(f"bidirectional must be a bool, got {type(bidirectional).__name__} {bidirectional!r}")
    if not isinstance(use_bias, (bool, np.bool_)):
        raise TypeError(f"use_bias must be a bool, got {type(use_bias).__name__} {use_bias!r}")
    for name, rate in (("dropout", dropout), ("recurrent_dropout", recurrent_dropout)):
        if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating)) or not 0 <= rate < 1:
            raise ValueError(f"{name} must be a float in [0, 1), got {rate!r}")
    return RNNConfig(
        mode=mode,
        num_layers=check_int("num_layers", num_layers, 1),
        num_units=check_int("hidden_size", hidden_size, 1),
        input_size=check_int("input_size", input_size, 1),
        direction="bidirectional" if bidirectional else "unidirectional",
        bias_mode="double" if use_bias else "none",
        dropout=float(dropout),
        dtype=jnp.float32 if dtype is None else dtype,
        recurrent_dropout=float(recurrent_dropout),
    )


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

    params: RNNParams
    inference: bool
    implementation: str | None = eqx.field(static=True)
    precision: str | None = eqx.field(static=True)

    def _init(self, config: RNNConfig, inference: bool, implementation: str | None, precision: Any, key: Any) -> None:
        if key is None:
            raise ValueError("key is None; pass a JAX PRNG key (jax.random.key(seed)) to initialise the parameters")
        self.params = RNNParams.init(key, config)
        self.inference = inference
        self.implementation = implementation
        self.precision = precision

    @property
    def config(self) -> RNNConfig:
        """The network: mode, sizes, direction, dropout, dtype."""
        return self.params.config

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
        if isinstance(seq_length, (int, np.integer)) and not isinstance(seq_length, bool):
            seq_length = jnp.asarray(seq_length, jnp.int32)
        if getattr(seq_length, "dtype", None) is not None:
            if not jnp.issubdtype(seq_length.dtype, jnp.integer):  # a cast would truncate 2.7 to 2 without a word
                raise TypeError(f"seq_length has dtype {np.dtype(seq_length.dtype).name}; expected an integer")
            seq_length = seq_length.astype(jnp.int32)
        _checks.check_inputs(None, x, h0, c0, config, seq_length, names=_argument_names(config.has_cell_state))
        reason = None if seq_length is None else ops.refuses_lengths(self.implementation, config)
        if reason:  # rnn() would blame seq_lengths, which the caller never passed
            raise ValueError(
                f"seq_length was given, but implementation={self.implementation!r} has no per-sequence "
                f"lengths (it needs {reason}); use implementation=None (the best one that can) or 'xla'"
            )
        lengths = None if seq_length is None else jnp.reshape(seq_length, (1,))
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
        y, h_n, c_n = ops.rnn(
            self.params,
            x[:, None],
            h0[:, None],
            None if c0 is None else c0[:, None],
            seq_lengths=lengths,
            is_training=dropout_applies,
            dropout_key=key if dropout_applies else None,
            implementation=self.implementation,
            precision=self.precision,
        )
        final = (h_n[:, 0], c_n[:, 0]) if config.has_cell_state else h_n[:, 0]
        return y[:, 0], final


class _FromCells(_FusedRNN):
    """``from_cells``/``to_cells`` for the modes Equinox has cells for."""

    _mode = ""

    def to_cells(self) -> list[list[Any]]:
        """``cells[layer][direction]`` of ``eqx.nn.LSTMCell`` / ``GRUCell`` computing what this module computes (LSTM's
        two biases summed into the cell's one; GRU's kept apart as ``bias`` and ``bias_n``): ``interop.
        canonical_to_equinox``."""
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
        the cells'. Errors name the cell and field that do not fit (``interop.equinox_to_canonical``)."""
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
        config = _make_config(
            cls._mode,
            first.input_size,
            first.hidden_size,
            len(cells),
            len(cells[0]) == 2,
            bool(first.use_bias),
            dropout,
            np.dtype(first.weight_ih.dtype),
            recurrent_dropout,
        )
        weights, biases = interop.equinox_to_canonical(cells, config)
        module = cls(
            config.input_size,
            config.num_units,
            num_layers=config.num_layers,
            bidirectional=config.num_directions == 2,
            use_bias=config.bias_mode != "none",
            dropout=config.dropout,
            recurrent_dropout=config.recurrent_dropout,
            inference=inference,
            dtype=config.dtype,
            implementation=implementation,
            precision=precision,
            key=jax.random.key(0),
        )  # the key only fills what tree_at replaces
        return eqx.tree_at(lambda m: m.params, module, RNNParams.from_canonical(weights, biases, config))


class LSTM(_FromCells):
    """A stacked LSTM: ``LSTM(input_size, hidden_size, *, num_layers=1, bidirectional=False, use_bias=True,
    dropout=0.0, inference=False, dtype=None, implementation=None, precision=None, recurrent_dropout=0.0, key)``.

    Weights and biases from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) like ``eqx.nn.LSTMCell``; dtype float32
    unless given (float16, bfloat16, float64 too). ``implementation`` and ``precision`` are ``rnn``'s. Call:
    ``y, (h, c) = model(x, state=None, *, seq_length=None, key=None)``, see ``__call__``.
    """

    _mode = "lstm"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        use_bias: bool = True,
        dropout: float = 0.0,
        inference: bool = False,
        dtype: Any = None,
        implementation: str | None = None,
        precision: Any = None,
        recurrent_dropout: float = 0.0,
        key: Any,
    ):
        self._init(
            _make_config(
                "lstm", input_size, hidden_size, num_layers, bidirectional, use_bias, dropout, dtype, recurrent_dropout
            ),
            inference,
            implementation,
            precision,
            key,
        )


class GRU(_FromCells):
    """A stacked GRU (cuDNN's: ``eqx.nn.GRUCell``'s equations), arguments as ``LSTM``'s; call:
    ``y, h = model(x, state=None, *, seq_length=None, key=None)``."""

    _mode = "gru"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        num_layers: int = 1,
        bidirectional: bool = False,
        use_bias: bool = True,
        dropout: float = 0.0,
        inference: bool = False,
        dtype: Any = None,
        implementation: str | None = None,
        precision: Any = None,
        recurrent_dropout: float = 0.0,
        key: Any,
    ):
        self._init(
            _make_config(
                "gru", input_size, hidden_size, num_layers, bidirectional, use_bias, dropout, dtype, recurrent_dropout
            ),
            inference,
            implementation,
            precision,
            key,
        )


class RNN(_FusedRNN):
    """A stacked vanilla RNN, h' = tanh or relu(W x + b_W + R h + b_R) (PyTorch's ``nn.RNN``): arguments as
    ``LSTM``'s plus ``nonlinearity`` ("tanh" or "relu"); call: ``y, h = model(x, state=None, ...)``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        nonlinearity: str = "tanh",
        num_layers: int = 1,
        bidirectional: bool = False,
        use_bias: bool = True,
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
        self._init(
            _make_config(
                "rnn_" + nonlinearity,
                input_size,
                hidden_size,
                num_layers,
                bidirectional,
                use_bias,
                dropout,
                dtype,
                recurrent_dropout,
            ),
            inference,
            implementation,
            precision,
            key,
        )
