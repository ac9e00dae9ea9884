"""Pure-JAX implementations over the opaque buffer: a fast path and a naive reference.

``rnn_xla`` (implementation="xla") is the fast path: per layer and direction, the input projection of all time steps
is one GEMM outside the scan, the scan carries only the recurrent GEMM, and a ``jax.custom_vjp`` backward pass runs
one reverse scan that emits the gate gradients, then forms the recurrent weight gradient as one GEMM over all time
steps (the input-side gradients follow from autodiff of the outer GEMM, also one GEMM each).

``rnn_reference`` (implementation="reference") is the textbook version: one ``lax.scan`` step per time step doing both
GEMMs, differentiated by JAX itself. It is slower, but it supports every transformation, forward mode (``jax.jvp``,
``jax.jacfwd``, Hessians) included, which a custom_vjp cannot.

Both share the cell equations (cuDNN's, see DESIGN.md) and the sequence-length semantics: a step t >= len leaves the
state unchanged and outputs zero; the backward direction scans t = T-1 .. 0, so it starts at len-1 on each sequence.
Half-precision inputs are computed in float32 and cast back.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import RNNConfig

Array = jax.Array


def compute_dtype(dtype: Any) -> Any:
    """float64 stays float64; everything else is computed in float32."""
    return jnp.float64 if np.dtype(dtype) == np.float64 else jnp.float32


# ----------------------------------------------------------------------------------------------------------------------
# Cell equations. xp: input part of the pre-activations (W x + b_W), hp: recurrent part (R h + b_R), both [B, G*H].
# ----------------------------------------------------------------------------------------------------------------------


def _sigmoid(x: Array) -> Array:
    # sigmoid(x) = (tanh(x/2) + 1) / 2: one tanh is about half the cost of XLA's exp-and-divide logistic on CPU.
    return 0.5 * jnp.tanh(0.5 * x) + 0.5


def _lstm_activations(pre: Array) -> Array:
    """sigmoid on the i, f, o blocks and tanh on g, as one tanh over all four blocks."""
    hidden = pre.shape[-1] // 4
    half = jnp.full((hidden,), 0.5, pre.dtype)
    scale = jnp.concatenate([half, half, jnp.ones((hidden,), pre.dtype), half])
    shift = jnp.concatenate([half, half, jnp.zeros((hidden,), pre.dtype), half])
    return jnp.tanh(pre * scale) * scale + shift


def _cell(mode: str, xp: Array, hp: Array, h: Array, c: Array | None):
    """One step: returns (h_new, c_new, saved) where ``saved`` is what ``_cell_backward`` needs besides h and c."""
    if mode == "lstm":
        acts = _lstm_activations(xp + hp)
        i, f, g, o = jnp.split(acts, 4, axis=-1)
        c_new = f * c + i * g
        return o * jnp.tanh(c_new), c_new, acts
    if mode == "gru":
        hidden = h.shape[-1]
        hn = hp[..., 2 * hidden:]
        r, z = jnp.split(_sigmoid(xp[..., :2 * hidden] + hp[..., :2 * hidden]), 2, axis=-1)
        n = jnp.tanh(xp[..., 2 * hidden:] + r * hn)
        return (1 - z) * n + z * h, None, jnp.concatenate([r, z, n, hn], axis=-1)
    h_new = jnp.tanh(xp + hp) if mode == "rnn_tanh" else jax.nn.relu(xp + hp)
    return h_new, None, h_new


def _cell_backward(mode: str, saved: Array, h: Array, c: Array | None, dh_new: Array, dc_new: Array | None):
    """Gradients of one step: returns (d_xp, d_hp, dh_direct, dc) where d_xp/d_hp are w.r.t. the input/recurrent
    pre-activations (equal except for GRU's new gate), dh_direct is the part of dh that bypasses R (GRU only, else
    None) and dc the gradient w.r.t. the previous cell state (LSTM only)."""
    if mode == "lstm":
        i, f, g, o = jnp.split(saved, 4, axis=-1)
        tanh_c = jnp.tanh(f * c + i * g)
        dc_total = dc_new + dh_new * o * (1 - tanh_c * tanh_c)
        d_pre = jnp.concatenate([dc_total * g * i * (1 - i), dc_total * c * f * (1 - f), dc_total * i * (1 - g * g),
                                 dh_new * tanh_c * o * (1 - o)], axis=-1)
        return d_pre, d_pre, None, dc_total * f
    if mode == "gru":
        r, z, n, hn = jnp.split(saved, 4, axis=-1)
        d_n = dh_new * (1 - z) * (1 - n * n)
        d_r = d_n * hn * r * (1 - r)
        d_z = dh_new * (h - n) * z * (1 - z)
        return (jnp.concatenate([d_r, d_z, d_n], axis=-1), jnp.concatenate([d_r, d_z, d_n * r], axis=-1),
                dh_new * z, None)
    d_pre = dh_new * (1 - saved * saved) if mode == "rnn_tanh" else jnp.where(saved > 0, dh_new, 0)
    return d_pre, d_pre, None, None


def _masked(mask_t: Array | None, new: Array | None, old: Array | None) -> Array | None:
    if mask_t is None or new is None:
        return new
    return jnp.where(mask_t, new, old)


# ----------------------------------------------------------------------------------------------------------------------
# Fast recurrence with a hand-written backward pass.
# ----------------------------------------------------------------------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _recurrence(mode: str, reverse: bool, xp: Array, w_rec: Array, b_rec: Array, h0: Array, c0: Array | None,
                mask: Array | None):
    """Runs the recurrence over precomputed input projections.

    xp [T, B, G*H], w_rec [G*H, H], b_rec [G*H], h0/c0 [B, H], mask [T, B, 1] bool or None.
    Returns (ys [T, B, H], h_n [B, H], c_n [B, H] or None).
    """
    outputs, _ = _scan_cells(mode, reverse, xp, w_rec, b_rec, h0, c0, mask, save=False)
    return outputs


def _row_blocks(w_rec: Array) -> list[Array]:
    """w_rec [G*H, H] split into row blocks (the gates; two halves for the one-gate RNNs).

    Several independent small GEMMs instead of one: XLA's CPU runtime runs independent ops concurrently, and the
    per-step GEMM is too small for its intra-op threading, so this is what puts a second core to work in the scan.
    """
    rows = w_rec.shape[0]
    hidden = w_rec.shape[1]
    count = rows // hidden if rows > hidden else (2 if rows % 2 == 0 else 1)
    return jnp.split(w_rec, count, axis=0)


def _recurrent_matmul(h: Array, blocks: list[Array]) -> Array:
    """h @ w_rec.T as [B, G*H], one GEMM per row block."""
    dims = (((1,), (1,)), ((), ()))
    return jnp.concatenate([lax.dot_general(h, block, dims) for block in blocks], axis=-1)


def _recurrent_matmul_transposed(d_hp: Array, blocks: list[Array]) -> Array:
    """d_hp @ w_rec as [B, H], one GEMM per row block, summed."""
    chunks = jnp.split(d_hp, len(blocks), axis=-1)
    return sum(chunk @ block for chunk, block in zip(chunks, blocks))


def _scan_cells(mode, reverse, xp, w_rec, b_rec, h0, c0, mask, save):
    """The forward scan; with ``save`` it also stacks, per step, what the backward pass needs."""
    blocks = _row_blocks(w_rec)

    def step(carry, inputs):
        h, c = carry
        xp_t, mask_t = inputs
        h_new, c_new, saved = _cell(mode, xp_t, _recurrent_matmul(h, blocks) + b_rec, h, c)
        y = h_new if mask_t is None else jnp.where(mask_t, h_new, 0)
        return (_masked(mask_t, h_new, h), _masked(mask_t, c_new, c)), ((y, saved, h, c) if save else (y,))

    (h_n, c_n), stacked = lax.scan(step, (h0, c0), (xp, mask), reverse=reverse)
    return (stacked[0], h_n, c_n), stacked[1:]


def _recurrence_fwd(mode, reverse, xp, w_rec, b_rec, h0, c0, mask):
    outputs, (saved, h_prev, c_prev) = _scan_cells(mode, reverse, xp, w_rec, b_rec, h0, c0, mask, save=True)
    return outputs, (w_rec, saved, h_prev, c_prev, mask)


def _recurrence_bwd(mode, reverse, residuals, cotangents):
    w_rec, saved, h_prev, c_prev, mask = residuals
    d_ys, dh_n, dc_n = cotangents
    blocks = _row_blocks(w_rec)

    def step(carry, inputs):
        dh, dc = carry  # gradient w.r.t. the state after this step
        d_y, saved_t, h, c, mask_t = inputs
        dh_new = dh + d_y
        if mask_t is not None:  # a masked step passed the state through unchanged
            dh_new, dh_pass = jnp.where(mask_t, dh_new, 0), jnp.where(mask_t, 0, dh)
            if dc is not None:
                dc, dc_pass = jnp.where(mask_t, dc, 0), jnp.where(mask_t, 0, dc)
        d_xp, d_hp, dh_direct, dc_prev = _cell_backward(mode, saved_t, h, c, dh_new, dc)
        dh_prev = _recurrent_matmul_transposed(d_hp, blocks)
        if dh_direct is not None:
            dh_prev = dh_prev + dh_direct
        if mask_t is not None:
            dh_prev = dh_prev + dh_pass
            if dc_prev is not None:
                dc_prev = dc_prev + dc_pass
        return (dh_prev, dc_prev), (d_xp, None if mode != "gru" else d_hp)

    (dh0, dc0), (d_xp, d_hp) = lax.scan(step, (dh_n, dc_n), (d_ys, saved, h_prev, c_prev, mask),
                                         reverse=not reverse)
    d_hp = d_xp if d_hp is None else d_hp
    num_steps, batch, gates_hidden = d_hp.shape
    flat_d_hp = d_hp.reshape(num_steps * batch, gates_hidden)
    d_w_rec = flat_d_hp.T @ h_prev.reshape(num_steps * batch, -1)
    return d_xp, d_w_rec, flat_d_hp.sum(axis=0), dh0, dc0, None


_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


# ----------------------------------------------------------------------------------------------------------------------
# Layers.
# ----------------------------------------------------------------------------------------------------------------------


def _layer_weights(params: Array, config: RNNConfig, layer: int, direction: int, dtype: Any):
    """(w_in [G*H, in] or None under skip input, w_rec [G*H, H], b_in [G*H], b_rec [G*H]) in ``dtype``."""
    groups = layout.layer_slots(config, layer, direction)
    take = lambda name: layout.slice_slots(params, groups[name]).astype(dtype)  # noqa: E731
    w_in = take("w_input") if groups["w_input"] else None
    return w_in, take("w_recurrent"), take("b_input"), take("b_recurrent")


def _input_projection(x: Array, w_in: Array | None, b_in: Array, num_gates: int) -> Array:
    """W x + b_W for every time step at once: [T, B, in] -> [T, B, G*H]. Skip input feeds x itself to every gate."""
    if w_in is None:
        return jnp.tile(x, (1, 1, num_gates)) + b_in
    return jnp.einsum("tbi,gi->tbg", x, w_in) + b_in


def _fast_direction(config, x, weights, h0, c0, mask, reverse):
    w_in, w_rec, b_in, b_rec = weights
    xp = _input_projection(x, w_in, b_in, config.num_gates)
    return _recurrence(config.mode, reverse, xp, w_rec, b_rec, h0, c0, mask)


def _reference_direction(config, x, weights, h0, c0, mask, reverse):
    w_in, w_rec, b_in, b_rec = weights

    def step(carry, inputs):
        h, c = carry
        x_t, mask_t = inputs
        xp = (jnp.tile(x_t, (1, config.num_gates)) if w_in is None else x_t @ w_in.T) + b_in
        h_new, c_new, _ = _cell(config.mode, xp, h @ w_rec.T + b_rec, h, c)
        y = h_new if mask_t is None else jnp.where(mask_t, h_new, 0)
        return (_masked(mask_t, h_new, h), _masked(mask_t, c_new, c)), y

    (h_n, c_n), ys = lax.scan(step, (h0, c0), (x, mask), reverse=reverse)
    return ys, h_n, c_n


def _run(direction_fn, params, x, h0, c0, config: RNNConfig, seq_lengths, dropout_masks):
    dtype = compute_dtype(config.dtype)
    num_steps = x.shape[0]
    mask = None
    if seq_lengths is not None:
        mask = (jnp.arange(num_steps, dtype=jnp.int32)[:, None] < seq_lengths[None, :])[:, :, None]
    layer_input = x.astype(dtype)
    h_n, c_n = [], []
    for layer in range(config.num_layers):
        outputs = []
        for direction in range(config.num_directions):
            index = layer * config.num_directions + direction
            weights = _layer_weights(params, config, layer, direction, dtype)
            ys, h_last, c_last = direction_fn(config, layer_input, weights, h0[index].astype(dtype),
                                              None if c0 is None else c0[index].astype(dtype), mask, direction == 1)
            outputs.append(ys)
            h_n.append(h_last)
            c_n.append(c_last)
        layer_input = outputs[0] if len(outputs) == 1 else jnp.concatenate(outputs, axis=-1)
        if dropout_masks and layer < config.num_layers - 1:
            layer_input = layer_input * dropout_masks[layer].astype(dtype)
    out_dtype = config.dtype
    return (layer_input.astype(out_dtype), jnp.stack(h_n).astype(out_dtype),
            None if c0 is None else jnp.stack(c_n).astype(out_dtype))


def rnn_xla(params, x, h0, c0, config: RNNConfig, seq_lengths=None, dropout_masks=None):
    """The fast path. Arguments as ``jax_cudnn_rnn.rnn`` after validation; ``dropout_masks`` from ``dropout.py``."""
    return _run(_fast_direction, params, x, h0, c0, config, seq_lengths, dropout_masks)


def rnn_reference(params, x, h0, c0, config: RNNConfig, seq_lengths=None, dropout_masks=None):
    """The naive per-step version, differentiable in every mode (jvp included)."""
    return _run(_reference_direction, params, x, h0, c0, config, seq_lengths, dropout_masks)
