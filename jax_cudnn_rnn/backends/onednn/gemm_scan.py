"""The layer of "onednn:gemm" (jax_cudnn_rnn/backends/onednn/gemm.py) as a ``lax.scan`` around oneDNN's matmul, the
cell's arithmetic in XLA: what runs an LSTM with a projection, which the recurrence handlers in C++ do not take.

Per layer and direction, the input product of all time steps is one GEMM per piece the step reads, the scan carries
one recurrent GEMM per step (on packed weights) and the projection's, with the cell's step (jax_cudnn_rnn/cells/) fused
around them by XLA, and a hand-written backward scan emits the gate gradients, after which the weight gradients are one
GEMM each over all steps. bfloat16 runs its GEMMs in bfloat16 with float32 accumulation and everything else in
float32, as the xla implementation does.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax_cudnn_rnn.backends.custom_vjp import custom_vjp
from jax_cudnn_rnn.backends.onednn import kernels
from jax_cudnn_rnn.cells import Cell
from jax_cudnn_rnn.cells.spec import leading

Array = jax.Array


def mm(a: Array, b: Array, transpose_a: bool = False, transpose_b: bool = False) -> Array:
    """op(a) @ op(b) in float32, ``a`` rounded to ``b``'s dtype first (bfloat16 weights: a bfloat16 GEMM with float32
    accumulation); 2-D operands (``rows`` flattens time and batch)."""
    return kernels.matmul(a.astype(b.dtype), b, transpose_a=transpose_a, transpose_b=transpose_b)


def rows(a: Array) -> Array:
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


def _stepper(w: Array, num_rows: int, transpose: bool):
    """``v -> v @ op(w)`` in float32 for the [num_rows, K] products of every step: ``w`` packed once (outside the scan)
    into the layout oneDNN's kernels read, which a plain product would copy it into at every step."""
    packed = kernels.pack_weights(w, num_rows, transpose_b=transpose)
    return lambda v: kernels.matmul_packed(
        v.astype(w.dtype), packed, rows=num_rows, b_shape=tuple(w.shape), transpose_b=transpose
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
    x_rows = rows(x)
    return tuple(
        mm(x_rows, w_in[start:stop], transpose_b=True).reshape(*x.shape[:-1], stop - start)
        for start, stop in _gate_pieces(cell, w_in.shape[0])
    )


@functools.partial(custom_vjp, nondiff_argnums=(0, 1, 2))
def layer(cell: Cell, reverse: bool, out_dtype: Any, x, w_in, b_in, w_rec, b_rec, w_proj, h0, c0):
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
        h_new = h_full if w_proj is None else mm(h_full, w_proj, transpose_b=True)
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
        dh_full = dh_new if w_proj is None else mm(dh_new, w_proj)
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
    d_w_rec = mm(rows(d_hp), rows(h_gemm), transpose_a=True).astype(w_rec.dtype)  # [G*H, P]: sum over steps
    d_w_proj = None
    if w_proj is not None:
        d_w_proj = mm(rows(dh_proj), rows(h_full), transpose_a=True).astype(w_proj.dtype)
    if w_in is None:  # skip input: x entered every gate
        d_w_in = None
        dx = d_xp.astype(jnp.float32).reshape(*d_xp.shape[:-1], cell.num_gates, -1).sum(-2).astype(x.dtype)
    else:
        dx = kernels.matmul(rows(d_xp), w_in, out_dtype=x.dtype if x.dtype == w_in.dtype else jnp.float32)
        dx = dx.reshape(x.shape).astype(x.dtype)
        d_w_in = mm(rows(d_xp), rows(x), transpose_a=True).astype(w_in.dtype)  # [G*H, in]
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


layer.defvjp(_layer_fwd, _layer_bwd)
