"""Pure-JAX implementations over the opaque buffer: a fast path and a naive reference.

``rnn_xla`` (implementation="xla") is the fast path: per layer and direction, the input projection of all time steps
is one GEMM outside the scan, the scan carries only the recurrent GEMM, and a ``jax.custom_vjp`` backward pass runs
one reverse scan that emits the gate gradients, then forms the recurrent weight gradient as one GEMM over all time
steps (the input-side gradients follow from autodiff of the outer GEMM, also one GEMM each).

``rnn_reference`` (implementation="reference") is the textbook version: one ``lax.scan`` step per time step doing both
GEMMs, differentiated by JAX itself. It is slower, but it supports every transformation, forward mode (``jax.jvp``,
``jax.jacfwd``, Hessians) included, which a custom_vjp cannot.

Both share the cell equations (cuDNN's, see docs/architecture.md) and the sequence-length semantics: a step t >= len
leaves the state unchanged and outputs zero; the backward direction scans t = T-1 .. 0, so it starts at len-1 on each
sequence. Resets are a second per-step mask: where it is set, the state entering the step is zero (``reset_masks``).
Half-precision inputs are computed in float32 and cast back.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

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


def _lstm_activations(pre: Array) -> Array:
    """sigmoid on the i, f, o blocks and tanh on g, as one tanh over all four blocks."""
    hidden = pre.shape[-1] // 4
    half = jnp.full((hidden,), 0.5, pre.dtype)
    scale = jnp.concatenate([half, half, jnp.ones((hidden,), pre.dtype), half])
    shift = jnp.concatenate([half, half, jnp.zeros((hidden,), pre.dtype), half])
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


def _cell(mode: str, xps: tuple[Array, ...], hp: Array, h: Array, c: Array | None, cell_clip: float | None):
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


def _cell_backward(mode: str, saved: tuple[Array, ...], h: Array, c: Array | None, dh_new: Array, dc_new: Array | None,
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


def _masked(mask_t: Array | None, new: Array | None, old: Array | None) -> Array | None:
    if mask_t is None or new is None:
        return new
    return jnp.where(mask_t, new, old)


def _zeroed(reset_t: Array | None, state: Array | None) -> Array | None:
    """The state (or its gradient) with the rows where ``reset_t`` [B, 1] is set zeroed."""
    if reset_t is None or state is None:
        return state
    return jnp.where(reset_t, jnp.zeros((), state.dtype), state)


def _add(a: Array, b: Array | None) -> Array:
    return a if b is None else a + b


def _project(h_full: Array, w_proj: Array | None) -> Array:
    """h = W_proj h_full for a projected LSTM ([B, H] -> [B, P]); identity otherwise."""
    return h_full if w_proj is None else h_full @ w_proj.T


# ----------------------------------------------------------------------------------------------------------------------
# Fast recurrence with a hand-written backward pass.
# ----------------------------------------------------------------------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _recurrence(mode: str, reverse: bool, cell_clip: float | None, precision: str, xp: Array, b_in: Array | None,
                w_rec: Array, b_rec: Array | None, w_proj: Array | None, h0: Array, c0: Array | None,
                mask: Array | None, reset: Array | None):
    """Runs the recurrence over precomputed input projections.

    xp [T, B, G*H] without its bias, b_in [G*H] or None (added inside each step's elementwise fusion: a separate
    pass over xp cost 7 ms of the CPU LSTM's training step), w_rec [G*H, P], b_rec [G*H] or None, w_proj [P, H] or
    None, h0 [B, P], c0 [B, H] or None, mask [T, B, 1] bool or None (P = H without projection), reset [T, B, 1] bool
    or None (zero the state entering the step, in scan order). ``precision`` is a jax.default_matmul_precision value
    for every matmul, the backward pass's included.
    Returns (ys [T, B, P], h_n [B, P], c_n [B, H] or None).
    """
    with jax.default_matmul_precision(precision):
        outputs, _ = _scan_cells(mode, reverse, cell_clip, xp, b_in, w_rec, b_rec, w_proj, h0, c0, mask, reset,
                                 save=False)
    return outputs


def _recurrent_matmul(h: Array, w_rec: Array) -> Array:
    """h @ w_rec.T as [B, G*H], contracting w_rec's second axis directly (no transposed copy)."""
    return lax.dot_general(h, w_rec, (((1,), (1,)), ((), ())))


def _scan_cells(mode, reverse, cell_clip, xp, b_in, w_rec, b_rec, w_proj, h0, c0, mask, reset, save):
    """The forward scan; with ``save`` it also stacks, per step, what the backward pass needs."""
    b_ins = None if b_in is None else gate_inputs(mode, b_in)

    def step(carry, inputs):
        xps_t, mask_t, reset_t = inputs
        h, c = (_zeroed(reset_t, state) for state in carry)
        if b_ins is not None:
            xps_t = tuple(xp_t + b for xp_t, b in zip(xps_t, b_ins, strict=True))
        h_full, c_new, saved = _cell(mode, xps_t, _add(_recurrent_matmul(h, w_rec), b_rec), h, c, cell_clip)
        h_new = _project(h_full, w_proj)
        y = h_new if mask_t is None else jnp.where(mask_t, h_new, 0)
        return (_masked(mask_t, h_new, h), _masked(mask_t, c_new, c)), ((y, saved, h, c) if save else (y,))

    (h_n, c_n), stacked = lax.scan(step, (h0, c0), (gate_inputs(mode, xp), mask, reset), reverse=reverse)
    return (stacked[0], h_n, c_n), stacked[1:]


def _recurrence_fwd(mode, reverse, cell_clip, precision, xp, b_in, w_rec, b_rec, w_proj, h0, c0, mask, reset):
    with jax.default_matmul_precision(precision):
        outputs, (saved, h_prev, c_prev) = _scan_cells(mode, reverse, cell_clip, xp, b_in, w_rec, b_rec, w_proj, h0,
                                                       c0, mask, reset, save=True)
    return outputs, (b_in is not None, w_rec, b_rec is not None, w_proj, saved, h_prev, c_prev, mask, reset)


def _recurrence_bwd(mode, reverse, cell_clip, precision, residuals, cotangents):
    with jax.default_matmul_precision(precision):
        return _backward(mode, reverse, cell_clip, residuals, cotangents)


def _backward(mode, reverse, cell_clip, residuals, cotangents):
    has_b_in, w_rec, has_b_rec, w_proj, saved, h_prev, c_prev, mask, reset = residuals
    d_ys, dh_n, dc_n = cotangents

    def step(carry, inputs):
        dh, dc = carry  # gradient w.r.t. the state after this step
        d_y, saved_t, h, c, mask_t, reset_t = inputs  # h, c: the state the step read (after any reset)
        dh_new = dh + d_y
        if mask_t is not None:  # a masked step passed the state through unchanged
            dh_new, dh_pass = jnp.where(mask_t, dh_new, 0), jnp.where(mask_t, 0, dh)
            if dc is not None:
                dc, dc_pass = jnp.where(mask_t, dc, 0), jnp.where(mask_t, 0, dc)
        dh_full = dh_new if w_proj is None else dh_new @ w_proj
        d_xp, d_hp, dh_direct, dc_prev, h_full = _cell_backward(mode, saved_t, h, c, dh_full, dc, cell_clip)
        dh_prev = _add(d_hp @ w_rec, dh_direct)
        if mask_t is not None:
            dh_prev = dh_prev + dh_pass
            if dc_prev is not None:
                dc_prev = dc_prev + dc_pass
        stacked = (d_xp, d_hp if mode == "gru" else None, None if w_proj is None else (dh_new, h_full))
        return (_zeroed(reset_t, dh_prev), _zeroed(reset_t, dc_prev)), stacked

    (dh0, dc0), (d_xp, d_hp, proj_terms) = lax.scan(step, (dh_n, dc_n), (d_ys, saved, h_prev, c_prev, mask, reset),
                                                     reverse=not reverse)
    # Weight gradients as one GEMM each, contracting time and batch together. Written as einsums over (t, b) rather
    # than reshapes to [T*B, ...], so that a batch-sharded computation reduces partial sums instead of gathering.
    d_hp = d_xp if d_hp is None else d_hp
    d_w_rec = _weight_gradient(h_prev, d_hp)
    d_b_rec = d_hp.sum(axis=(0, 1)) if has_b_rec else None
    d_w_proj = None if proj_terms is None else jnp.einsum("tbp,tbh->ph", *proj_terms)
    d_b_in = d_xp.sum(axis=(0, 1)) if has_b_in else None
    return d_xp, d_b_in, d_w_rec, d_b_rec, d_w_proj, dh0, dc0, None, None


_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


# ----------------------------------------------------------------------------------------------------------------------
# Layers.
# ----------------------------------------------------------------------------------------------------------------------


def _layer_weights(params: Array, config: RNNConfig, layer: int, direction: int, dtype: Any):
    """(w_in [G*H, in], w_rec [G*H, P], w_proj [P, H], b_in [G*H], b_rec [G*H]) in ``dtype``; None where absent
    (w_in under skip input on layer 0, w_proj without projection, biases per bias_mode)."""
    groups = layout.layer_slots(config, layer, direction)
    take = lambda name: layout.slice_slots(params, groups[name]).astype(dtype) if groups[name] else None  # noqa: E731
    return tuple(take(name) for name in ("w_input", "w_recurrent", "w_projection", "b_input", "b_recurrent"))


def _weight_gradient(a: Array, d: Array) -> Array:
    """sum over (t, b) of d[t, b]^T a[t, b]: [T, B, A], [T, B, G] -> [G, A], one GEMM.

    Computed as (a^T d)^T behind an optimization barrier, which keeps XLA from folding the transpose back into the
    dot: XLA:CPU's GEMM then copies the transposed a ([T*B, A], the narrower operand) instead of d ([T*B, G*H]); the
    two copies of d the LSTM's weight gradients made cost 12 ms of the CPU training step (T100 B32 H256, one thread).
    """
    return lax.optimization_barrier(jnp.einsum("tba,tbg->ag", a, d)).T


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _input_gemm(x: Array, w_in: Array, precision: str) -> Array:
    """x W_in^T for every time step at once, [T, B, in] -> [T, B, G*H]; its weight gradient by ``_weight_gradient``."""
    with jax.default_matmul_precision(precision):
        return jnp.einsum("tbi,gi->tbg", x, w_in)


def _input_gemm_fwd(x, w_in, precision):
    return _input_gemm(x, w_in, precision), (x, w_in)


def _input_gemm_bwd(precision, residuals, d_xp):
    x, w_in = residuals
    with jax.default_matmul_precision(precision):
        return jnp.einsum("tbg,gi->tbi", d_xp, w_in), _weight_gradient(x, d_xp)


_input_gemm.defvjp(_input_gemm_fwd, _input_gemm_bwd)


def _input_projection(x: Array, w_in: Array | None, num_gates: int, precision: str) -> Array:
    """W x for every time step at once (the bias is added by the recurrence): [T, B, in] -> [T, B, G*H]. Skip input
    feeds x itself to every gate."""
    if w_in is None:
        return jnp.tile(x, (1, 1, num_gates))
    return _input_gemm(x, w_in, precision)


def _fast_direction(config, x, weights, h0, c0, mask, reset, reverse, precision):
    w_in, w_rec, w_proj, b_in, b_rec = weights
    xp = _input_projection(x, w_in, config.num_gates, precision)
    return _recurrence(config.mode, reverse, config.cell_clip, precision, xp, b_in, w_rec, b_rec, w_proj, h0, c0,
                       mask, reset)


def _reference_direction(config, x, weights, h0, c0, mask, reset, reverse, precision):
    del precision  # set around the whole run by _run; autodiff keeps each matmul's precision
    w_in, w_rec, w_proj, b_in, b_rec = weights

    def step(carry, inputs):
        x_t, mask_t, reset_t = inputs
        h, c = (_zeroed(reset_t, state) for state in carry)
        xp = _add(jnp.tile(x_t, (1, config.num_gates)) if w_in is None else x_t @ w_in.T, b_in)
        hp = _add(h @ w_rec.T, b_rec)
        h_full, c_new, _ = _cell(config.mode, gate_inputs(config.mode, xp), hp, h, c, config.cell_clip)
        h_new = _project(h_full, w_proj)
        y = h_new if mask_t is None else jnp.where(mask_t, h_new, 0)
        return (_masked(mask_t, h_new, h), _masked(mask_t, c_new, c)), y

    (h_n, c_n), ys = lax.scan(step, (h0, c0), (x, mask, reset), reverse=reverse)
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


def _run(direction_fn, params, x, h0, c0, config: RNNConfig, seq_lengths, dropout_masks, precision, resets):
    with jax.default_matmul_precision(precision):
        return _layers(direction_fn, params, x, h0, c0, config, seq_lengths, dropout_masks, precision, resets)


def _layers(direction_fn, params, x, h0, c0, config: RNNConfig, seq_lengths, dropout_masks, precision, resets):
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
            weights = _layer_weights(params, config, layer, direction, dtype)
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


def rnn_xla(params, x, h0, c0, config: RNNConfig, seq_lengths=None, dropout_masks=None, precision="float32",
            resets=None):
    """The fast path. Arguments as ``jax_cudnn_rnn.rnn`` after validation; ``dropout_masks`` from ``dropout.py``;
    ``precision`` "float32" or "tensorfloat32" (``jax.default_matmul_precision`` for every matmul); ``resets``
    bool [T, B] or None."""
    return _run(_fast_direction, params, x, h0, c0, config, seq_lengths, dropout_masks, precision, resets)


def rnn_reference(params, x, h0, c0, config: RNNConfig, seq_lengths=None, dropout_masks=None, precision="float32",
                  resets=None):
    """The naive per-step version, differentiable in every mode (jvp included)."""
    return _run(_reference_direction, params, x, h0, c0, config, seq_lengths, dropout_masks, precision, resets)
