"""A drop-in for ``jax.experimental.rnn``: ``lstm``, ``lstm_ref``, ``init_lstm_weight``, ``unpack_lstm_weights``,
``swap_lstm_gates`` and ``get_num_params_in_lstm`` with its signatures, batch-major layout and flat weights, running
on every platform through ``jax_cudnn_rnn.rnn`` (cuDNN on a GPU, oneDNN or pure JAX on the CPU, where
``jax.experimental.rnn.lstm`` fails).

Migration is the import line::

    from jax.experimental import rnn      ->      from jax_cudnn_rnn import compat as rnn

The flat weights need no conversion: ``jax.experimental.rnn``'s layout (per pseudo-layer layer*D + direction, W_ih
[4H, in] then W_hh [4H, H] for all pseudo-layers, then b_ih [4H] and b_hh [4H] for all, gates i, f, g, o) is cuDNN's
weight space for a double-bias, linear-input LSTM, which is this library's opaque buffer for
``RNNConfig("lstm", num_layers, hidden_size, input_size, direction)``: the same bytes (tests/frontends/test_compat.py
checks them against ``jax.experimental.rnn.unpack_lstm_weights``). ``init_lstm_weight`` draws the same numbers for the
same key.

Where this differs, and why:

* ``dropout``: ``jax.experimental.rnn.lstm`` gives it to a cuDNN dropout descriptor set up without random-number
  states (``cudnnSetDropoutDescriptor(..., states=NULL, ..., seed=123)``) while always running cuDNN's training mode,
  and its reference ``lstm_ref`` refuses any dropout ("we cannot determine CUDNN dropout mask"): no documented or
  reproducible meaning, no key and no training switch. Here ``dropout`` is the rate of ``rnn``'s inter-layer dropout
  (docs/architecture.md: layer l's output is multiplied by ``bernoulli(fold_in(key, l), 1 - dropout) /
  (1 - dropout)`` before layer l + 1), applied when an extra keyword argument ``dropout_key`` is given; with
  ``num_layers > 1``, ``dropout > 0`` and no key it is a ValueError rather than a silent no-op. With one layer there is
  nothing between layers, so any rate does nothing, as in cuDNN.
* ``precision``: as there, None lets float32 matmuls use TF32 on a GPU unless ``jax_default_matmul_precision`` says
  otherwise (``rnn()`` on its own is strict by default); "highest"/``Precision.HIGHEST`` keeps them strict. A pair
  ``(a, b)`` uses ``a``, as cuDNN takes one setting. ``Precision.DEFAULT`` means TF32 here; there it is an error.
* Sequence lengths may be 0 (an empty sequence: zero outputs, ``h_n = h_0``); every dtype ``rnn`` supports runs, x,
  h_0, c_0 and weights all in x's dtype.
* Extra keyword-only arguments: ``dropout_key`` (above) and ``implementation`` (``rnn``'s).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn import _checks, layout, ops
from jax_cudnn_rnn.config import RNNConfig, check_int

__all__ = ["get_num_params_in_lstm", "init_lstm_weight", "lstm", "lstm_ref", "swap_lstm_gates", "unpack_lstm_weights"]


def _config(
    input_size: Any,
    hidden_size: Any,
    num_layers: Any,
    bidirectional: Any,
    dtype: Any = np.float32,
    dropout: float = 0.0,
) -> RNNConfig:
    """The network ``jax.experimental.rnn``'s arguments describe, after checks that name them."""
    if not isinstance(bidirectional, (bool, np.bool_)) and bidirectional not in (0, 1):
        raise TypeError(f"bidirectional must be a bool, got {type(bidirectional).__name__} {bidirectional!r}")
    return RNNConfig(
        mode="lstm",
        num_layers=check_int("num_layers", num_layers, 1),
        num_units=check_int("hidden_size", hidden_size, 1),
        input_size=check_int("input_size", input_size, 1),
        direction="bidirectional" if bidirectional else "unidirectional",
        dtype=dtype,
        dropout=dropout,
    )


def _argument_names(config: RNNConfig) -> _checks.ArgumentNames:
    """``jax.experimental.rnn.lstm``'s words for ``_checks.check_inputs``: batch-major x [batch, max_seq_length,
    input_size], h_0 and c_0 [num_directions * num_layers, batch, hidden_size], the flat ``weights`` sized by
    ``get_num_params_in_lstm``, everything in x's dtype."""
    size_call = (
        f"get_num_params_in_lstm(input_size={config.input_size}, hidden_size={config.num_units}, "
        f"num_layers={config.num_layers}, bidirectional={config.num_directions == 2})"
    )
    return _checks.ArgumentNames(
        params="weights",
        x="x",
        h0="h_0",
        c0="c_0",
        input_size="input_size",
        params_size=size_call,
        dtype="x's dtype",
        axes=("max_seq_length", "batch", "input_size"),
        state_axes=("num_directions * num_layers", "hidden_size"),
        batch_major=True,
        caller="lstm()",
        layout_fix="pass jnp.swapaxes(x, 0, 1)",
    )


