"""The calling convention of a fused forward kernel, shared by the native backends (cuDNN, oneDNN).

Every handler takes the network as the same FFI attributes (``config_attributes``). A fused forward is one FFI call
over the whole network: operands ``x`` [T, B, I], ``h0`` [L*D, B, hidden], the opaque ``params`` (shared by the
batch), ``c0`` [L*D, B, H] for an LSTM and ``seq_lengths`` [B] where the call has them; outputs ``y`` [T, B, D*hidden],
``h_n``, ``c_n`` for an LSTM and, from the training forward, the reserve space the backward reads (its rows are the
batch). ``forward_operands`` lays the operands out with their batch axes, ``vmapped`` gives the call its ``jax.vmap``
rule, ``output_types`` types what comes back and ``forward_outputs`` names it. ``Kernel`` is the signature of a whole
network's run without dropout, ``Runner`` that of one with dropout masks, which the rest of the kit composes: both take
the prepared call and its arrays as the records ``ops.rnn`` made (jax_cudnn_rnn/backends/call.py), a part of the call
(a layer, a direction, a chunk) as a call of its own (``part``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.fused.batching import fold_vmap, sequential_vmap
from jax_cudnn_rnn.config import RNNConfig

Kernel = Callable[[Call, Inputs], tuple[Any, Any, Any]]
"""``kernel(call, inputs) -> (y, h_n, c_n or None)``: the network ``call.config`` without dropout over time-major
arrays as ``rnn`` takes them (``inputs``: no dropout masks, no resets; lengths int32 [B] or None), differentiable: a
native backend's kernel call."""

Runner = Callable[[Call, Inputs], tuple[Any, Any, Any]]
"""``runner(call, inputs) -> (y, h_n, c_n or None)``: a ``Kernel`` that also takes ``inputs.dropout_masks`` as
``dropout.masks_for`` makes them (or None): what ``compose.with_masks`` makes of a kernel, what the time chunks and the
reset segments compose, and what they fall back to (every registered backend's ``run`` is one)."""


def part(call: Call, inputs: Inputs, config: RNNConfig | None = None) -> Call:
    """The call of a part of ``call`` (a layer, a direction, a time chunk, the packed segments) whose arrays are
    ``inputs``: its network (``config``; None: the call's), its T and B, whether it has lengths and resets; its
    options and placement are the call's."""
    return dataclasses.replace(
        call,
        config=call.config if config is None else config,
        max_time=int(inputs.x.shape[0]),
        batch=int(inputs.x.shape[1]),
        seq_lengths=inputs.seq_lengths is not None,
        resets=inputs.resets is not None,
    )


def config_attributes(config: RNNConfig) -> dict[str, Any]:
    """The network as both native extensions take it, in the FFI attributes of every handler and as the first keywords
    of their modules' functions (common/rnn_config.h RnnConfigAttrs), with the types the C++ side decodes."""
    return dict(
        mode=config.mode,
        num_layers=np.int64(config.num_layers),
        num_units=np.int64(config.num_units),
        input_size=np.int64(config.input_size),
        proj_size=np.int64(config.proj_size),
        direction=config.direction,
        input_mode=config.input_mode,
        bias_mode=config.bias_mode,
        cell_clip=np.float64(config.cell_clip or 0.0),
    )  # 0 means no clipping (cell_clip=None)


def forward_operands(x, h0, params, c0, seq_lengths) -> tuple[list[jax.Array], list[int | None]]:
    """(operands, their batch axes) of a fused forward: x, h0, params (the buffer, or each leaf of a pytree of arrays:
    oneDNN's ``_buffer.Pieces``), then c0 and seq_lengths where present."""
    leaves = jax.tree.leaves(params)
    operands, batch_axes = [x, h0, *leaves], [1, 1, *[None] * len(leaves)]
    for extra, axis in ((c0, 1), (seq_lengths, 0)):
        if extra is not None:
            operands.append(extra)
            batch_axes.append(axis)
    return operands, batch_axes


def with_params(kernel: Callable[..., Any], params: Any) -> Callable[..., Any]:
    """``kernel(x, h0, params, *rest)`` as a function of ``forward_operands``' operands, where ``params``' leaves are
    operands of their own."""
    leaves, tree = jax.tree.flatten(params)

    def call(x, h0, *operands):
        return kernel(x, h0, jax.tree.unflatten(tree, operands[: len(leaves)]), *operands[len(leaves) :])

    return call


def output_axes(lstm: bool, training: bool) -> list[int]:
    """The batch axes of a fused forward's outputs: y, h_n, [c_n: lstm], [reserve rows: training]."""
    return [1, 1] + [1] * lstm + [0] * training


def output_types(config: RNNConfig, x, h0, reserve_bytes: int | None) -> list[jax.ShapeDtypeStruct]:
    """The types of a fused forward's outputs: y, h_n, [c_n: lstm], [the reserve space, ``reserve_bytes`` bytes:
    training (``reserve_bytes`` given)]."""
    num_steps, batch, _ = x.shape
    types = [
        jax.ShapeDtypeStruct((num_steps, batch, config.output_size), x.dtype),
        jax.ShapeDtypeStruct(h0.shape, x.dtype),
    ]
    if config.has_cell_state:
        types.append(jax.ShapeDtypeStruct(config.cell_shape(batch), x.dtype))
    if reserve_bytes is not None:
        types.append(jax.ShapeDtypeStruct((reserve_bytes,), np.uint8))
    return types


def vmapped(
    kernel: Callable[..., Sequence[jax.Array]], batch_axes: Sequence[int | None], lstm: bool, training: bool
) -> Callable[..., tuple[jax.Array, ...]]:
    """``kernel`` under ``jax.vmap``: the inference forward folds the mapped axis into its batch (one call,
    ``fold_vmap``); the training forward runs once per mapped element (``sequential_vmap``), since the weight gradient
    its reserve space leads to must stay per element."""
    if training:
        return sequential_vmap(kernel)
    return fold_vmap(kernel, batch_axes, output_axes(lstm, training))


def forward_outputs(outputs: Sequence[Any], lstm: bool, training: bool) -> tuple[Any, Any, Any, Any]:
    """(y, h_n, c_n or None, reserve or None) from a fused forward's outputs."""
    y, h_n, *rest = outputs
    c_n = rest.pop(0) if lstm else None
    reserve = rest.pop(0) if training else None
    return y, h_n, c_n, reserve
