"""implementation="onednn:gemm": the network as matrix products on oneDNN's matmul primitive, the gates in XLA.

The decomposition PyTorch's CPU GRU runs, and the xla implementation's (jax_cudnn_rnn/backends/xla.py): per layer and
direction, the input product of all time steps is one GEMM, a ``lax.scan`` carries one recurrent GEMM per step with
the cell's step (jax_cudnn_rnn/cells/) fused around it by XLA, and a hand-written backward scan emits the gate
gradients, after which the weight gradients are one GEMM each over all steps. Every GEMM is
``kernels.matmul`` (onednn/matmul.h): oneDNN's brgemm kernels, which reach the CPU's bfloat16 rate where XLA:CPU's
GEMM does not. bfloat16 runs its GEMMs in bfloat16 with float32 accumulation and everything else in float32, as the
xla implementation does.

This is a kernel of the fused kit (``rnn``: the whole network, no lengths, no dropout; jax_cudnn_rnn/backends/fused/
arranges those around it), for the cells with a fast step (the modes oneDNN's backend runs) and their default
activations; the projection of an LSTM runs too (its GEMMs on the same target).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.backends.custom_vjp import custom_vjp
from jax_cudnn_rnn.backends.onednn import kernels
from jax_cudnn_rnn.cells import Cell
from jax_cudnn_rnn.cells.spec import leading
from jax_cudnn_rnn.config import RNNConfig

Array = jax.Array


def _mm(a: Array, b: Array, transpose_a: bool = False, transpose_b: bool = False) -> Array:
    """op(a) @ op(b) in float32, ``a`` rounded to ``b``'s dtype first (bfloat16 weights: a bfloat16 GEMM with float32
    accumulation); 2-D operands (``_rows`` flattens time and batch)."""
    return kernels.matmul(a.astype(b.dtype), b, transpose_a=transpose_a, transpose_b=transpose_b)


def _rows(a: Array) -> Array:
    """[T, B, N] as [T*B, N]: one GEMM over every step (a reshape of contiguous memory, no copy)."""
    return a.reshape(-1, a.shape[-1])


def _add_bias(a: Array, b: Array | None) -> Array:
    return a if b is None else a + leading(b, a.ndim)


def _as_bits(a: Array | None) -> Array | None:
    """A bfloat16 array as its bits (uint16), to stack it in a scan: XLA:CPU computes a bfloat16 dynamic-update-slice
    in float32 over the whole stacked array, rewriting all T steps at every step, where it updates integers in place
    (GRU T=25 B=64 H=1024 training step: four such arrays, 100 rewrites of up to 10 MB)."""
    return lax.bitcast_convert_type(a, jnp.uint16) if a is not None and a.dtype == jnp.bfloat16 else a


def _from_bits(a: Array | None, dtype: Any) -> Array | None:
    """``_as_bits``'s inverse for an array that was ``dtype``."""
    return lax.bitcast_convert_type(a, dtype) if a is not None and a.dtype == jnp.uint16 else a


def _stepper(w: Array, rows: int, transpose: bool):
    """``v -> v @ op(w)`` in float32 for the [rows, K] products of every step: ``w`` packed once (outside the scan)
    into the layout oneDNN's kernels read, which a plain product would copy it into at every step."""
    packed = kernels.pack_weights(w, rows, transpose_b=transpose)
    return lambda v: kernels.matmul_packed(
        v.astype(w.dtype), packed, rows=rows, b_shape=tuple(w.shape), transpose_b=transpose
    )


# ----------------------------------------------------------------------------------------------------------------------
# One layer and direction: the input products of every step at once, one recurrent product per step; its gradient by a
# backward scan, then one GEMM each for the input's gradient and every weight's.
# ----------------------------------------------------------------------------------------------------------------------


def _gate_pieces(cell: Cell, width: int) -> list[tuple[int, int]]:
    """The [start, stop) columns of each array ``cell.gate_inputs`` splits a [..., width] input projection into."""
    shapes = jax.eval_shape(cell.gate_inputs, jax.ShapeDtypeStruct((1, width), jnp.float32))
    bounds = [0]
    for shape in shapes:
        bounds.append(bounds[-1] + shape.shape[-1])
    return list(itertools.pairwise(bounds))


