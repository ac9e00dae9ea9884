"""oneDNN's FFI calls (C++ in onednn/): the weights, the forward and the backward over the whole network, a matrix
product on oneDNN's matmul primitive (``matmul``, with weights packed once: ``pack_weights``, ``matmul_packed``), and
the recurrence of one layer and direction on it (``gemm_forward``, ``gemm_backward``): what "onednn:gemm" is built
from.

The handlers read the weights from the opaque buffer's bytes (gate blocks reordered into the format the primitive
chose), so the same ``params`` run here, on cuDNN and on the xla implementation: the forward through the weights call,
one of its own that writes them in the forward primitives' formats, which XLA hoists out of a loop whose calls share
``params`` (a decoding loop of one-step calls reorders them once, not at every step); the backward at each call. The
handlers build and cache each shape's primitives, take their temporary memory from a pool of their own
(onednn/scratch.h), and tell the sizes of the weights and the reserve space (``buffer_sizes``).
``plain_backward_weights`` has a training call's backward read the weights in the plain ldgoi layout instead of the one
its primitive picks (a different oneDNN kernel: onednn/plan.cc); the forward and the backward of one training step must
agree on it (it is part of their plan).

An input ``channel`` (jax_cudnn_rnn/backends/fused/lengths.py: the padding channel, the per-gate weights of x's last
column) makes x wider than ``config.input_size``: the handlers run ``network(config, x's width)`` and write the extra
columns' input weights themselves (zeros, then the channel's), reading ``params`` of ``config`` as they are; the
channel's weights are constants and get no gradient. So no widened copy of the buffer is built at every call.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import numpy as np

from jax_cudnn_rnn import _buffer, layout
from jax_cudnn_rnn.backends.fused import batching, convention
from jax_cudnn_rnn.backends.onednn import extension
from jax_cudnn_rnn.config import RNNConfig


def _slot_offsets(config: RNNConfig) -> np.ndarray:
    """Per pseudo-layer, where w_input, w_recurrent, w_projection, b_input, b_recurrent start in the buffer (elements;
    -1 where absent). The handlers copy whole gate blocks from there, so each group's gates must be consecutive."""
    offsets = []
    for layer in range(config.num_layers):
        for direction in range(config.num_directions):
            groups = layout.layer_slots(config, layer, direction)
            for group in ("w_input", "w_recurrent", "w_projection", "b_input", "b_recurrent"):
                slots = groups[group]
                if any(s.offset != slots[0].offset + i * s.size for i, s in enumerate(slots)):
                    raise AssertionError(f"layout: the gates of {group} are not consecutive")
                offsets.append(slots[0].offset if slots else -1)
    return np.asarray(offsets, np.int64)


def network(config: RNNConfig, input_width: int) -> RNNConfig:
    """The network the handlers run for params of ``config`` over inputs ``input_width`` wide: ``config``, or where an
    input channel widens it, ``config`` with that input width and linear input (oneDNN always multiplies by input
    matrices: skip input's are identities, which the handlers write)."""
    if input_width == config.input_size:
        return config
    return dataclasses.replace(config, input_size=input_width, input_mode="linear_input")


@functools.lru_cache(maxsize=256)
def attributes(config: RNNConfig, input_width: int | None = None) -> dict[str, Any]:
    """The handlers' attributes but ``training``: the network (``convention.config_attributes`` of ``network``; None:
    ``config``'s own width) and where the tensors of ``config``'s params start in the buffer."""
    ran = config if input_width is None else network(config, input_width)
    return dict(**convention.config_attributes(ran), slot_offsets=_slot_offsets(config))


