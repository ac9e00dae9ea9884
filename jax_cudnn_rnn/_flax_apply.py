"""The call of the linen and NNX modules, ``nn.RNN``'s call surface over ``rnn()``: x with any number of leading batch
axes (or one unbatched sequence [time, features]), batch-major unless ``time_major``; Flax's carries in their forms
(jax_cudnn_rnn/_flax_carry.py); ``reverse`` and ``keep_order`` as ``nn.RNN`` reads and returns a sequence, padding kept
at the end (``flax.linen.recurrent.flip_sequences``); a bidirectional network's ``merge_fn``.

Every argument is checked once, as the caller passed it, by ``_checks.check_inputs`` in the module's words (more than
one batch axis: after a check of those axes here, on the arrays with them flattened into one), then runs
``ops.run_checked``, which checks nothing of them again.

Private: users meet it through the modules' ``__call__``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax.linen.recurrent import flip_sequences

from jax_cudnn_rnn import _checks, _flax_carry, _flax_core, ops
from jax_cudnn_rnn._buffer import Pieces
from jax_cudnn_rnn._flax_carry import CELL


def apply_rnn(
    params: Pieces,
    x: Any,
    *,
    compute_dtype: Any,
    time_major: bool,
    seq_lengths: Any = None,
    initial_carry: Any = None,
    default_carry: Callable[[tuple[int, ...]], Any] | None = None,
    dropout_key: Any = None,
    implementation: str | None = None,
    precision: Any = None,
    algorithm: str | None = None,
    return_carry: bool = False,
    resets: Any = None,
    max_segments: int | None = None,
    input_size_name: str = "the module's input size",
    reverse: bool = False,
    keep_order: bool = False,
    merge_fn: Callable[[Any, Any], Any] | None = None,
):
    """Runs a module's parameters (``Parameterization.pieces``) over x ([*batch, T, I], time-major [T, *batch, I], or
    one sequence [T, I]) in ``compute_dtype`` (x, the carry and the parameters are cast to it).

    ``initial_carry``: a carry in one of ``_flax_carry``'s forms; when None, ``default_carry(batch axes)`` (a module
    built from a cell: the cell's ``initialize_carry``) or zeros in the network's own form. ``seq_lengths``: integers
    [*batch] in [0, T] (any integer dtype, or a list). ``resets``: [*batch, T] ([T, *batch] when ``time_major``), bool
    or 0/1 flags. ``reverse``: the network reads each sequence from its last valid step to its first, and the outputs
    come in that order unless ``keep_order``; resets keep marking where a segment starts in time. ``merge_fn``: for a
    bidirectional network, ``merge_fn(forward outputs, backward outputs)`` instead of their concatenation.
    Returns y ([*batch, T, D*hidden], time-major like x), or ``(carry, y)`` with ``return_carry``, the carry in the
    form given (``initial_carry``'s, or the default's), as ``flax.linen.RNN`` does.
    """
    config = params.config
    compute_dtype = jnp.dtype(compute_dtype)
    if config.dtype != compute_dtype:
        params = params.astype(compute_dtype)
    run_config = params.config
    lstm = config.has_cell_state
    shape = getattr(x, "shape", None)
    if shape is None or not hasattr(x, "dtype"):
        raise TypeError(f"x must be an array, got {type(x).__name__}")
    shape = tuple(shape)
    if len(shape) < 2:
        layout = "time, *batch" if time_major else "*batch, time"
        raise ValueError(f"x has shape {shape}; expected ({layout}, features), or (time, features) for one sequence")
    if reverse and config.num_directions == 2:
        raise ValueError(
            "reverse=True, but the module is bidirectional: it reads every sequence both ways already (reverse is "
            "nn.RNN's, for one direction; nn.Bidirectional passes it to its backward RNN)"
        )
    if merge_fn is not None and config.num_directions == 1:
        raise ValueError("merge_fn merges a bidirectional module's two directions; this module has one direction")
    batch_dims = shape[1:-1] if time_major else shape[:-2]
    batched = len(batch_dims) > 0
    if initial_carry is None:
        if default_carry is not None:
            initial_carry = default_carry(batch_dims)
        else:
            initial_carry = _flax_carry.zeros(run_config, batch_dims, compute_dtype)
    form = _flax_carry.form_of(initial_carry, config, len(batch_dims))
    h0, c0 = _flax_carry.states(initial_carry, config, form, batch_dims)
    layerless = form == CELL
    seq_lengths = _checks.as_lengths(seq_lengths)
    if resets is not None and not hasattr(resets, "shape"):
        resets = jnp.asarray(resets)
    if len(batch_dims) > 1:
        x, h0, c0, seq_lengths, resets = _flatten(x, h0, c0, seq_lengths, resets, batch_dims, time_major, layerless)
    names = _flax_core.argument_names(time_major, lstm, input_size_name, layerless, batched)
    _checks.check_inputs(None, x, h0, c0, run_config, seq_lengths, resets, names=names)

    x = jnp.asarray(x, compute_dtype)
    if not batched:  # one sequence: a batch of one
        xs, resets = x[:, None], (None if resets is None else resets[:, None])
        h0, c0 = h0[..., None, :], (None if c0 is None else c0[..., None, :])
        seq_lengths = None if seq_lengths is None else jnp.reshape(seq_lengths, (1,))
    elif time_major:
        xs = x
    else:
        xs, resets = jnp.swapaxes(x, 0, 1), (None if resets is None else resets.T)
    h0 = jnp.asarray(h0, compute_dtype)
    c0 = None if c0 is None else jnp.asarray(c0, compute_dtype)
    if layerless:
        h0, c0 = h0[None], (None if c0 is None else c0[None])
    num_steps = xs.shape[0]
    flips = reverse and num_steps > 1
    if flips:
        lengths = None if seq_lengths is None else jnp.asarray(seq_lengths)
        xs = flip_sequences(xs, lengths, num_batch_dims=1, time_major=True)
        if resets is not None:
            resets = _reversed_resets(resets, lengths)
    y, h_n, c_n = ops.run_checked(
        params,
        xs,
        h0,
        c0,
        run_config,
        seq_lengths=seq_lengths,
        is_training=dropout_key is not None,
        dropout_key=dropout_key,
        implementation=implementation,
        precision=precision,
        algorithm=algorithm,
        resets=resets,
        max_segments=max_segments,
    )
    if flips and keep_order:
        y = flip_sequences(y, None if seq_lengths is None else jnp.asarray(seq_lengths), 1, True)
    if merge_fn is not None:
        hidden = run_config.hidden_size
        y = merge_fn(y[..., :hidden], y[..., hidden:])
    y = _unflatten_outputs(y, batch_dims, time_major)
    if not return_carry:
        return y
    h_n = jnp.reshape(h_n, (h_n.shape[0], *batch_dims, h_n.shape[-1]))
    c_n = None if c_n is None else jnp.reshape(c_n, (c_n.shape[0], *batch_dims, c_n.shape[-1]))
    return _flax_carry.from_states(h_n, c_n, config, form), y


def _unflatten_outputs(y: jax.Array, batch_dims: tuple[int, ...], time_major: bool) -> jax.Array:
    """Time-major outputs [T, B, F] (B the batch axes flattened) in the caller's layout."""
    num_steps, features = y.shape[0], y.shape[-1]
    if not batch_dims:
        return y[:, 0]
    y = jnp.reshape(y, (num_steps, *batch_dims, features))
    return y if time_major else jnp.moveaxis(y, 0, len(batch_dims))


