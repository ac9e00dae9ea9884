"""implementation="xla": the fast pure-JAX path over the opaque buffer.

Per layer and direction, the input projection of all time steps is one GEMM outside the scan, the scan carries only
the recurrent GEMM, and a ``jax.custom_vjp`` backward pass runs one reverse scan that emits the gate gradients, then
forms the recurrent weight gradient as one GEMM over all time steps (the input-side gradients follow from autodiff of
the outer GEMM, also one GEMM each). The cells' steps are jax_cudnn_rnn/cells/'s, the layer loop
jax_cudnn_rnn/backends/layers.py's.

A config with other activations than the cell's own, a cell without a fast step (the reset-before GRU) or a call with
recurrent dropout runs the cell's ``general_step`` instead (``layers.scan_general``, after the same input GEMM),
differentiated by JAX. So is a call under ``jax.vmap`` (``_mapped_direction``: an Equinox module's sequences), whose
custom_vjp JAX would run per mapped element.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jax_cudnn_rnn._buffer import Pieces, as_buffer
from jax_cudnn_rnn.backends import cpu_info, layers, registry
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.custom_vjp import custom_vjp
from jax_cudnn_rnn.cells import Cell

Array = jax.Array


# ----------------------------------------------------------------------------------------------------------------------
# Fast recurrence with a hand-written backward pass.
# ----------------------------------------------------------------------------------------------------------------------


class Recurrence(NamedTuple):
    """What one direction's recurrence is specialised on (the custom_vjp's static argument): the cell, whether it reads
    time backwards, the LSTM's cell clip, and the matmul precision its backward pass runs under (JAX traces it after
    the forward's context, set once around the layer loop by ``layers.run_layers``, has closed)."""

    cell: Cell
    reverse: bool
    cell_clip: float | None
    precision: str


class RecurrenceInputs(NamedTuple):
    """One direction's arrays over precomputed input projections: xp [T, B, G*H] without its bias; b_in [G*H] or None
    (added inside each step's elementwise fusion: a separate pass over xp cost 7 ms of the CPU LSTM's training step);
    w_rec [G*H, P], b_rec [G*H] or None, w_proj [P, H] or None; h0 [B, P], c0 [B, H] or None; mask [T, B, 1] bool
    or None; reset [T, B, 1] bool or None (zero the state entering the step, in scan order). P = H without
    projection."""

    xp: Array
    b_in: Array | None
    w_rec: Array
    b_rec: Array | None
    w_proj: Array | None
    h0: Array
    c0: Array | None
    mask: Array | None
    reset: Array | None


@functools.partial(custom_vjp, nondiff_argnums=(0,))
def _recurrence(static: Recurrence, arrays: RecurrenceInputs):
    """Runs the recurrence over precomputed input projections. Returns (ys [T, B, P], h_n [B, P], c_n [B, H] or
    None)."""
    with jax.default_matmul_precision(static.precision):
        outputs, _ = _scan_cells(static, arrays, save=False)
    return outputs


_NT = (((1,), (1,)), ((), ()))  # a [B, K], w [N, K] -> [B, N]
_NN = (((1,), (0,)), ((), ()))  # a [B, K], w [K, N] -> [B, N]


def _dot(a: Array, w: Array, dims) -> Array:
    """``lax.dot_general(a, w, dims)``; for bfloat16 weights, ``a`` is rounded to bfloat16 and the product accumulates
    in float32 (what cuDNN and oneDNN do): XLA:CPU's bfloat16 GEMM runs at about twice the float32 rate on AVX512-BF16
    (LSTM T100 B32 H256, one core: forward 43 -> 23 ms, training step 152 -> 106 ms)."""
    if w.dtype == jnp.bfloat16:
        return lax.dot_general(a.astype(w.dtype), w, dims, preferred_element_type=jnp.float32)
    return lax.dot_general(a, w, dims)


def _recurrent_matmul(h: Array, w_rec: Array) -> Array:
    """h @ w_rec.T as [B, G*H], contracting w_rec's second axis directly (no transposed copy)."""
    return _dot(h, w_rec, _NT)