def channel_attributes(
    config: RNNConfig, channel: tuple[float, ...] | None, input_width: int | None = None
) -> dict[str, Any]:
    """The weights and backward handlers' description of the input channel (onednn/network.h ``InputChannel``): the
    columns of x past ``config.input_size`` (the last of them the channel, whose input weight per gate is
    ``channel[g]``), and whether ``config``'s own input matrices are skip input's; all empty without a channel."""
    if channel is None:
        return dict(
            channel_columns=np.int64(0), channel_weights=np.zeros(0, np.float32), channel_skip_input=np.bool_(False)
        )
    columns = (input_width or config.input_size) - config.input_size
    if columns < 1 or len(channel) != config.num_gates:
        raise ValueError(
            f"channel has {len(channel)} weights over {columns} extra input columns; expected one weight per gate "
            f"({config.num_gates}) and an x wider than input_size ({config.input_size})"
        )
    return dict(
        channel_columns=np.int64(columns),
        channel_weights=np.asarray(channel, np.float32),
        channel_skip_input=np.bool_(config.skip_input),
    )


@functools.lru_cache(maxsize=256)
def buffer_sizes(
    config: RNNConfig, max_time: int, batch: int, training: bool, plain_backward_weights: bool = False
) -> dict[str, int]:
    """Bytes of the weights buffer and the reserve space, and of the weights call's, the forward's and the backward's
    scratch (from the extension's pool) for one call (asked of the extension, which builds and caches the call's
    primitives: the first call of a shape takes milliseconds)."""
    return dict(
        extension.module().buffer_sizes(
            **convention.config_attributes(config),
            dtype=config.dtype.name,
            max_time=max_time,
            batch=batch,
            training=training,
            plain_backward_weights=plain_backward_weights,
        )
    )


def _params_operands(params, config: RNNConfig) -> tuple[list[Any], dict[str, Any]]:
    """The operands ``params`` (the opaque buffer of ``config``, or a frontend's ``_buffer.Pieces`` of it, each piece
    an operand the handlers read and write in place) and the attributes that say where each lies in the buffer of
    ``config`` (whose size the handlers check the buffer against)."""
    if isinstance(params, _buffer.Pieces):
        operands, offsets = list(params.arrays), [slot.offset for slot in params.slots]
    else:
        operands, offsets = [params], [0]
    total = layout.params_size(config)
    return operands, dict(piece_offsets=np.asarray(offsets, np.int64), params_elements=np.int64(total))


def forward(
    x,
    h0,
    params,
    *c0,
    config: RNNConfig,
    training: bool,
    plain_backward_weights: bool = False,
    channel: tuple[float, ...] | None = None,
):
    """One oneDNN forward: (y, h_n, [c_n: lstm], [reserve: training]); ``params`` the buffer or its ``Pieces`` (of
    ``config``); ``channel``: x's last column's input weights per gate (x wider than ``config.input_size``)."""
    num_steps, batch, width = x.shape
    width = width if channel is not None else None
    plain_backward_weights = training and plain_backward_weights
    ran = config if width is None else network(config, width)
    sizes = buffer_sizes(ran, num_steps, batch, training, plain_backward_weights)
    attrs = dict(
        training=np.bool_(training),
        plain_backward_weights=np.bool_(plain_backward_weights),
        **attributes(config, width),
    )
    operands, pieces = _params_operands(params, config)
    weights = jax.ffi.ffi_call(extension.WEIGHTS_TARGET, jax.ShapeDtypeStruct((sizes["weights"],), np.uint8))(
        *operands,
        dtype=config.dtype.name,
        max_time=np.int64(num_steps),
        batch=np.int64(batch),
        **attrs,
        **pieces,
        **channel_attributes(config, channel, width),
    )
    out_types = convention.output_types(config, x, h0, sizes["reserve_space"] if training else None)
    return tuple(jax.ffi.ffi_call(extension.FORWARD_TARGET, out_types)(x, h0, weights, *c0, **attrs))


