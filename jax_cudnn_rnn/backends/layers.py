"""The layer loop the two pure-JAX implementations share (jax_cudnn_rnn/backends/xla.py, the fast path, and
jax_cudnn_rnn/backends/reference.py, the textbook scan), around the cells' steps (jax_cudnn_rnn/cells/).

Both implementations share the sequence-length semantics: a step
t >= len leaves the state unchanged and outputs zero; the backward direction scans t = T-1 .. 0, so it starts at
len-1 on each sequence. Resets are a second per-step mask: where it is set, the state entering the step is zero
(``reset_masks``). Half-precision inputs are computed in float32 and cast back. ``scan_general`` is the scan both
run around a cell's ``general_step`` (any activations, recurrent dropout, the reset-before GRU), JAX differentiating
it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jax_cudnn_rnn import _buffer
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.cells.spec import leading
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.dropout import compute_dtype

Array = jax.Array


def masked(mask_t: Array | None, new: Array | None, old: Array | None) -> Array | None:
    if mask_t is None or new is None:
        return new
    return jnp.where(mask_t, new, old)


def zeroed(reset_t: Array | None, state: Array | None) -> Array | None:
    """The state (or its gradient) with the rows where ``reset_t`` [B, 1] is set zeroed."""
    if reset_t is None or state is None:
        return state
    return jnp.where(reset_t, jnp.zeros((), state.dtype), state)


def add_bias(a: Array, b: Array | None) -> Array:
    """a + b, a bias b [N] broadcast over a's leading axes (``leading``); b None adds nothing."""
    return a if b is None else a + leading(b, a.ndim)


def project(h_full: Array, w_proj: Array | None) -> Array:
    """h = W_proj h_full for a projected LSTM ([B, H] -> [B, P]); identity otherwise."""
    return h_full if w_proj is None else h_full @ w_proj.T


def layer_weights(params: Array, config: RNNConfig, dtype: Any):
    """Per pseudo-layer (layer * D + direction): (w_in [G*H, in], w_rec [G*H, P], w_proj [P, H], b_in [G*H],
    b_rec [G*H]) in ``dtype``; None where absent (w_in under skip input on layer 0, w_proj without projection, biases
    per bias_mode). All taken at once by ``_buffer.unpack``, whose gradient is one concatenation in buffer order."""
    return [tuple(None if w is None else w.astype(dtype) for w in groups) for groups in _buffer.unpack(params, config)]


def gate_weights(pieces: Any, config: RNNConfig, dtype: Any):
    """As ``layer_weights``, for a call of one step over a frontend's ``Pieces`` (``_buffer.unpack_gates``): per
    pseudo-layer (w_in, w_rec, w_proj, b_in, b_rec), each a ``_buffer.Group`` in ``dtype`` (None where absent)."""
    del config  # the pieces' own

    def cast(group: _buffer.Group | None) -> _buffer.Group | None:
        if group is None:
            return None
        return group._replace(gates=tuple(None if a is None else a.astype(dtype) for a in group.gates))

    return [tuple(cast(group) for group in groups) for groups in _buffer.unpack_gates(pieces)]


def recurrent_products(
    w_rec: Array, b_rec: Array | None, rmask: Array | None, num_gates: int, weights_first: bool = False
) -> Callable:
    """The ``recurrent(v, gates)`` a cell's ``general_step`` takes: for a ``slice`` of the gates, R_k (v * m_k) + b_Rk
    side by side [B, len*H]; w_rec [G*H, P], b_rec [G*H] or None, rmask None or [G, B, P] (one recurrent-dropout mask
    per gate, ``dropout.recurrent_masks``). Without masks, one GEMM over the gates asked for, with ``weights_first``
    as (R v^T)^T."""
    units = w_rec.shape[0] // num_gates

    def recurrent(v: Array, gates: slice) -> Array:
        rows = slice(gates.start * units, gates.stop * units)
        w = w_rec[rows]
        if rmask is None:
            out = (w @ v.T).T if weights_first else v @ w.T
        else:
            count = gates.stop - gates.start
            out = jnp.einsum("gbp,ghp->bgh", v[None] * rmask[gates], w.reshape(count, units, w.shape[1]))
            out = out.reshape(v.shape[0], count * units)
        return add_bias(out, None if b_rec is None else b_rec[rows])

    return recurrent


class Direction(NamedTuple):
    """One layer and direction's static facts for a direction function: its config (the whole network's), whether it
    reads time backwards, and the matmul precision ("float32" or "tensorfloat32")."""

    config: RNNConfig
    reverse: bool
    precision: str


class DirectionInputs(NamedTuple):
    """One layer and direction's arrays: x [T, B, in] in the computation dtype; weights as ``layer_weights`` gives one
    pseudo-layer's; h0 [B, hidden], c0 [B, H] or None; mask [T, B, 1] bool (t < length) or None; reset [T, B, 1] bool
    (zero the state entering the step, in scan order) or None; rmask [G, B, hidden] (recurrent dropout) or None."""

    x: Array
    weights: tuple[Any, ...]
    h0: Array
    c0: Array | None
    mask: Array | None
    reset: Array | None
    rmask: Array | None