def _scan_cells(static: Recurrence, arrays: RecurrenceInputs, save: bool):
    """The forward scan; with ``save`` it also stacks, per step, what the backward pass needs."""
    cell, b_in, w_rec, b_rec, w_proj = static.cell, arrays.b_in, arrays.w_rec, arrays.b_rec, arrays.w_proj
    b_ins = None if b_in is None else cell.gate_inputs(b_in[None])  # [1, G*H]: added to each step's [B, G*H]

    def step(carry, inputs):
        xps_t, mask_t, reset_t = inputs
        h, c = (layers.zeroed(reset_t, state) for state in carry)
        if b_ins is not None:
            xps_t = tuple(xp_t + b for xp_t, b in zip(xps_t, b_ins, strict=True))
        hp = layers.add_bias(_recurrent_matmul(h, w_rec), b_rec)
        h_full, c_new, saved = cell.step(xps_t, hp, h, c, static.cell_clip)
        h_new = h_full if w_proj is None else _dot(h_full, w_proj, _NT)
        y = h_new if mask_t is None else jnp.where(mask_t, h_new, 0)
        return (layers.masked(mask_t, h_new, h), layers.masked(mask_t, c_new, c)), ((y, saved, h, c) if save else (y,))

    scanned = (cell.gate_inputs(arrays.xp), arrays.mask, arrays.reset)
    (h_n, c_n), stacked = lax.scan(step, (arrays.h0, arrays.c0), scanned, reverse=static.reverse)
    return (stacked[0], h_n, c_n), stacked[1:]


def _recurrence_fwd(static: Recurrence, arrays: RecurrenceInputs):
    # Under the call's precision here, not only inside layers.run_layers's context: JAX may trace a custom_vjp's
    # forward rule after that context has closed (under jax.grad, in the branch of the cuDNN backend's lax.cond that
    # runs this implementation beyond max_segments), and a GPU then ran its GEMMs in TF32 (seen on an H200).
    with jax.default_matmul_precision(static.precision):
        outputs, (saved, h_prev, c_prev) = _scan_cells(static, arrays, save=True)
    residuals = (
        arrays.b_in is not None,
        arrays.w_rec,
        arrays.b_rec is not None,
        arrays.w_proj,
        saved,
        h_prev,
        c_prev,
        arrays.mask,
        arrays.reset,
    )
    return outputs, residuals


def _recurrence_bwd(static: Recurrence, residuals, cotangents):
    with jax.default_matmul_precision(static.precision):
        return (_backward(static, residuals, cotangents),)


def _backward(static: Recurrence, residuals, cotangents) -> RecurrenceInputs:
    """Every cotangent of ``RecurrenceInputs`` (None for the masks) from the forward's residuals."""
    cell, cell_clip = static.cell, static.cell_clip
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
        dh_full = dh_new if w_proj is None else _dot(dh_new, w_proj, _NN)
        d_xp, d_hp, dh_direct, dc_prev, h_full = cell.step_backward(saved_t, h, c, dh_full, dc, cell_clip)
        dh_prev = layers.add_bias(_dot(d_hp, w_rec, _NN), dh_direct)
        if mask_t is not None:
            dh_prev = dh_prev + dh_pass
            if dc_prev is not None:
                dc_prev = dc_prev + dc_pass
        stacked = (d_xp, None if d_hp is d_xp else d_hp, None if w_proj is None else (dh_new, h_full))
        return (layers.zeroed(reset_t, dh_prev), layers.zeroed(reset_t, dc_prev)), stacked

    (dh0, dc0), (d_xp, d_hp, proj_terms) = lax.scan(
        step, (dh_n, dc_n), (d_ys, saved, h_prev, c_prev, mask, reset), reverse=not static.reverse
    )
    # Weight gradients as one GEMM each, contracting time and batch together. Written as einsums over (t, b) rather
    # than reshapes to [T*B, ...], so that a batch-sharded computation reduces partial sums instead of gathering.
    d_hp = d_xp if d_hp is None else d_hp
    d_w_rec = _weight_gradient(h_prev, d_hp, w_rec.dtype)
    d_b_rec = d_hp.sum(axis=(0, 1)) if has_b_rec else None
    d_w_proj = None if proj_terms is None else _einsum("tbp,tbh->ph", *proj_terms, w_proj.dtype).astype(w_proj.dtype)
    d_b_in = d_xp.sum(axis=(0, 1)) if has_b_in else None
    return RecurrenceInputs(d_xp, d_b_in, d_w_rec, d_b_rec, d_w_proj, dh0, dc0, None, None)