def backward(
    params,
    x,
    h0,
    y,
    h_n,
    dy,
    dh_n,
    reserve,
    *lstm_args,
    config: RNNConfig,
    plain_backward_weights: bool = False,
    channel: tuple[float, ...] | None = None,
):
    """oneDNN's backward: (dparams, dx, dh0, [dc0: lstm]); ``lstm_args`` is (c0, c_n, dc_n) for an LSTM. ``dparams``
    is like ``params``: the buffer's gradient, or its ``Pieces``' (the held slots get none; the ``channel``'s weights,
    constants, none either)."""
    width = x.shape[-1] if channel is not None else None
    operands, pieces = _params_operands(params, config)
    out_types = [jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(h0.shape, x.dtype)]
    if lstm_args:
        out_types.append(jax.ShapeDtypeStruct(lstm_args[0].shape, x.dtype))
    out_types += [jax.ShapeDtypeStruct(operand.shape, operand.dtype) for operand in operands]
    dx, dh0, *rest = jax.ffi.ffi_call(extension.BACKWARD_TARGET, out_types)(
        x,
        h0,
        y,
        h_n,
        dy,
        dh_n,
        reserve,
        *lstm_args,
        *operands,
        training=np.bool_(True),
        plain_backward_weights=np.bool_(plain_backward_weights),
        **attributes(config, width),
        **pieces,
        **channel_attributes(config, channel, width),
    )
    dc0, dparams = (rest[:1], rest[1:]) if lstm_args else ([], rest)
    dparams = jax.tree.unflatten(jax.tree.structure(params), dparams)
    return (dparams, dx, dh0, *dc0)


def matmul(a, b, *, transpose_a: bool = False, transpose_b: bool = False, out_dtype=np.float32):
    """``op(a) @ op(b)`` on oneDNN's matmul primitive (onednn/matmul.h): a [..., M, K] (stored [..., K, M] where
    ``transpose_a``), b [..., K, N] (stored [..., N, K] where ``transpose_b``), both float32 or both bfloat16;
    ``out_dtype`` float32 (bfloat16 products accumulate in float32 and keep it) or a's dtype. The transposes are
    strides, never copies. Under ``jax.vmap`` an unmapped operand gets a leading 1, which oneDNN broadcasts."""
    if a.ndim != b.ndim or a.ndim < 2:
        raise ValueError(f"a has shape {a.shape} and b {b.shape}; expected the same rank, at least 2")
    m = a.shape[-1] if transpose_a else a.shape[-2]
    n = b.shape[-2] if transpose_b else b.shape[-1]
    batch = tuple(max(i, j) for i, j in zip(a.shape[:-2], b.shape[:-2], strict=True))
    out_type = jax.ShapeDtypeStruct((*batch, m, n), out_dtype)
    return jax.ffi.ffi_call(extension.MATMUL_TARGET, out_type, vmap_method="expand_dims")(
        a, b, transpose_a=np.bool_(transpose_a), transpose_b=np.bool_(transpose_b)
    )


@functools.lru_cache(maxsize=256)
def packed_bytes(rows: int, b_shape: tuple[int, int], dtype: str, transpose_b: bool) -> int:
    """Bytes of a [K, N] (or [N, K]: ``transpose_b``) matrix of ``dtype`` packed for products of ``rows`` rows."""
    return extension.module().matmul_packed_bytes(rows, list(b_shape), dtype, transpose_b)


@functools.lru_cache(maxsize=256)
def reads_b_in_place(rows: int, b_shape: tuple[int, int], dtype: str) -> bool:
    """Whether oneDNN's matmul multiplies [rows, K] by a b stored [N, K] (``b_shape``), transposed, with a kernel that
    reads b where it lies: its `gemm:jit` kernels (AVX2 and below, float32), whose packing is a plain copy, where its
    brgemm kernels copy a plain b into their blocked layout at every product."""
    kernel = extension.module().matmul_implementation
    return kernel([rows, b_shape[1]], list(b_shape), dtype, "float32", False, True).startswith("gemm:")


def _packed_attributes(rows: int, b_shape, transpose_b: bool) -> dict[str, Any]:
    return dict(rows=np.int64(rows), b_shape=np.asarray(b_shape, np.int64), transpose_b=np.bool_(transpose_b))