def get_num_params_in_lstm(input_size: int, hidden_size: int, num_layers: int, bidirectional: bool) -> int:
    """The number of elements of the flat weights: ``params_size`` of the matching config."""
    return layout.params_size(_config(input_size, hidden_size, num_layers, bidirectional))


def init_lstm_weight(rng: Any, input_size: int, hidden_size: int, num_layers: int, bidirectional: bool) -> jax.Array:
    """Flat float32 weights [get_num_params_in_lstm(...)] from U(-k, k), k = sqrt(1/hidden_size): the numbers
    ``jax.experimental.rnn.init_lstm_weight`` draws for the same key (the same call)."""
    count = get_num_params_in_lstm(input_size, hidden_size, num_layers, bidirectional)
    k = np.sqrt(1.0 / hidden_size)
    return jax.random.uniform(rng, shape=(count,), dtype=jnp.float32, minval=-k, maxval=k)


Unpacked = tuple[dict[int, jax.Array], dict[int, jax.Array], dict[int, jax.Array], dict[int, jax.Array]]


def unpack_lstm_weights(
    weights: Any, input_size: int, hidden_size: int, num_layers: int, bidirectional: bool
) -> Unpacked:
    """(W_ih, W_hh, b_ih, b_hh), each a dict keyed by pseudo-layer (layer * D + direction): W_ih[p] [4H, in_p] (the
    gates i, f, g, o stacked, PyTorch's ``weight_ih``), W_hh[p] [4H, H], b_ih[p] and b_hh[p] [4H]."""
    if getattr(weights, "shape", None) is None or not hasattr(weights, "dtype"):
        raise TypeError(f"weights must be an array, got {type(weights).__name__}")
    config = _config(input_size, hidden_size, num_layers, bidirectional, dtype=_dtype_of(weights, "weights"))
    _checks.check_params(weights, config, _argument_names(config))
    matrices, biases = layout.params_to_canonical(weights, config)
    result: Unpacked = ({}, {}, {}, {})
    for pseudo in range(config.num_layers * config.num_directions):
        w, b = matrices[8 * pseudo : 8 * pseudo + 8], biases[8 * pseudo : 8 * pseudo + 8]
        result[0][pseudo] = jnp.concatenate(w[:4])
        result[1][pseudo] = jnp.concatenate(w[4:])
        result[2][pseudo] = jnp.concatenate(b[:4])
        result[3][pseudo] = jnp.concatenate(b[4:])
    return result


def _dtype_of(value: Any, argument: str) -> np.dtype:
    dtype = np.dtype(value.dtype)
    supported = ("float16", "bfloat16", "float32", "float64")
    if dtype.name not in supported:
        raise TypeError(f"{argument} has dtype {dtype.name}; expected one of {list(supported)}")
    return dtype


def _precision(precision: Any) -> Any:
    """``rnn``'s precision for ``jax.experimental.rnn``'s: None means TF32 allowed unless the config says otherwise;
    of a pair, the first."""
    if precision is None:
        return None if jax.config.jax_default_matmul_precision is not None else "tensorfloat32"
    if isinstance(precision, tuple):
        if len(precision) != 2:
            raise ValueError(f"precision is {precision!r}; expected None, a str, a jax.lax.Precision or a pair")
        return precision[0]
    return precision