_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


def _einsum(spec: str, a: Array, b: Array, dtype: Any) -> Array:
    """``jnp.einsum(spec, a, b)``; for bfloat16 ``dtype`` with both operands rounded to it and float32 accumulation."""
    if dtype == jnp.bfloat16:
        return jnp.einsum(spec, a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)
    return jnp.einsum(spec, a, b)


def _weight_gradient(a: Array, d: Array, dtype: Any) -> Array:
    """sum over (t, b) of d[t, b]^T a[t, b]: [T, B, A], [T, B, G] -> [G, A] in ``dtype``, one GEMM (``_einsum``).

    Computed as (a^T d)^T behind an optimization barrier, which keeps XLA from folding the transpose back into the
    dot: XLA:CPU's GEMM then copies the transposed a ([T*B, A], the narrower operand) instead of d ([T*B, G*H]); the
    two copies of d the LSTM's weight gradients made cost 12 ms of the CPU training step (T100 B32 H256, one thread).
    """
    return lax.optimization_barrier(_einsum("tba,tbg->ag", a, d, dtype)).T.astype(dtype)


@functools.partial(custom_vjp, nondiff_argnums=(2,))
def _input_gemm(x: Array, w_in: Array, precision: str) -> Array:
    """x W_in^T for every time step at once, [T, B, in] -> [T, B, G*H]; its weight gradient by ``_weight_gradient``
    (each under ``precision`` itself: JAX may trace either rule outside the forward's context)."""
    with jax.default_matmul_precision(precision):
        return _einsum("tbi,gi->tbg", x, w_in, w_in.dtype)


def _input_gemm_fwd(x, w_in, precision):
    return _input_gemm(x, w_in, precision), (x, w_in)


def _input_gemm_bwd(precision, residuals, d_xp):
    x, w_in = residuals
    with jax.default_matmul_precision(precision):
        return (_einsum("tbg,gi->tbi", d_xp, w_in, w_in.dtype).astype(x.dtype), _weight_gradient(x, d_xp, w_in.dtype))


_input_gemm.defvjp(_input_gemm_fwd, _input_gemm_bwd)


def _input_projection(x: Array, w_in: Array | None, num_gates: int, precision: str) -> Array:
    """W x for every time step at once (the bias is added by the recurrence): [T, B, in] -> [T, B, G*H]. Skip input
    feeds x itself to every gate."""
    if w_in is None:
        return jnp.tile(x, (1, 1, num_gates))
    return _input_gemm(x, w_in, precision)


def _general_direction(direction: layers.Direction, arrays: layers.DirectionInputs):
    """The input GEMM for every step at once, then the cell's ``general_step`` in a scan that JAX differentiates."""
    config = direction.config
    cell = config.cell
    w_in, b_in = arrays.weights[0], arrays.weights[3]
    xps = cell.gate_inputs(_input_projection(arrays.x, w_in, config.num_gates, direction.precision))
    b_ins = None if b_in is None else cell.gate_inputs(b_in)

    def gate_inputs_of(xps_t):
        return xps_t if b_ins is None else tuple(layers.add_bias(a, b) for a, b in zip(xps_t, b_ins, strict=True))

    return layers.scan_general(direction, xps, gate_inputs_of, arrays)


def _fast_direction(direction: layers.Direction, arrays: layers.DirectionInputs):
    config = direction.config
    if config.cell.step is None or not config.default_activations or arrays.rmask is not None:
        return _general_direction(direction, arrays)
    w_in, w_rec, w_proj, b_in, b_rec = arrays.weights
    if config.dtype == jnp.bfloat16:  # the matrices back in their own dtype (exact): bfloat16 GEMMs (_dot, _einsum)
        w_in, w_rec, w_proj = (None if w is None else w.astype(jnp.bfloat16) for w in (w_in, w_rec, w_proj))
    xp = _input_projection(arrays.x, w_in, config.num_gates, direction.precision)
    static = Recurrence(config.cell, direction.reverse, config.cell_clip, direction.precision)
    recurrence = RecurrenceInputs(xp, b_in, w_rec, b_rec, w_proj, arrays.h0, arrays.c0, arrays.mask, arrays.reset)
    return _recurrence(static, recurrence)