def pack_weights(b, rows: int, *, transpose_b: bool = False):
    """``b`` [..., K, N] (stored [..., N, K] where ``transpose_b``) packed into the layout oneDNN's matmul kernels read
    for products of ``rows`` rows: uint8 [..., bytes], for ``matmul_packed``. Packing once saves the copy into that
    layout which every plain product makes (onednn/matmul.h)."""
    b_shape = tuple(b.shape[-2:])
    size = packed_bytes(rows, b_shape, np.dtype(b.dtype).name, transpose_b)
    out_type = jax.ShapeDtypeStruct((*b.shape[:-2], size), np.uint8)
    return jax.ffi.ffi_call(extension.PACK_TARGET, out_type, vmap_method="expand_dims")(
        b, **_packed_attributes(rows, b_shape, transpose_b)
    )


def matmul_packed(a, packed, *, rows: int, b_shape: tuple[int, int], transpose_b: bool = False):
    """``a @ op(b)`` in float32 for ``packed`` = ``pack_weights(b, rows, transpose_b=...)`` of a b of stored shape
    ``b_shape``: a [..., M, K] of b's dtype, packed [..., bytes] (batch axes equal or 1) -> [..., M, N]."""
    n = b_shape[0] if transpose_b else b_shape[1]
    batch = tuple(max(i, j) for i, j in zip(a.shape[:-2], packed.shape[:-1], strict=True))
    out_type = jax.ShapeDtypeStruct((*batch, a.shape[-2], n), np.float32)
    return jax.ffi.ffi_call(extension.PACKED_MATMUL_TARGET, out_type, vmap_method="expand_dims")(
        a, packed, **_packed_attributes(rows, b_shape, transpose_b)
    )


class WeightBlock(NamedTuple):
    """Gates ``gate0`` to ``gate0 + gates - 1`` of one of a layer's matrices (``matrix`` 0: w_in [G*H, I], 1: w_rec
    [G*H, H]) where they lie in weights operand ``operand`` of the recurrence handlers (0: their ``packed`` argument,
    i > 0: ``pieces[i - 1]``): row ``row`` and column ``k`` of the block at element ``offset + row * row_stride + k *
    col_stride`` of the operand, as rows (``row_stride`` K, ``col_stride`` 1: the buffer's layout) or as columns
    (``row_stride`` 1: columns from ``offset`` of an operand [K, ``col_stride``] holding the matrix transposed, a Flax
    or Keras kernel). onednn/recurrence_operands.h's ``WeightBlock``."""

    matrix: int
    operand: int
    offset: int
    gate0: int
    gates: int
    row_stride: int
    col_stride: int


def buffer_blocks(
    config: RNNConfig, input_size: int, w_in_offset: int | None, w_rec_offset: int
) -> tuple[WeightBlock, ...]:
    """The blocks of one layer and direction whose matrices lie in the flat parameter buffer at these offsets (w_in's
    None: skip input): each matrix one block of every gate, as rows."""
    gates, units = config.num_gates, config.num_units
    blocks = [] if w_in_offset is None else [WeightBlock(0, 0, w_in_offset, 0, gates, input_size, 1)]
    return (*blocks, WeightBlock(1, 0, w_rec_offset, 0, gates, units, 1))


def _recurrence_attributes(
    config: RNNConfig,
    input_size: int,
    skip_input: bool,
    reverse: bool,
    training: bool,
    rows: int,
    weights_dtype,
    has_lengths: bool,
    blocks: tuple[WeightBlock, ...] | None,
    params_gradient: tuple[int | None, int | None] | None = None,
) -> dict:
    """The recurrence handlers' attributes (onednn/gemm_recurrence.h): ``config``'s cell and units as a one-layer,
    one-direction network with this input (its biases come as arrays), the direction, whether the call trains, the
    rows the recurrent weights were packed for and their dtype, whether the lengths come as an argument, and where the
    weights are read in place, their ``blocks`` (none: w_rec packed and w_in an argument); where the backward gives
    the weights operands' whole gradients, ``params_gradient``, the biases' offsets in the first (b_in's, b_rec's;
    None where absent)."""
    one = dataclasses.replace(
        config,
        num_layers=1,
        direction="unidirectional",
        input_mode="skip_input" if skip_input else "linear_input",
        input_size=input_size,
        proj_size=0,
        bias_mode="double",
        dropout=0.0,
    )
    return dict(
        **convention.config_attributes(one),
        reverse=np.bool_(reverse),
        training=np.bool_(training),
        rows=np.int64(rows),
        weights_dtype=np.dtype(weights_dtype).name,
        has_lengths=np.bool_(has_lengths),
        blocks=np.asarray([field for block in blocks or () for field in block], np.int64).reshape(-1),
        params_gradient=np.bool_(params_gradient is not None),
        b_in_offset=np.int64(-1 if params_gradient is None or params_gradient[0] is None else params_gradient[0]),
        b_rec_offset=np.int64(-1 if params_gradient is None or params_gradient[1] is None else params_gradient[1]),
    )