def lstm(
    x: Any,
    h_0: Any,
    c_0: Any,
    weights: Any,
    seq_lengths: Any,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
    precision: Any = None,
    *,
    dropout_key: Any = None,
    implementation: str | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``jax.experimental.rnn.lstm``: a stacked LSTM over a batch-major batch, on every platform.

    Args:
      x: [batch, max_seq_length, input_size]; float32 (or float16, bfloat16, float64: the dtype of everything).
      h_0, c_0: [num_directions * num_layers, batch, hidden_size] (index layer * D + direction).
      weights: flat [get_num_params_in_lstm(input_size, hidden_size, num_layers, bidirectional)], x's dtype.
      seq_lengths: int32 [batch], each in [0, max_seq_length]: outputs past a sequence's length are zero, h_n/c_n
        hold the state after its last step, the backward direction reads from its last step.
      input_size, hidden_size, num_layers: ints (static under jax.jit); bidirectional: bool.
      dropout: the inter-layer dropout rate, applied only with ``dropout_key`` (module docstring).
      precision: None (TF32 allowed on a GPU, as in jax.experimental.rnn), "highest"/"float32" (strict), "high"/
        "tensorfloat32", a ``jax.lax.Precision`` or a pair of them (the first counts).
      dropout_key: a PRNG key for the inter-layer dropout (extra, keyword only).
      implementation: ``rnn``'s (extra, keyword only): None picks the best one for the platform.

    Returns:
      (y [batch, max_seq_length, num_directions * hidden_size], h_n, c_n shaped like h_0).
    """
    if not isinstance(dropout, (bool, np.bool_, int, float, np.integer, np.floating)):
        raise TypeError(f"dropout must be a float, got {type(dropout).__name__} {dropout!r}")
    rate = float(dropout)  # a bool too: jax.experimental.rnn's own example passes dropout=False
    if not 0 <= rate < 1:
        raise ValueError(f"dropout must be a rate in [0, 1), got {dropout!r}")
    if getattr(x, "shape", None) is None or not hasattr(x, "dtype"):
        raise TypeError(f"x must be an array, got {type(x).__name__}")
    config = _config(input_size, hidden_size, num_layers, bidirectional, dtype=_dtype_of(x, "x"), dropout=rate)
    if seq_lengths is None:  # required, as in jax.experimental.rnn (check_inputs takes None for "no lengths")
        raise TypeError("seq_lengths must be an array, got NoneType")
    seq_lengths = _checks.as_lengths(seq_lengths)
    _checks.check_inputs(weights, x, h_0, c_0, config, seq_lengths, names=_argument_names(config))
    applies = rate > 0 and config.num_layers > 1
    if applies and dropout_key is None:
        raise ValueError(
            f"dropout is {dropout} between {config.num_layers} layers but dropout_key is None: "
            f"jax.experimental.rnn's dropout has no reproducible meaning (cuDNN without random states; "
            f"its lstm_ref refuses it); pass dropout_key=jax.random.key(...) for this library's "
            f"inter-layer dropout, or dropout=0.0"
        )
    y, h_n, c_n = ops.run_checked(
        weights,
        jnp.swapaxes(x, 0, 1),
        h_0,
        c_0,
        config,
        seq_lengths=seq_lengths,
        is_training=applies,
        dropout_key=dropout_key if applies else None,
        implementation=implementation,
        precision=_precision(precision),
    )
    return jnp.swapaxes(y, 0, 1), h_n, c_n


def swap_lstm_gates(weights: Any, input_size: int, hidden_size: int, num_layers: int, bidirectional: bool) -> jax.Array:
    """``jax.experimental.rnn.swap_lstm_gates``: the flat weights with the third and fourth gate of every matrix and
    bias exchanged (i, f, g, o <-> i, f, o, g: for weights written in a framework that orders the gates i, f, o, g)."""
    if getattr(weights, "shape", None) is None or not hasattr(weights, "dtype"):
        raise TypeError(f"weights must be an array, got {type(weights).__name__}")
    config = _config(input_size, hidden_size, num_layers, bidirectional, dtype=_dtype_of(weights, "weights"))
    _checks.check_params(weights, config, _argument_names(config))
    matrices, biases = layout.params_to_canonical(jnp.asarray(weights), config)
    order = (0, 1, 3, 2)
    swap = lambda tensors: [tensors[4 * (i // 4) + order[i % 4]] for i in range(len(tensors))]  # noqa: E731
    return layout.canonical_to_params(swap(matrices), swap(biases), config)


def lstm_ref(
    x: Any,
    h_0: Any,
    c_0: Any,
    W_ih: dict[int, Any],
    W_hh: dict[int, Any],
    b_ih: dict[int, Any],
    b_hh: dict[int, Any],
    seq_lengths: Any,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    dropout: float,
    bidirectional: bool,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``jax.experimental.rnn.lstm_ref``: the LSTM of ``lstm`` computed step by step (this library's "reference"
    implementation, a plain ``lax.scan`` that JAX differentiates in both modes), from the unpacked weights
    ``unpack_lstm_weights`` returns (dicts by pseudo-layer layer * D + direction: W_ih [4H, in], W_hh [4H, H], b_ih
    and b_hh [4H]). Arguments and results otherwise as ``lstm``'s; like jax's, it refuses dropout (NotImplementedError:
    no dropout mask to reproduce)."""
    if dropout != 0.0:
        raise NotImplementedError("dropout is not supported in the LSTM reference, as in jax.experimental.rnn")
    if getattr(x, "shape", None) is None or not hasattr(x, "dtype"):
        raise TypeError(f"x must be an array, got {type(x).__name__}")
    config = _config(input_size, hidden_size, num_layers, bidirectional, dtype=_dtype_of(x, "x"))
    pseudo_layers = config.num_layers * config.num_directions
    matrices, biases = [], []
    for name, given in (("W_ih", W_ih), ("W_hh", W_hh), ("b_ih", b_ih), ("b_hh", b_hh)):
        if not isinstance(given, dict) or sorted(given) != list(range(pseudo_layers)):
            keys = sorted(given) if isinstance(given, dict) else type(given).__name__
            raise ValueError(f"{name} must be a dict keyed 0..{pseudo_layers - 1} (layer * D + direction), got {keys}")
    for pseudo in range(pseudo_layers):
        for group in (W_ih, W_hh):
            matrices += list(jnp.split(jnp.asarray(group[pseudo]), 4))
        for group in (b_ih, b_hh):
            biases += list(jnp.split(jnp.asarray(group[pseudo]), 4))
    weights = layout.canonical_to_params(matrices, biases, config)
    return lstm(
        x,
        h_0,
        c_0,
        weights,
        seq_lengths,
        input_size,
        hidden_size,
        num_layers,
        0.0,
        bidirectional,
        "highest",
        implementation="reference",
    )