def _mapped_direction(direction: layers.Direction, arrays: layers.DirectionInputs):
    """A direction under ``jax.vmap`` (``Call.mapped``: an Equinox module's sequences): the fast path's forward, and
    JAX's own derivatives of ``_stepwise_direction`` without a custom_vjp (a ``jax.custom_jvp``). JAX batches a
    custom_vjp's backward per mapped element, each element's weight gradient a product of its own rows, summed after;
    its own transpose of the vmapped products takes every element's rows in one (an Equinox LSTM's gradient, H=128,
    T=25, 64 sequences, Intel AMX: 46 ms against 14.5 here and Equinox's own cells' 13.0)."""

    @jax.custom_jvp
    def run(arrays: layers.DirectionInputs):
        return _fast_direction(direction, arrays)

    @run.defjvp
    def run_jvp(primals, tangents):
        with jax.default_matmul_precision(direction.precision):
            return jax.jvp(functools.partial(_stepwise_direction, direction), primals, tangents)

    return run(arrays)


def _stepwise_direction(direction: layers.Direction, arrays: layers.DirectionInputs):
    """The cell's ``general_step`` in a scan with each step's input product inside it and every product the weights
    times the rows' transpose, as Equinox's cells run under ``jax.vmap``: what JAX differentiates for a mapped call
    (``_mapped_direction``). ``_general_direction``'s input product for every step at once made, under vmap, passes
    over [T, rows, G*H] arrays in the mapped layout and their transposing copies, forward and back, and its products
    of the rows first ran slower at the mapped rows: an Equinox LSTM's gradient (H=256, T=50, 32 sequences, Intel
    AMX, one process each) took 66 ms that way, 50 with the input product per step, 42 with the weights first too;
    Equinox's cells 41-44."""
    config = direction.config
    w_in, b_in = arrays.weights[0], arrays.weights[3]

    def gate_inputs_of(x_t):
        xp = jnp.tile(x_t, (1, config.num_gates)) if w_in is None else (w_in @ x_t.T).T
        return config.cell.gate_inputs(layers.add_bias(xp, b_in))

    return layers.scan_general(direction, arrays.x, gate_inputs_of, arrays, weights_first=True)