DirectionFn = Callable[[Direction, DirectionInputs], tuple[Array, Array, Array | None]]
"""``direction_fn(direction, arrays) -> (ys [T, B, hidden], h_n [B, hidden], c_n [B, H] or None)``."""


def scan_general(direction: Direction, xs, gate_inputs_of, arrays: DirectionInputs, weights_first: bool = False):
    """One direction of one layer through the cell's ``general_step``: ``lax.scan`` over ``xs`` (a pytree with a
    leading time axis, in place of ``arrays.x``), ``gate_inputs_of(x_t)`` giving the step's gate inputs (W x_t + b_W,
    split as the cell reads them; w_in and b_in are its business); ``weights_first`` as ``recurrent_products``.
    Returns (ys [T, B, hidden], h_n, c_n or None)."""
    config = direction.config
    _, w_rec, w_proj, _, b_rec = arrays.weights
    cell = config.cell
    activation, recurrent_activation = config.activation_functions
    recurrent = recurrent_products(w_rec, b_rec, arrays.rmask, config.num_gates, weights_first)

    def step(carry, inputs):
        x_t, mask_t, reset_t = inputs
        h, c = (zeroed(reset_t, state) for state in carry)
        h_full, c_new = cell.general_step(
            gate_inputs_of(x_t), recurrent, h, c, config.cell_clip, activation, recurrent_activation
        )
        h_new = project(h_full, w_proj)
        y = h_new if mask_t is None else jnp.where(mask_t, h_new, 0)
        return (masked(mask_t, h_new, h), masked(mask_t, c_new, c)), y

    (h_n, c_n), ys = lax.scan(step, (arrays.h0, arrays.c0), (xs, arrays.mask, arrays.reset), reverse=direction.reverse)
    return ys, h_n, c_n


def reset_masks(resets: Array, seq_lengths: Array | None) -> tuple[Array, Array]:
    """Where each direction zeroes the state entering a step, as [T, B, 1] bool masks (forward, backward).

    resets [T, B] bool: a segment starts at step t. The forward direction zeroes the state entering t; the backward
    direction reads t = T-1 .. 0, so a segment starting at t + 1 zeroes the state entering t. Only valid steps
    (t < seq_lengths) count: a reset in the padding changes nothing.
    """
    if seq_lengths is not None:
        resets = resets & (jnp.arange(resets.shape[0], dtype=jnp.int32)[:, None] < seq_lengths[None, :])
    backward = jnp.concatenate([resets[1:], jnp.zeros_like(resets[:1])])
    return resets[:, :, None], backward[:, :, None]


def run_layers(direction_fn: DirectionFn, call: Call, inputs: Inputs, weights: Callable = layer_weights):
    """The layer loop around ``direction_fn`` for the registry's prepared call (jax_cudnn_rnn/backends/call.py), under
    ``call.precision``: the ``run`` of both pure-JAX implementations. ``weights``: how ``DirectionInputs.weights``
    come from the buffer (``layer_weights``, or ``gate_weights`` for a direction function that takes them per gate).
    Returns (y, h_n, c_n or None)."""
    with jax.default_matmul_precision(call.precision):
        return _layer_loop(direction_fn, call, inputs, weights)


def _layer_loop(direction_fn: DirectionFn, call: Call, inputs: Inputs, weights: Callable):
    config = call.config
    dtype = compute_dtype(config.dtype)
    num_steps = inputs.x.shape[0]
    mask = None
    if inputs.seq_lengths is not None:
        mask = (jnp.arange(num_steps, dtype=jnp.int32)[:, None] < inputs.seq_lengths[None, :])[:, :, None]
    reset = (None, None) if inputs.resets is None else reset_masks(inputs.resets, inputs.seq_lengths)
    layer_input = inputs.x.astype(dtype)
    if mask is not None:  # x past a row's length is never read: not even a NaN there reaches a value or a gradient
        layer_input = jnp.where(mask, layer_input, 0)
    all_weights = weights(inputs.params, config, dtype)
    c0, recurrent_masks = inputs.c0, inputs.recurrent_masks
    h_n, c_n = [], []
    for layer in range(config.num_layers):
        outputs = []
        for direction in range(config.num_directions):
            index = layer * config.num_directions + direction
            ys, h_last, c_last = direction_fn(
                Direction(config, direction == 1, call.precision),
                DirectionInputs(
                    layer_input,
                    all_weights[index],
                    inputs.h0[index].astype(dtype),
                    None if c0 is None else c0[index].astype(dtype),
                    mask,
                    reset[direction],
                    None if recurrent_masks is None else recurrent_masks[index].astype(dtype),
                ),
            )
            outputs.append(ys)
            h_n.append(h_last)
            c_n.append(c_last)
        layer_input = outputs[0] if len(outputs) == 1 else jnp.concatenate(outputs, axis=-1)
        if inputs.dropout_masks and layer < config.num_layers - 1:
            layer_input = layer_input * inputs.dropout_masks[layer].astype(dtype)
    out_dtype = config.dtype
    return (
        layer_input.astype(out_dtype),
        jnp.stack(h_n).astype(out_dtype),
        None if c0 is None else jnp.stack(c_n).astype(out_dtype),
    )