def gemm_forward(
    x,
    packed,
    b_in,
    b_rec,
    h0,
    w_in,
    c0,
    lengths=None,
    *,
    config: RNNConfig,
    reverse: bool,
    training: bool,
    weights_dtype,
    y_dtype,
    blocks: tuple[WeightBlock, ...] | None = None,
    pieces: tuple[Any, ...] = (),
):
    """One layer and direction (onednn/gemm_recurrence.h): x [T, B, I] (float32 or the weights' dtype), ``packed``
    the recurrent weights as ``pack_weights(w_rec, B, transpose_b=True)`` packs them, b_in/b_rec [G*H], h0 [B, H],
    w_in [G*H, I] in ``weights_dtype`` or None (skip input), c0 [B, H] (LSTM) or None; biases and states float32;
    ``blocks`` where the weights are instead read where they lie (w_in then None): their ``WeightBlock``s in
    ``packed`` (the flat parameter buffer: ``buffer_blocks``) and ``pieces`` (each of ``weights_dtype``);
    ``lengths`` int32 [B] or None: past a row's length its state stays and its outputs are zero (x there finite).
    Returns (y [T, B, H] in ``y_dtype``, h_n, c_n or None, saved): ``saved``, in training, what ``gemm_backward``
    reads (gates, [aux], [h_prev], h_gemm), else ()."""
    input_size = x.shape[-1]
    units, mode = config.num_units, config.mode
    width = config.num_gates * units
    lstm, gru = mode == "lstm", mode == "gru"
    f32 = np.float32
    skip_input = w_in is None if blocks is None else all(block.matrix == 1 for block in blocks)
    optional = [(w_in, None), (c0 if lstm else None, 0), (lengths, 0)]  # the arguments after h0, their batch axes
    present = [(array, axis) for array, axis in optional if array is not None]
    operands = [x, packed, b_in, b_rec, h0, *(a for a, _ in present), *pieces]
    batch_axes = [1, None, None, None, 0, *(axis for _, axis in present), *[None] * len(pieces)]

    def call(*operands):
        num_steps, batch, _ = operands[0].shape
        out_types = [jax.ShapeDtypeStruct((num_steps, batch, units), y_dtype)]
        out_types += [jax.ShapeDtypeStruct((batch, units), f32)] * (1 + lstm)
        if training:
            steps = (num_steps, batch, units)
            out_types += [jax.ShapeDtypeStruct((num_steps, batch, width), f32)]
            out_types += [jax.ShapeDtypeStruct(steps, f32)] * ((lstm or gru) + gru)
            out_types += [jax.ShapeDtypeStruct(steps, weights_dtype)]
        attributes = _recurrence_attributes(
            config, input_size, skip_input, reverse, training, batch, weights_dtype, lengths is not None, blocks
        )
        return jax.ffi.ffi_call(extension.GEMM_FORWARD_TARGET, out_types, vmap_method="sequential")(
            *operands, **attributes
        )

    if blocks and not training:
        # The inference forward with the weights where they lie: under jax.vmap one call over the mapped rows folded
        # into its batch (a frontend's step, vmapped over an Equinox module's sequences), not one per mapped row.
        call = batching.fold_vmap(call, batch_axes, [1, *[0] * (1 + lstm)])
    outputs = call(*operands)
    y, h_n, *rest = outputs
    c_n = rest.pop(0) if lstm else None
    return y, h_n, c_n, tuple(rest)