def _input_products(cell: Cell, x: Array, w_in: Array | None, num_gates: int) -> tuple[Array, ...]:
    """W x for every step (the bias is added in the recurrence), as the step reads it (``cell.gate_inputs``): one GEMM
    per piece, so that no piece is copied out of a whole [T, B, G*H] product; skip input feeds x itself to every
    gate."""
    if w_in is None:
        return cell.gate_inputs(jnp.tile(x.astype(jnp.float32), (1, 1, num_gates)))
    rows = _rows(x)
    return tuple(
        _mm(rows, w_in[start:stop], transpose_b=True).reshape(*x.shape[:-1], stop - start)
        for start, stop in _gate_pieces(cell, w_in.shape[0])
    )


@functools.partial(custom_vjp, nondiff_argnums=(0, 1, 2))
def _layer(cell: Cell, reverse: bool, out_dtype: Any, x, w_in, b_in, w_rec, b_rec, w_proj, h0, c0):
    """x [T, B, in] (the network's dtype, or float32), w_in [G*H, in] or None (skip input), b_in/b_rec [G*H] or None
    (float32), w_rec [G*H, P], w_proj [P, H] or None, h0 [B, P], c0 [B, H] or None (float32 states). Returns
    (ys [T, B, P] in ``out_dtype``, h_n, c_n or None in float32)."""
    return _forward(cell, reverse, out_dtype, x, w_in, b_in, w_rec, b_rec, w_proj, h0, c0, save=False)[0]


