"""The cell equations and the layer loop the two pure-JAX implementations share (jax_cudnn_rnn/backends/xla.py, the fast
path, and jax_cudnn_rnn/backends/reference.py, the textbook scan).

The equations are cuDNN's (docs/architecture.md). Both implementations share the sequence-length semantics: a step
t >= len leaves the state unchanged and outputs zero; the backward direction scans t = T-1 .. 0, so it starts at
len-1 on each sequence. Resets are a second per-step mask: where it is set, the state entering the step is zero
(``reset_masks``). Half-precision inputs are computed in float32 and cast back.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.dropout import compute_dtype

Array = jax.Array


# ----------------------------------------------------------------------------------------------------------------------
# Cell equations. xp: input part of the pre-activations (W x + b_W), hp: recurrent part (R h + b_R), both [B, G*H].
# ----------------------------------------------------------------------------------------------------------------------


def _sigmoid(x: Array) -> Array:
    # sigmoid(x) = (tanh(x/2) + 1) / 2: one tanh is about half the cost of XLA's exp-and-divide logistic on CPU.
    return 0.5 * jnp.tanh(0.5 * x) + 0.5


def leading(a: Array, ndim: int) -> Array:
    """``a`` with unit axes in front up to rank ``ndim``: a bias [N] as [1, N] to add to [B, N]. Broadcasts are
    spelled out, so that the package runs under ``jax_numpy_rank_promotion="raise"`` (JAX's own tests' setting)."""
    return a.reshape((1,) * (ndim - a.ndim) + a.shape)


def _lstm_activations(pre: Array) -> Array:
    """sigmoid on the i, f, o blocks and tanh on g, as one tanh over all four blocks."""
    hidden = pre.shape[-1] // 4
    half = jnp.full((hidden,), 0.5, pre.dtype)
    scale = leading(jnp.concatenate([half, half, jnp.ones((hidden,), pre.dtype), half]), pre.ndim)
    shift = leading(jnp.concatenate([half, half, jnp.zeros((hidden,), pre.dtype), half]), pre.ndim)
    return jnp.tanh(pre * scale) * scale + shift


def _clip(c: Array, cell_clip: float | None) -> Array:
    """The cell state as the LSTM reads it. cuDNN (CUDNN_RNN_CLIP_MINMAX) clips c where it is read, by the output tanh
    and by the next step, and carries the unclipped value: c_n is unclipped and c0 is clipped on its first use."""
    return c if cell_clip is None else jnp.clip(c, -cell_clip, cell_clip)


def _clip_grad(dc: Array, c: Array, cell_clip: float | None) -> Array:
    """dc through ``_clip``: zero where the clip bites."""
    return dc if cell_clip is None else jnp.where(jnp.abs(c) < cell_clip, dc, 0)


def gate_inputs(mode: str, xp: Array) -> tuple[Array, ...]:
    """The input pre-activations [..., G*H] as the cell reads them: GRU's three gates as separate arrays, else whole.

    Scanned inputs are split before the scan, never inside it: XLA:CPU turns a slice of a scanned operand in the
    step's elementwise fusion into scalar code (GRU forward 39 ms with in-loop slices, 25 ms without, T100 B32
    H256). The LSTM cell reads all four gates at once, so its input stays whole.
    """
    if mode != "gru":
        return (xp,)
    units = xp.shape[-1] // 3
    return xp[..., :units], xp[..., units:2 * units], xp[..., 2 * units:]


def cell(mode: str, xps: tuple[Array, ...], hp: Array, h: Array, c: Array | None, cell_clip: float | None):
    """One step over ``gate_inputs(mode, xp)``: returns (h_new, c_new, saved), ``saved`` being the per-gate arrays
    ``_cell_backward`` needs besides h and c (separate arrays, for the reason given in ``gate_inputs``).

    For LSTM h_new is o * tanh(c_new) before any projection (the projection is applied by the caller).
    """
    if mode == "lstm":
        i, f, g, o = jnp.split(_lstm_activations(xps[0] + hp), 4, axis=-1)
        c_new = f * _clip(c, cell_clip) + i * g
        return o * jnp.tanh(_clip(c_new, cell_clip)), c_new, (i, f, g, o)
    if mode == "gru":
        x_r, x_z, x_n = xps
        units = hp.shape[-1] // 3
        hn = hp[..., 2 * units:]
        r = _sigmoid(x_r + hp[..., :units])
        z = _sigmoid(x_z + hp[..., units:2 * units])
        n = jnp.tanh(x_n + r * hn)
        return (1 - z) * n + z * h, None, (r, z, n, hn)
    pre = xps[0] + hp
    h_new = jnp.tanh(pre) if mode == "rnn_tanh" else jax.nn.relu(pre)
    return h_new, None, (h_new,)


def cell_backward(mode: str, saved: tuple[Array, ...], h: Array, c: Array | None, dh_new: Array, dc_new: Array | None,
                   cell_clip: float | None):
    """Gradients of one step given dh_new (w.r.t. the unprojected h_new) and dc_new.

    Returns (d_xp, d_hp, dh_direct, dc, h_new): d_xp/d_hp are w.r.t. the input/recurrent pre-activations (equal except
    for GRU's new gate), dh_direct the part of dh that bypasses R (GRU only, else None), dc the gradient w.r.t. the
    previous cell state (LSTM only) and h_new the recomputed unprojected output (LSTM only; for the projection GEMM).
    """
    if mode == "lstm":
        i, f, g, o = saved
        c_in = _clip(c, cell_clip)
        c_new = f * c_in + i * g
        tanh_c = jnp.tanh(_clip(c_new, cell_clip))
        dc_total = dc_new + _clip_grad(dh_new * o * (1 - tanh_c * tanh_c), c_new, cell_clip)
        d_pre = jnp.concatenate([dc_total * g * i * (1 - i), dc_total * c_in * f * (1 - f),
                                 dc_total * i * (1 - g * g), dh_new * tanh_c * o * (1 - o)], axis=-1)
        return d_pre, d_pre, None, _clip_grad(dc_total * f, c, cell_clip), o * tanh_c
    if mode == "gru":
        r, z, n, hn = saved
        d_n = dh_new * (1 - z) * (1 - n * n)
        d_r = d_n * hn * r * (1 - r)
        d_z = dh_new * (h - n) * z * (1 - z)
        return (jnp.concatenate([d_r, d_z, d_n], axis=-1), jnp.concatenate([d_r, d_z, d_n * r], axis=-1),
                dh_new * z, None, None)
    (h_new,) = saved
    d_pre = dh_new * (1 - h_new * h_new) if mode == "rnn_tanh" else jnp.where(h_new > 0, dh_new, 0)
    return d_pre, d_pre, None, None, None


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


def layer_weights(params: Array, config: RNNConfig, layer: int, direction: int, dtype: Any):
    """(w_in [G*H, in], w_rec [G*H, P], w_proj [P, H], b_in [G*H], b_rec [G*H]) in ``dtype``; None where absent
    (w_in under skip input on layer 0, w_proj without projection, biases per bias_mode)."""
    groups = layout.layer_slots(config, layer, direction)
    take = lambda name: layout.slice_slots(params, groups[name]).astype(dtype) if groups[name] else None  # noqa: E731
    return tuple(take(name) for name in ("w_input", "w_recurrent", "w_projection", "b_input", "b_recurrent"))


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


def run_layers(direction_fn, params, x, h0, c0, config: RNNConfig, seq_lengths, dropout_masks, precision, resets):
    with jax.default_matmul_precision(precision):
        return _layer_loop(direction_fn, params, x, h0, c0, config, seq_lengths, dropout_masks, precision, resets)


def _layer_loop(direction_fn, params, x, h0, c0, config: RNNConfig, seq_lengths, dropout_masks, precision, resets):
    dtype = compute_dtype(config.dtype)
    num_steps = x.shape[0]
    mask = None
    if seq_lengths is not None:
        mask = (jnp.arange(num_steps, dtype=jnp.int32)[:, None] < seq_lengths[None, :])[:, :, None]
    reset = (None, None) if resets is None else reset_masks(resets, seq_lengths)
    layer_input = x.astype(dtype)
    h_n, c_n = [], []
    for layer in range(config.num_layers):
        outputs = []
        for direction in range(config.num_directions):
            index = layer * config.num_directions + direction
            weights = layer_weights(params, config, layer, direction, dtype)
            ys, h_last, c_last = direction_fn(config, layer_input, weights, h0[index].astype(dtype),
                                              None if c0 is None else c0[index].astype(dtype), mask,
                                              reset[direction], direction == 1, precision)
            outputs.append(ys)
            h_n.append(h_last)
            c_n.append(c_last)
        layer_input = outputs[0] if len(outputs) == 1 else jnp.concatenate(outputs, axis=-1)
        if dropout_masks and layer < config.num_layers - 1:
            layer_input = layer_input * dropout_masks[layer].astype(dtype)
    out_dtype = config.dtype
    return (layer_input.astype(out_dtype), jnp.stack(h_n).astype(out_dtype),
            None if c0 is None else jnp.stack(c_n).astype(out_dtype))