def gemm_backward(
    x,
    packed,
    dy,
    dh_n,
    dc_n,
    w_in,
    c0,
    saved,
    lengths=None,
    *,
    config: RNNConfig,
    reverse: bool,
    blocks: tuple[WeightBlock, ...] | None = None,
    params_gradient: tuple[int | None, int | None] | None = None,
    pieces: tuple[Any, ...] = (),
):
    """The gradient of ``gemm_forward`` (onednn/gemm_recurrence.h): x, w_in, c0, lengths and ``blocks`` the
    forward's, ``packed`` the recurrent weights as ``pack_weights(w_rec, B)`` packs them (or, with ``blocks``, the
    forward's), dy [T, B, H] (y's dtype), dh_n, dc_n
    (LSTM) [B, H] float32, ``saved`` the forward's. Returns (dx, dw_in or None, d_b_in, dw_rec, d_b_rec, dh0, dc0
    or None): x's gradient in x's dtype, the weights' in theirs, the biases' and the states' in float32. With
    ``params_gradient`` (in place, for a network of this one layer and direction: the biases' offsets in the buffer,
    b_in's and b_rec's, None where absent) the fourth is instead the whole buffer's gradient, in its dtype, with the
    biases' in it too, dw_in is None, and an eighth gives the ``pieces``' gradients (a tuple, empty without
    ``params_gradient``)."""
    _, batch, input_size = x.shape
    gates, h_gemm = saved[0], saved[-1]
    weights_dtype = h_gemm.dtype
    width, units = gates.shape[-1], h_gemm.shape[-1]
    lstm = config.mode == "lstm"
    f32 = np.float32
    out_types = [
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct(packed.shape if params_gradient else (width * units,), weights_dtype),
        jax.ShapeDtypeStruct((width,), f32),
        jax.ShapeDtypeStruct((width,), f32),
        jax.ShapeDtypeStruct(dh_n.shape, f32),
    ]
    skip_input = w_in is None if blocks is None else all(block.matrix == 1 for block in blocks)
    out_types += [] if skip_input or params_gradient else [jax.ShapeDtypeStruct((width * input_size,), weights_dtype)]
    out_types += [jax.ShapeDtypeStruct(dh_n.shape, f32)] if lstm else []
    out_types += [jax.ShapeDtypeStruct(piece.shape, piece.dtype) for piece in pieces] if params_gradient else []
    dx, dw_rec, d_b_in, d_b_rec, dh0, *rest = jax.ffi.ffi_call(
        extension.GEMM_BACKWARD_TARGET, out_types, vmap_method="sequential"
    )(
        x,
        packed,
        dy,
        dh_n,
        gates,
        h_gemm,
        *([] if w_in is None else [w_in]),
        *saved[1:-1],  # [aux], [h_prev]
        *([c0, dc_n] if lstm else []),
        *([] if lengths is None else [lengths]),
        *pieces,
        **_recurrence_attributes(
            config,
            input_size,
            skip_input,
            reverse,
            True,
            batch,
            weights_dtype,
            lengths is not None,
            blocks,
            params_gradient,
        ),
    )
    if params_gradient:
        dc0 = rest.pop(0) if lstm else None
        return dx, None, d_b_in, dw_rec, d_b_rec, dh0, dc0, tuple(rest)
    # Flat from the handler: the buffer's gradient concatenates them as they are (XLA's concatenation of [G*H, in]
    # reshaped into it was a fused loop of 2.5 ms for 6 MB; a GRU step, B=1, H=512).
    dw_in = None if skip_input else rest.pop(0).reshape(width, input_size)
    return dx, dw_in, d_b_in, dw_rec.reshape(width, units), d_b_rec, dh0, (rest[0] if lstm else None), ()