class _Gates:
    """Gates' arrays [..., H] apart, read by a cell's ``general_step`` as if side by side ([..., G*H]): its sums of
    such (``+``) stay apart and its ``split_gates`` slices give each gate's array back. A concatenation instead, sliced
    by the step, became pads and adds of [B, G*H] in the gradient (XLA does not see through them): 6-10 more passes
    in a one-step training call."""

    def __init__(self, gates: list[Array]):
        self.gates = gates

    @property
    def shape(self) -> tuple[int, ...]:
        first = self.gates[0].shape
        return (*first[:-1], first[-1] * len(self.gates))

    def __add__(self, other: _Gates) -> _Gates:
        return _Gates([a + b for a, b in zip(self.gates, other.gates, strict=True)])

    def __getitem__(self, index: tuple[Any, slice]) -> Array:
        units = self.gates[0].shape[-1]
        columns = index[-1]
        if columns.start % units == 0 and columns.stop - columns.start == units:
            return self.gates[columns.start // units]
        return jnp.concatenate(self.gates, axis=-1)[index]


def _gates(arrays: list[Array]) -> Any:
    """One gate's array as it is, several as ``_Gates``."""
    return arrays[0] if len(arrays) == 1 else _Gates(arrays)


def _step_direction(direction: layers.Direction, arrays: layers.DirectionInputs, joined: bool = False):
    """A call of one time step: the cell's ``general_step`` once (no scan of one iteration, no custom_vjp: JAX
    differentiates it), as Flax's cells run a step, over a frontend's tensors as ``layers.gate_weights`` gives them,
    each where it lies: one product per gate as a Flax cell's Dense layers (no copy of the weights). ``joined``: the
    weights do not change from one step to the next (``call.loop_invariant_weights``), so each matrix's gates are
    concatenated, which XLA does once before the loop, and each step runs one product per matrix, as Flax's
    ``OptimizedLSTMCell`` (config G decoding, B=1: a third of the time of the per-gate products on a 2-core Zen 3). Its
    products each carry the call's precision, which the gradient's products inherit."""
    config = direction.config
    cell = config.cell
    w_in, w_rec, w_proj, b_in, b_rec = arrays.weights
    precision = lax.Precision.HIGHEST if direction.precision == "float32" else lax.Precision.DEFAULT
    activation, recurrent_activation = config.activation_functions
    half = config.dtype == jnp.bfloat16  # the matrices back in their own dtype (exact): bfloat16 products, as _dot's

    def matmul(v: Array, matrix: Array, dims) -> Array:
        if half:
            matrix = matrix.astype(jnp.bfloat16)
            out = lax.dot_general(v.astype(matrix.dtype), matrix, dims, precision, preferred_element_type=jnp.float32)
        elif dims is _NT:
            out = _nt_product(v, matrix, precision)
        else:
            out = lax.dot_general(v, matrix, dims, precision)
        return out.astype(v.dtype)

    def products(v: Array, w, b, gates: range, masks: Array | None = None):
        """[v W_k^T + b_k for k in ``gates``]: v [B, in]; w, b the ``_buffer.Group``s of a matrix and its biases (b
        None: none); ``masks`` [G, B, in] (recurrent dropout: v * masks[k] for gate k). Each tensor where it lies."""
        if (joined or w.stacked) and masks is None and len(gates) > 1:
            # [in, len*H], each gate's [in, H] side by side (NN): by [len*H, in] (NT) a pure-JAX copy of config G's
            # decoding at B=64 took 1.18-1.29x as long (2-core Zen 3). Gates stacked in one array (an nnx cell's
            # kernel) are that array again: one product as the cell's, no copy of each gate's columns (nnx's GRU
            # step at B=4, H=I=512: 0.70 ms per gate against 0.38 for nnx.GRUCell, Intel AMX), in the order its
            # blocks lie there (a Keras GRU's kernel: z, r, n)
            order = [k for k in w.order if k in gates] if w.stacked else list(gates)
            matrix = jnp.concatenate([w.gates[k] if w.transposed[k] else w.gates[k].T for k in order], axis=1)
            out = matmul(v, matrix, _NN)
            units = out.shape[-1] // len(order)
            columns = {k: out[..., i * units : (i + 1) * units] for i, k in enumerate(order)}
            outs = [columns[k] for k in gates]
        else:
            outs = []
            for k in gates:
                vk = v if masks is None else v * masks[k]
                # XLA:CPU copies a transposed operand of a matrix-vector product instead of reading it transposed
                outs.append(matmul(vk, w.gates[k], _NN if w.transposed[k] else _NT))
        biases = [None] * len(gates) if b is None else [b.gates[k] for k in gates]
        return [layers.add_bias(o, bias) for o, bias in zip(outs, biases, strict=True)]

    gates = range(config.num_gates)
    x_t = arrays.x[0]
    if w_in is None:  # skip input: x itself enters every gate
        biases = [None] * len(gates) if b_in is None else list(b_in.gates)
        xp = [layers.add_bias(x_t, bias) for bias in biases]
    else:
        xp = products(x_t, w_in, b_in, gates)
    xps = cell.gate_inputs(_gates(xp))

    def recurrent(v: Array, chosen: slice) -> Any:
        return _gates(products(v, w_rec, b_rec, range(chosen.start, chosen.stop), arrays.rmask))

    mask_t = None if arrays.mask is None else arrays.mask[0]
    reset_t = None if arrays.reset is None else arrays.reset[0]
    h, c = layers.zeroed(reset_t, arrays.h0), layers.zeroed(reset_t, arrays.c0)
    h_full, c_new = cell.general_step(xps, recurrent, h, c, config.cell_clip, activation, recurrent_activation)
    h_new = h_full if w_proj is None else products(h_full, w_proj, None, range(1))[0]
    y = h_new if mask_t is None else jnp.where(mask_t, h_new, 0)
    return y[None], layers.masked(mask_t, h_new, h), layers.masked(mask_t, c_new, c)


#: The largest batch whose product with a weight held [N, K] (``_NT``) runs as one matrix-vector product per row
#: where the CPU has no AVX-512, and the smallest such weight: at H=I=128 the rows took as long as the one product (4
#: gates), and the step's GRU, with 6 products of B rows each, 0.165 ms where the one product per gate took 0.127 (B=4,
#: a 2-core Zen 3).
_ROWS_MAX_BATCH = 4
_ROWS_MIN_SIZE = 256 * 256

#: The largest batch whose product with a weight held [N, K] runs as the weight times the rows' transpose (two rows
#: or more) where the CPU has AVX-512: 4 gates' products at B=2-16, H=I=128-512, float32, on an Intel Xeon with AMX
#: (2026-11-29) took 0.67-0.89 of the plain product's time at H=512 (B=4: 0.176 ms against 0.256; Flax's kernels held
#: [K, N]: 0.190) and 0.78-0.97 at H=128; at B=32 within 5 % either way, at B=64 1.10x slower. One row alone runs as
#: fast either way (a matrix-vector product: 4 gates at H=512 0.173 ms against 0.181, at H=128 0.016 against 0.014):
#: the plain one.
_TRANSPOSED_MAX_BATCH = 16


def _nt_product(v: Array, w: Array, precision: Any) -> Array:
    """v [B, K] times w [N, K] transposed ([B, N]) in the form this CPU runs fastest for B rows (``_nt_by_batch``),
    one row as ``_one_row``: a step under ``jax.vmap`` (the Equinox modules run one sequence, vmapped over the batch
    by their users) is traced at one row, and the form is chosen again by the rows it is batched to."""
    return _one_row(v, w, precision) if v.shape[0] == 1 else _nt_by_batch(v, w, precision)


def _nt_by_batch(v: Array, w: Array, precision: Any) -> Array:
    """v [B, K] times w [N, K] transposed ([B, N]) in the form this CPU runs fastest for B rows: XLA:CPU's product of
    a few rows with a transposed operand packs that operand at every call. Without AVX-512 (a Zen 3, AVX2) B
    matrix-vector products (``_nt_by_rows``) for 2-4 rows and a weight of 256 x 256 or more; with it (where the rows
    lost: the named GRU's step at B=4, H=I=512 0.667 ms by rows against 0.434 as one product) w times v transposed
    (``_nt_transposed``) for 2-16 rows; else the one product. By /proc/cpuinfo's flags, measured on those two CPUs: a
    Zen 4, whose AVX-512 runs in 256-bit halves, follows the AVX-512 rule untimed. The form is the CPU's only
    (``lax.platform_dependent``): lowered for any other platform (a GPU, a TPU, whose hosts' flags say nothing of
    them) the product is the plain one, without the form's barriers."""
    batch = v.shape[0]
    form = None
    if "avx512f" in cpu_info.flags():
        if 1 < batch <= _TRANSPOSED_MAX_BATCH:
            form = _nt_transposed
    elif 1 < batch <= _ROWS_MAX_BATCH and w.size >= _ROWS_MIN_SIZE:
        form = _nt_by_rows

    def plain(v: Array, w: Array) -> Array:
        return lax.dot_general(v, w, _NT, precision)

    if form is None:
        return plain(v, w)
    return lax.platform_dependent(v, w, cpu=lambda v, w: form(v, w, precision), default=plain)


def _with_nt_tangent(product):
    """``product`` (v [B, K], w [N, K], precision -> v w^T, another form of the one product) as a ``custom_jvp`` whose
    tangent is the plain products' own, so that the gradient's products are those of one product (one weight-gradient
    product, not B outer products; no transposes of the form's barriers), without the term of an argument not
    differentiated (a symbolic zero: instantiated, its product would run in every gradient's forward)."""
    wrapped = jax.custom_jvp(product, nondiff_argnums=(2,))

    def jvp(precision: Any, primals, tangents):
        (v, w), (dv, dw) = primals, tangents
        terms = []
        if not isinstance(dv, jax.custom_derivatives.SymbolicZero):
            terms.append(lax.dot_general(dv, w, _NT, precision))
        if not isinstance(dw, jax.custom_derivatives.SymbolicZero):
            terms.append(lax.dot_general(v, dw, _NT, precision))
        out = wrapped(v, w, precision)
        return out, functools.reduce(jnp.add, terms) if terms else jnp.zeros_like(out)

    wrapped.defjvp(jvp, symbolic_zeros=True)
    return wrapped


@functools.cache
def _one_row_batching(precision: Any):
    """One row times a weight held transposed, as the one product, whose ``jax.vmap`` is ``_nt_by_batch`` of the rows
    it is batched to (a weight batched too, models vmapped together: each example's plain product). Equinox's LSTM
    step at B=4, H=512 took 1.31x Flax's cell with the one product under vmap and 1.06 with the transposed form;
    that form at one row for every batch cost its GRU at B=64, H=128 1.16-1.23x."""

    @jax.custom_batching.custom_vmap
    def product(v: Array, w: Array) -> Array:
        return _nt_by_batch(v, w, precision)

    @product.def_vmap
    def batched(axis_size: int, in_batched: Any, v: Array, w: Array):
        del axis_size
        v_batched, w_batched = in_batched
        if w_batched:
            plain = functools.partial(lax.dot_general, dimension_numbers=_NT, precision=precision)
            return jax.vmap(plain, (0 if v_batched else None, 0))(v, w), True
        rows = _nt_by_batch(v.reshape(-1, v.shape[-1]), w, precision)
        return rows.reshape(*v.shape[:-1], w.shape[0]), True

    return product


@_with_nt_tangent
def _one_row(v: Array, w: Array, precision: Any) -> Array:
    """``_one_row_batching``'s product, differentiated as the plain product (``custom_vmap`` has no reverse mode of
    its own)."""
    return _one_row_batching(precision)(v, w)


@_with_nt_tangent
def _nt_by_rows(v: Array, w: Array, precision: Any) -> Array:
    """v [B, K] times w [N, K] transposed, as B matrix-vector products: a matrix-vector product reads w as it lies (4
    gates' products at B=2-4, H=I=256-512, float32, a 2-core Zen 3: 0.35-0.55 of the one product's time on jax 0.10.2
    and 0.12; H=128 even, ``_ROWS_MIN_SIZE``; at B=6-8 the one product as fast or faster)."""
    contract = (((0,), (1,)), ((), ()))
    return jnp.stack([lax.dot_general(v[row], w, contract, precision) for row in range(v.shape[0])])


@_with_nt_tangent
def _nt_transposed(v: Array, w: Array, precision: Any) -> Array:
    """v [B, K] times w [N, K] transposed, as (w v^T)^T: a product of w as it lies with v^T [K, B] (neither operand
    transposed). The barriers keep XLA from folding the transposes back into the product (v's: the one product
    again) or into a consumer (the result's: a product into a transposed layout, 4-7x slower)."""
    product = lax.dot_general(w, lax.optimization_barrier(v.T), _NN, precision)
    return lax.optimization_barrier(product).T


def rnn(call: Call, inputs: Inputs):
    """The registry's ``run``: the fast path, ``call`` as ``ops.rnn`` prepared it (jax_cudnn_rnn/backends/call.py); a
    call of one time step over a frontend's ``Pieces`` as that step alone (``_step_direction``), reading each tensor
    where it lies, as Flax's cells do, or, in a loop that does not change them, one product per matrix (what a GPU
    runs, a CPU without oneDNN's extension, and a CPU's step under ``jax.vmap``; elsewhere the CPU's default runs
    oneDNN's recurrence over the same tensors, "onednn:gemm"). A buffer's one
    step runs the scan: the step's products would read slices of the buffer, which XLA copies at every call and,
    slices not being worth hoisting alone, at every step of a decoding loop (config G, B=1: twice the scan's time, on
    a loaded 2-core CPU); the scan's custom_vjp also forms the buffer's gradient faster (1.5-3x) than JAX's transpose
    of those slices."""
    if inputs.x.shape[0] == 1 and isinstance(inputs.params, Pieces):
        step = functools.partial(_step_direction, joined=call.loop_invariant_weights)
        return layers.run_layers(step, call, inputs, layers.gate_weights)
    direction = _mapped_direction if call.mapped else _fast_direction
    return layers.run_layers(direction, call, inputs._replace(params=as_buffer(inputs.params)))


registry.register(
    registry.Backend(
        "xla",
        None,
        supports=registry.Supports("the xla implementation"),
        unavailable=lambda: None,
        run=rnn,
        cost=lambda call, side, variant: registry.UNIT,  # every other estimate is relative to this one
        takes_pieces=True,
        takes_transposed=True,
        mapped_by_jvp=True,
    )
)