def _reversed_resets(resets: jax.Array, lengths: Any) -> jax.Array:
    """Time-major resets [T, B] of sequences read from their last valid step: a segment that started at step t
    (``resets[t]``) ends where the reversed reading reaches step t - 1, so the reversed reading's step s starts a
    segment where ``resets[len - s]``; its first step continues the carry (the backward direction's convention)."""
    num_steps = resets.shape[0]
    steps = jnp.arange(num_steps)[:, None]
    lengths = num_steps if lengths is None else lengths[None, :]
    source = (lengths - steps) % num_steps
    flags = resets if resets.dtype == jnp.bool_ else resets != 0
    return jnp.take_along_axis(flags, source, axis=0) & (steps > 0)


def _check_batch(argument: str, value: Any, batch_dims: tuple[int, ...], start: int, layout: str) -> Any:
    """``value`` with its batch axes (``start``, ...) checked against x's and flattened into one."""
    shape = getattr(value, "shape", None)
    if shape is None or not hasattr(value, "dtype"):
        raise TypeError(f"{argument} must be an array, got {type(value).__name__}")
    shape = tuple(shape)
    rank = len(batch_dims)
    if shape[start : start + rank] != tuple(batch_dims):
        raise ValueError(f"{argument} has shape {shape}; expected {layout} with the batch axes {batch_dims} of x")
    return jnp.reshape(value, (*shape[:start], math.prod(batch_dims), *shape[start + rank :]))


def _flatten(x, h0, c0, seq_lengths, resets, batch_dims, time_major, layerless):
    """x, the states, lengths and resets with x's several batch axes checked and flattened into one."""
    state_layout = "(*batch, hidden)" if layerless else "(num_layers*num_directions, *batch, hidden)"
    state_start = 0 if layerless else 1
    x = _check_batch("x", x, batch_dims, 1 if time_major else 0, "(time, *batch, features)")
    h0 = _check_batch("initial_carry", h0, batch_dims, state_start, state_layout)
    c0 = None if c0 is None else _check_batch("initial_carry[0] (c)", c0, batch_dims, state_start, state_layout)
    if seq_lengths is not None:
        seq_lengths = _check_batch("seq_lengths", seq_lengths, batch_dims, 0, "(*batch,)")
    if resets is not None:
        layout = "(time, *batch)" if time_major else "(*batch, time)"
        resets = _check_batch("resets", resets, batch_dims, 1 if time_major else 0, layout)
    return x, h0, c0, seq_lengths, resets