def _forward(cell, reverse, out_dtype, x, w_in, b_in, w_rec, b_rec, w_proj, h0, c0, save):
    """The input products and the forward scan; with ``save`` also what the backward pass needs: the cell's saved
    gates, the states each step read (h also as the GEMM read it, for the weight gradient) and the unprojected
    outputs."""
    xps = _input_products(cell, x, w_in, w_rec.shape[0] // cell.num_gates)
    recurrent = _stepper(w_rec, h0.shape[0], transpose=True)  # h @ w_rec^T
    b_ins = None if b_in is None else cell.gate_inputs(b_in[None])

    def step(carry, xps_t):
        h, c = carry
        if b_ins is not None:
            xps_t = tuple(x_t + b for x_t, b in zip(xps_t, b_ins, strict=True))
        h_gemm = h.astype(w_rec.dtype)
        hp = _add_bias(recurrent(h_gemm), b_rec)
        h_full, c_new, saved = cell.step(xps_t, hp, h, c, None)
        h_new = h_full if w_proj is None else _mm(h_full, w_proj, transpose_b=True)
        y = _as_bits(h_new.astype(out_dtype))
        stacked = (y, saved, h, _as_bits(h_gemm), c, None if w_proj is None else h_full) if save else (y,)
        return (h_new, c_new), stacked

    (h_n, c_n), stacked = lax.scan(step, (h0, c0), xps, reverse=reverse)
    ys, saved = _from_bits(stacked[0], out_dtype), stacked[1:]
    if save:
        saved = (saved[0], saved[1], _from_bits(saved[2], w_rec.dtype), *saved[3:])
    return (ys, h_n, c_n), saved


def _layer_fwd(cell, reverse, out_dtype, x, w_in, b_in, w_rec, b_rec, w_proj, h0, c0):
    outputs, saved = _forward(cell, reverse, out_dtype, x, w_in, b_in, w_rec, b_rec, w_proj, h0, c0, save=True)
    return outputs, (x, w_in, b_in is not None, w_rec, b_rec is not None, w_proj, *saved)


def _layer_bwd(cell, reverse, out_dtype, residuals, cotangents):
    x, w_in, has_b_in, w_rec, has_b_rec, w_proj, saved, h_prev, h_gemm, c_prev, h_full = residuals
    d_ys, dh_n, dc_n = cotangents
    recurrent = _stepper(w_rec, dh_n.shape[0], transpose=False)  # d_hp @ w_rec
    width = w_rec.shape[0]

    def step(carry, inputs):
        dh, dc, d_b_in, d_b_rec = carry  # dh, dc: gradients w.r.t. the state after this step; the biases' sums
        d_y, saved_t, h, c = inputs
        dh_new = dh + d_y.astype(dh.dtype)
        dh_full = dh_new if w_proj is None else _mm(dh_new, w_proj)
        d_xp, d_hp, dh_direct, dc_prev, _ = cell.step_backward(saved_t, h, c, dh_full, dc, None)
        dh_prev = recurrent(d_hp)
        dh_prev = dh_prev if dh_direct is None else dh_prev + dh_direct
        # The gate gradients leave the step in the GEMMs' dtype; the biases' sums stay in float32.
        d_b_in, d_b_rec = d_b_in + d_xp.sum(axis=0), d_b_rec + d_hp.sum(axis=0)
        stacked = (
            _as_bits(d_xp.astype(w_rec.dtype)),
            None if d_hp is d_xp else _as_bits(d_hp.astype(w_rec.dtype)),
            None if w_proj is None else _as_bits(dh_new.astype(w_proj.dtype)),
        )
        return (dh_prev, dc_prev, d_b_in, d_b_rec), stacked

    zeros = jnp.zeros((width,), jnp.float32)
    (dh0, dc0, d_b_in, d_b_rec), stacked = lax.scan(
        step, (dh_n, dc_n, zeros, zeros), (d_ys, saved, h_prev, c_prev), reverse=not reverse
    )
    d_xp, d_hp, dh_proj = (_from_bits(a, w_rec.dtype) for a in stacked)
    d_hp = d_xp if d_hp is None else d_hp
    d_w_rec = _mm(_rows(d_hp), _rows(h_gemm), transpose_a=True).astype(w_rec.dtype)  # [G*H, P]: sum over steps
    d_w_proj = None
    if w_proj is not None:
        d_w_proj = _mm(_rows(dh_proj), _rows(h_full), transpose_a=True).astype(w_proj.dtype)
    if w_in is None:  # skip input: x entered every gate
        d_w_in = None
        dx = d_xp.astype(jnp.float32).reshape(*d_xp.shape[:-1], cell.num_gates, -1).sum(-2).astype(x.dtype)
    else:
        dx = kernels.matmul(_rows(d_xp), w_in, out_dtype=x.dtype if x.dtype == w_in.dtype else jnp.float32)
        dx = dx.reshape(x.shape).astype(x.dtype)
        d_w_in = _mm(_rows(d_xp), _rows(x), transpose_a=True).astype(w_in.dtype)  # [G*H, in]
    return (
        dx,
        d_w_in,
        d_b_in if has_b_in else None,
        d_w_rec,
        d_b_rec if has_b_rec else None,
        d_w_proj,
        dh0,
        dc0,
    )


_layer.defvjp(_layer_fwd, _layer_bwd)


# ----------------------------------------------------------------------------------------------------------------------
# The network.
# ----------------------------------------------------------------------------------------------------------------------


def _direction(config: RNNConfig, x, weights, h0, c0, reverse: bool, last: bool):
    """One layer and direction; its outputs in the network's dtype where they are the network's, else in float32 (the
    next layer's GEMMs round them, and their gradient stays float32, as the xla implementation's)."""
    w_in, w_rec, w_proj, b_in, b_rec = weights
    out_dtype = config.dtype if last else jnp.float32
    return _layer(config.cell, reverse, out_dtype, x, w_in, b_in, w_rec, b_rec, w_proj, h0, c0)


def rnn(params, x, h0, c0, config: RNNConfig) -> tuple[Any, Any, Any]:
    """The whole network (every layer and direction, no lengths, no dropout): (y, h_n, c_n or None) in
    ``config.dtype``; arguments as ``jax_cudnn_rnn.rnn``'s."""
    f32 = jnp.float32
    # Each layer's GEMMs round their input to the weights' dtype and give its gradient in the input's dtype: two
    # directions' gradients of x add up in float32, as the xla implementation's, and are rounded once.
    layer_input = x.astype(f32) if config.num_directions == 2 else x
    weights = [
        tuple(None if w is None else (w if i < 3 else w.astype(f32)) for i, w in enumerate(groups))
        for groups in layout.unpack(params, config)
    ]
    h_n, c_n = [], []
    for layer in range(config.num_layers):
        outputs = []
        for direction in range(config.num_directions):
            index = layer * config.num_directions + direction
            ys, h_last, c_last = _direction(
                config,
                layer_input,
                weights[index],
                h0[index].astype(f32),
                None if c0 is None else c0[index].astype(f32),
                direction == 1,
                layer == config.num_layers - 1,
            )
            outputs.append(ys)
            h_n.append(h_last)
            c_n.append(c_last)
        layer_input = outputs[0] if len(outputs) == 1 else jnp.concatenate(outputs, axis=-1)
    dtype = config.dtype
    return (
        layer_input.astype(dtype),
        jnp.stack(h_n).astype(dtype),
        None if c0 is None else jnp.stack(c_n).astype(dtype),
    )
