"""implementation="onednn:gemm": the network as matrix products on oneDNN's matmul primitive.

The decomposition PyTorch's CPU GRU runs, and the xla implementation's (jax_cudnn_rnn/backends/xla.py), with every
product on oneDNN's brgemm kernels (``kernels.matmul``: onednn/matmul.h), which reach the CPU's bfloat16 rate where
XLA:CPU's GEMM does not. Per layer and direction:

* the input product of all time steps is one GEMM;
* the recurrence is one FFI call (``kernels.gemm_forward``: onednn/gemm_recurrence.h): per step one product with the
  recurrent weights, packed once into the layout the kernels read or, for a short call or kernels that read them
  where they lie (``_in_place``), read in the buffer itself, or in a frontend's own tensors (``_buffer.Pieces``: a
  Flax cell's kernel per gate, a Keras layer's stacked kernel; ``_piece_operands``), and the cell's arithmetic
  (onednn/gemm_cells.h) around it in C++. As an XLA scan (what ``gemm_scan`` still runs for a projected LSTM) the
  arithmetic and its stacked outputs cost about 40 % of the forward's time (GRU T=25 B=64 H=1024 bfloat16, a scan
  whose step kept the products and dropped the cell: 62 against 104 ms, on a loaded 2-core Zen 4);
* its gradient is one FFI call too (``kernels.gemm_backward``: the gate gradients and the gradient w.r.t. the state,
  step by step), then the weight gradients and the input's are one GEMM each over all steps.

bfloat16 runs its GEMMs in bfloat16 with float32 accumulation and everything else in float32, as the xla
implementation does. This is a kernel of the fused kit (``rnn``: the whole network without dropout, which
jax_cudnn_rnn/backends/fused/ arranges around it), for the modes oneDNN's backend runs with their default activations,
with per-sequence lengths in its recurrence (cuDNN's semantics: ``takes_lengths``); an LSTM with a projection runs its
layers as ``gemm_scan``'s scan, its lengths arranged by the fused kit.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jax_cudnn_rnn import _buffer
from jax_cudnn_rnn._buffer import Pieces
from jax_cudnn_rnn.backends.custom_vjp import custom_vjp
from jax_cudnn_rnn.backends.fused import lengths as fused_lengths
from jax_cudnn_rnn.backends.onednn import gemm_scan, kernels
from jax_cudnn_rnn.config import RNNConfig

Array = jax.Array


# ----------------------------------------------------------------------------------------------------------------------
# One layer and direction: a forward call and a backward call (onednn/gemm_recurrence.h).
# ----------------------------------------------------------------------------------------------------------------------


IN_PLACE_STEPS = 1


def _in_place(config: RNNConfig, num_steps: int, batch: int) -> bool:
    """Whether the recurrence handlers read the weights where they lie in the buffer: a call of at most
    ``IN_PLACE_STEPS`` steps (packing them is then a copy for one product), or any call whose recurrent products run
    on a kernel that reads them in place (``kernels.reads_b_in_place``: oneDNN's `gemm:jit`, whose packed layout is a
    plain copy). There, in place against packed (GRU, H=I=512, float32, a process each, AVX2 Zen 3, 2026-11-29):
    forward 0.24 / 0.27 / 0.58 at B=1 and T=4 / 16 / 64, 0.80 / 0.80 / 0.82 at B=64; the gradient 0.67 / 0.64 / 0.78
    and 0.84 / 0.98 / 0.93."""
    if num_steps <= IN_PLACE_STEPS:
        return True
    width = config.num_gates * config.num_units
    return kernels.reads_b_in_place(batch, (width, config.num_units), config.dtype.name)


def _biases(b_in: Array | None, b_rec: Array | None, width: int) -> tuple[Array, Array]:
    zeros = jnp.zeros((width,), jnp.float32)
    return (zeros if b_in is None else b_in), (zeros if b_rec is None else b_rec)


def _forward(config, reverse, out_dtype, blocks, x, w_in, b_in, w_rec, b_rec, h0, c0, lengths, params, training):
    b_in, b_rec = _biases(b_in, b_rec, w_rec.shape[0])
    return kernels.gemm_forward(
        x,
        params if blocks else kernels.pack_weights(w_rec, h0.shape[0], transpose_b=True),
        b_in,
        b_rec,
        h0,
        None if blocks else w_in,
        c0,
        lengths,
        config=config,
        reverse=reverse,
        training=training,
        weights_dtype=w_rec.dtype,
        y_dtype=out_dtype,
        blocks=blocks,
    )


@functools.partial(custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _layer(
    config: RNNConfig, reverse: bool, out_dtype: Any, blocks, x, w_in, b_in, w_rec, b_rec, h0, c0, lengths, params
):
    """x [T, B, in] (the network's dtype, or float32), w_in [G*H, in] or None (skip input), b_in/b_rec [G*H] or None
    (float32), w_rec [G*H, H], h0 [B, H], c0 [B, H] or None (float32 states), lengths int32 [B] or None (x zero past
    them). Where ``blocks`` (``kernels.buffer_blocks``) say where the weights lie in ``params``, the flat buffer w_in
    and w_rec were split from, the kernels read them there (their values unread, their gradients still theirs), else
    ``params`` is None. Returns (ys [T, B, H] in ``out_dtype``, h_n, c_n or None in float32)."""
    y, h_n, c_n, _ = _forward(
        config, reverse, out_dtype, blocks, x, w_in, b_in, w_rec, b_rec, h0, c0, lengths, params, False
    )
    return y, h_n, c_n


def _layer_fwd(config, reverse, out_dtype, blocks, x, w_in, b_in, w_rec, b_rec, h0, c0, lengths, params):
    y, h_n, c_n, saved = _forward(
        config, reverse, out_dtype, blocks, x, w_in, b_in, w_rec, b_rec, h0, c0, lengths, params, True
    )
    # In place the backward reads the buffer, not copies of the weights split from it.
    weights = (params,) if blocks else (w_in, w_rec)
    return (y, h_n, c_n), (x, weights, w_in is None, b_in is not None, b_rec is not None, c0, lengths, saved)


def _layer_bwd(config, reverse, out_dtype, blocks, residuals, cotangents):
    x, weights, skip_input, has_b_in, has_b_rec, c0, lengths, saved = residuals
    d_ys, dh_n, dc_n = cotangents
    (params,) = weights if blocks else (None,)
    w_in, w_rec = (None, None) if blocks else weights
    dx, dw_in, d_b_in, dw_rec, d_b_rec, dh0, dc0, _ = kernels.gemm_backward(
        x,
        params if blocks else kernels.pack_weights(w_rec, dh_n.shape[0]),
        d_ys,
        dh_n,
        dc_n,
        w_in,
        c0,
        saved,
        lengths,
        config=config,
        reverse=reverse,
        blocks=blocks,
    )
    d_b_in, d_b_rec = (d_b_in if has_b_in else None), (d_b_rec if has_b_rec else None)
    return dx, None if skip_input else dw_in, d_b_in, dw_rec, d_b_rec, dh0, dc0, None, None


_layer.defvjp(_layer_fwd, _layer_bwd)


# ----------------------------------------------------------------------------------------------------------------------
# One layer and direction read where a frontend's tensors lie (``_buffer.Pieces``).
# ----------------------------------------------------------------------------------------------------------------------


def _piece_operands(config: RNNConfig, groups, input_size: int):
    """(operands, blocks, b_in, b_rec) of one layer and direction's tensors as ``_buffer.unpack_gates`` gives them:
    each matrix gate its own operand, read where it lies (as rows, or as the columns of a kernel held [in, H]), a
    stacked group's gates one operand (their array: XLA folds the concatenation of its slices back into it) read as
    columns, consecutive gates lying side by side one block; the biases joined in gate order, in float32 (a held one
    zero; None where the group is absent)."""
    w_in, w_rec, _, b_in, b_rec = groups
    gates, units = config.num_gates, config.num_units
    operands, blocks = [], []

    def add(array, matrix: int, blocks_of: list[tuple[int, int, int]], depth: int, transposed: bool) -> None:
        """``array`` as one operand holding ``blocks_of`` (offset, first gate, gates) of ``matrix``."""
        operands.append(array.astype(config.dtype))
        width = array.shape[-1]
        strides = (1, width) if transposed and width > 1 else (depth, 1)  # one column: its rows are its columns
        for offset, gate, count in blocks_of:
            blocks.append(kernels.WeightBlock(matrix, len(operands) - 1, offset, gate, count, *strides))

    for matrix, group, depth in ((0, w_in, input_size), (1, w_rec, units)):
        if group is None:
            continue
        if not group.stacked:
            for gate, (array, transposed) in enumerate(zip(group.gates, group.transposed, strict=True)):
                add(array, matrix, [(0, gate, 1)], depth, transposed)
            continue
        order, runs, gate = list(group.order), [], 0
        while gate < gates:  # the gates in runs that lie side by side in gate order
            position, count = order.index(gate), 1
            while gate + count < gates and position + count < len(order) and order[position + count] == gate + count:
                count += 1
            runs.append((position * units, gate, count))
            gate += count
        add(jnp.concatenate([group.gates[k] for k in order], axis=1), matrix, runs, depth, True)

    def bias(group):
        if group is None:
            return None
        return jnp.concatenate([jnp.zeros((units,)) if b is None else b.astype(jnp.float32) for b in group.gates])

    return operands, tuple(blocks), bias(b_in), bias(b_rec)


def _blocks_biases(config: RNNConfig, operands, b_in, b_rec, bias_offsets):
    """The biases the handlers add, in float32: b_in and b_rec, or where ``bias_offsets`` are given, the slots of the
    first operand at them (None: a bias absent, zeros)."""
    width = config.num_gates * config.num_units
    if bias_offsets is not None:
        b_in, b_rec = (None if o is None else operands[0][o : o + width].astype(jnp.float32) for o in bias_offsets)
    return _biases(b_in, b_rec, width)


def _blocks_forward(
    config, reverse, out_dtype, blocks, bias_offsets, x, operands, b_in, b_rec, h0, c0, lengths, training
):
    b_in, b_rec = _blocks_biases(config, operands, b_in, b_rec, bias_offsets)
    return kernels.gemm_forward(
        x,
        operands[0],
        b_in,
        b_rec,
        h0,
        None,
        c0,
        lengths,
        config=config,
        reverse=reverse,
        training=training,
        weights_dtype=operands[0].dtype,
        y_dtype=out_dtype,
        blocks=blocks,
        pieces=tuple(operands[1:]),
    )


@functools.partial(custom_vjp, nondiff_argnums=(0, 1, 2, 3, 4))
def _blocks_layer(
    config: RNNConfig, reverse: bool, out_dtype: Any, blocks, bias_offsets, x, operands, b_in, b_rec, h0, c0, lengths
):
    """As ``_layer``, the weights read where ``blocks`` say they lie in ``operands`` (a frontend's tensors:
    ``_piece_operands``; or the flat buffer of a network of one layer and direction), whose gradients the backward's
    handler writes whole, as they lie (``params_gradient``): no copy of a tensor either way. Where ``bias_offsets``
    (b_in's and b_rec's in the first operand, None where absent) are given the biases are read there too (b_in and
    b_rec None) and their gradients written there: the one-layer buffer's gradient is then one array the handler
    writes, where XLA would join its parts in a pass over the whole buffer (0.68 ms of a 1.72 ms LSTM step gradient,
    B=4, H=512)."""
    y, h_n, c_n, _ = _blocks_forward(
        config, reverse, out_dtype, blocks, bias_offsets, x, operands, b_in, b_rec, h0, c0, lengths, False
    )
    return y, h_n, c_n


def _blocks_layer_fwd(config, reverse, out_dtype, blocks, bias_offsets, x, operands, b_in, b_rec, h0, c0, lengths):
    y, h_n, c_n, saved = _blocks_forward(
        config, reverse, out_dtype, blocks, bias_offsets, x, operands, b_in, b_rec, h0, c0, lengths, True
    )
    return (y, h_n, c_n), (x, operands, b_in is not None, b_rec is not None, c0, lengths, saved)


def _blocks_layer_bwd(config, reverse, out_dtype, blocks, bias_offsets, residuals, cotangents):
    x, operands, has_b_in, has_b_rec, c0, lengths, saved = residuals
    d_ys, dh_n, dc_n = cotangents
    whole = dict(blocks=blocks, params_gradient=bias_offsets or (None, None), pieces=tuple(operands[1:]))
    dx, _, d_b_in, d_first, d_b_rec, dh0, dc0, d_rest = kernels.gemm_backward(
        x, operands[0], d_ys, dh_n, dc_n, None, c0, saved, lengths, config=config, reverse=reverse, **whole
    )
    d_b_in, d_b_rec = (d_b_in if has_b_in else None), (d_b_rec if has_b_rec else None)
    return dx, [d_first, *d_rest], d_b_in, d_b_rec, dh0, dc0, None


_blocks_layer.defvjp(_blocks_layer_fwd, _blocks_layer_bwd)


def call_bytes(config: RNNConfig, layer: int, num_steps: int, batch: int) -> tuple[int, int]:
    """The scratch (bytes) the forward and the backward call of one direction of ``layer`` take from the extension's
    pool (onednn/scratch.h) over [num_steps, batch]: what onednn/gemm_recurrence.cc lays out, without oneDNN's
    products' scratchpads (tens of kilobytes)."""
    rows, units, inputs = num_steps * batch, config.num_units, config.layer_input_size(layer)
    width, weights = config.num_gates * units, config.dtype.itemsize
    forward = rows * (width * 4 + inputs * weights) + batch * (width * 8 + units * (20 + weights))
    backward = rows * (width * weights * (2 if config.mode == "gru" else 1) + inputs * weights)
    return forward, backward + batch * (width * 8 + units * 20 + inputs * 4)


def pool_bytes(config: RNNConfig, num_steps: int, batch: int, training: bool) -> int:
    """The largest scratch one of a call's recurrence calls takes from the extension's pool (``call_bytes``): outside
    XLA's buffers, so outside its memory analysis (the bench's op memory adds it)."""
    sizes = [call_bytes(config, layer, num_steps, batch) for layer in range(config.num_layers)]
    return max(max(forward, backward if training else 0) for forward, backward in sizes)


# ----------------------------------------------------------------------------------------------------------------------
# The network.
# ----------------------------------------------------------------------------------------------------------------------


def _direction(config: RNNConfig, x, weights, offsets, params, h0, c0, lengths, reverse: bool, last: bool):
    """One layer and direction; its outputs in the network's dtype where they are the network's, else in float32 (the
    next layer's GEMMs round them, and their gradient stays float32, as the xla implementation's). ``offsets`` are
    its groups' in ``params`` (``_buffer.group_offsets``) where the kernels read the weights there, else None."""
    w_in, w_rec, w_proj, b_in, b_rec = weights
    out_dtype = config.dtype if last else jnp.float32
    if w_proj is not None:
        if lengths is not None:
            raise ValueError("seq_lengths: the projected LSTM's scan takes none (the fused kit arranges them)")
        return gemm_scan.layer(config.cell, reverse, out_dtype, x, w_in, b_in, w_rec, b_rec, w_proj, h0, c0)
    if offsets is None or offsets[1] is None or (w_in is not None and offsets[0] is None):
        return _layer(config, reverse, out_dtype, None, x, w_in, b_in, w_rec, b_rec, h0, c0, lengths, None)
    blocks = kernels.buffer_blocks(config, x.shape[-1], offsets[0], offsets[1])
    # A network of this layer and direction alone, its biases each one run in the buffer: the buffer's whole gradient
    # from the handler.
    if (
        config.num_layers == 1
        and config.num_directions == 1
        and all(group is None or offset is not None for group, offset in zip(weights, offsets, strict=True))
    ):
        bias_offsets = tuple(offsets[3:])
        return _blocks_layer(config, reverse, out_dtype, blocks, bias_offsets, x, [params], None, None, h0, c0, lengths)
    return _layer(config, reverse, out_dtype, blocks, x, w_in, b_in, w_rec, b_rec, h0, c0, lengths, params)


def _pieces_direction(config: RNNConfig, x, groups, offsets, params, h0, c0, lengths, reverse: bool, last: bool):
    """``_direction`` for a frontend's tensors, ``groups`` this layer and direction's ``_buffer.unpack_gates``
    groups (no projection; ``offsets`` and ``params`` unused), read where they lie (``_blocks_layer``)."""
    del offsets, params
    operands, blocks, b_in, b_rec = _piece_operands(config, groups, x.shape[-1])
    out_dtype = config.dtype if last else jnp.float32
    return _blocks_layer(config, reverse, out_dtype, blocks, None, x, operands, b_in, b_rec, h0, c0, lengths)


def takes_lengths(config: RNNConfig) -> bool:
    """Whether ``rnn`` runs ``config`` with per-sequence lengths itself (the recurrence handlers' ``lengths``): every
    network but a projected LSTM, whose layers are ``gemm_scan``'s scans."""
    return config.proj_size == 0


def rnn(params, x, h0, c0, config: RNNConfig, seq_lengths=None) -> tuple[Any, Any, Any]:
    """The whole network (every layer and direction, no dropout): (y, h_n, c_n or None) in ``config.dtype``;
    arguments as ``jax_cudnn_rnn.rnn``'s, ``seq_lengths`` only where ``takes_lengths(config)``. With lengths each
    recurrence keeps a row's state past its length (cuDNN's packed sequences, as the handlers run them): no step is
    arranged around the kernel, no wider input, no gather of the final states. Where ``_in_place`` (a call of few
    steps, or products on kernels that read their weights in place) the handlers read the weights where they lie in
    ``params`` (no copy of them), the buffer or a frontend's ``Pieces`` (a projected LSTM's excepted: it packs them
    into the buffer); elsewhere each direction's recurrent weights are packed once for its steps (``Pieces`` packed
    into the buffer first)."""
    f32 = jnp.float32
    if isinstance(params, Pieces) and not (config.proj_size == 0 and _in_place(config, *x.shape[:2])):
        params = params.buffer()
    lengths = None
    if seq_lengths is not None:
        lengths = seq_lengths.astype(jnp.int32)
        x = fused_lengths.zero_padding(x, lengths)  # the weights' gradient reads x: finite there
    # Each layer's GEMMs round their input to the weights' dtype and give its gradient in the input's dtype: two
    # directions' gradients of x add up in float32, as the xla implementation's, and are rounded once.
    layer_input = x.astype(f32) if config.num_directions == 2 else x
    pieces = isinstance(params, Pieces)
    if pieces:
        weights, offsets = _buffer.unpack_gates(params), None
    else:
        weights = [
            tuple(None if w is None else (w if i < 3 else w.astype(f32)) for i, w in enumerate(groups))
            for groups in _buffer.unpack(params, config)
        ]
        offsets = _buffer.group_offsets(config) if _in_place(config, *x.shape[:2]) else [None] * len(weights)
    h_n, c_n = [], []
    for layer in range(config.num_layers):
        outputs = []
        for direction in range(config.num_directions):
            index = layer * config.num_directions + direction
            run = _pieces_direction if pieces else _direction
            ys, h_last, c_last = run(
                config,
                layer_input,
                weights[index],
                None if pieces else offsets[index],
                params,
                h0[index].astype(f32),
                None if c0 is None else c0[index].astype(f32),
                lengths,
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
