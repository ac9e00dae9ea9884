"""cuDNN's three FFI calls on local arrays (one device's rows): the forward, and the backward data then weights.

This is the only module that calls the ``jax_cudnn_rnn._cudnn_rnn`` targets (C++ in cuda/); everything around it
(planning, the custom_vjp, sharding, vmap) is ordinary JAX in jax_cudnn_rnn/backends/cudnn/backend.py, so the CPU tests
replace these two functions by a stand-in (tests/support.py) and run the rest as it is.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn.backends.cudnn import extension
from jax_cudnn_rnn.backends.fused import convention
from jax_cudnn_rnn.config import RNNConfig


def attributes(config: RNNConfig, allow_tf32: bool, algorithm: str) -> dict[str, Any]:
    """The handlers' attributes: the network (``convention.config_attributes``) and the call's options."""
    return dict(**convention.config_attributes(config), allow_tf32=np.bool_(allow_tf32), algorithm=algorithm)


def forward(x, h0, params, *rest, plan, config: RNNConfig, allow_tf32: bool, training: bool):
    """One cuDNN forward under ``plan`` (jax_cudnn_rnn/backends/cudnn/plan.py); ``rest`` is c0 for an LSTM, then
    seq_lengths where given. Returns (y, h_n, [c_n: lstm], [reserve_space [B, plan.row_bytes]: training])."""
    batch = x.shape[1]
    out_types = convention.output_types(config, x, h0, batch * plan.row_bytes if training else None)
    outs = jax.ffi.ffi_call(extension.FORWARD_TARGET, out_types)(
        x, h0, params, *rest, training=np.bool_(training), **attributes(config, allow_tf32, plan.algorithm)
    )
    if training:
        outs = (*outs[:-1], outs[-1].reshape(batch, plan.row_bytes))
    return tuple(outs)


def backward(params, x, h0, y, dy, dh_n, reserve_space, *rest, plan, config: RNNConfig, allow_tf32: bool):
    """cuDNN's backward data then backward weights; ``rest`` is [c0, dc_n] for an LSTM, then seq_lengths if given.
    Returns (dparams, dx, dh0, [dc0: lstm], reserve_space). Both passes update the reserve space in place, so each
    returns it aliased to its input, which also orders backward weights after backward data; the last is returned so
    that a caller that donates the reserve space lets XLA reuse it without a copy."""
    lstm = config.has_cell_state
    c0, dc_n = rest[:2] if lstm else (None, None)
    seq_lengths = rest[-1:] if len(rest) > 2 * lstm else []
    attrs = attributes(config, allow_tf32, plan.algorithm)
    rows = reserve_space.shape
    reserve_space = reserve_space.reshape(-1)
    out_types = [
        jax.ShapeDtypeStruct(x.shape, y.dtype),
        jax.ShapeDtypeStruct(h0.shape, y.dtype),
        jax.ShapeDtypeStruct(reserve_space.shape, reserve_space.dtype),
    ]
    if lstm:
        out_types.append(jax.ShapeDtypeStruct(c0.shape, y.dtype))
    dx, dh0, reserve_space, *dc0 = jax.ffi.ffi_call(
        extension.BACKWARD_DATA_TARGET, out_types, input_output_aliases={5: 2}
    )(y, dy, h0, dh_n, params, reserve_space, *([c0, dc_n] if lstm else []), *seq_lengths, **attrs)
    dparams, reserve_space = jax.ffi.ffi_call(
        extension.BACKWARD_WEIGHTS_TARGET,
        [jax.ShapeDtypeStruct(params.shape, params.dtype), jax.ShapeDtypeStruct(reserve_space.shape, jnp.uint8)],
        input_output_aliases={3: 1},
    )(x, h0, y, reserve_space, *seq_lengths, **attrs)
    return (dparams, dx, dh0, *dc0, reserve_space.reshape(rows))


def temp_space_sizes(
    config: RNNConfig,
    max_time: int,
    batch: int,
    padded: bool,
    training: bool,
    allow_tf32: bool,
    algorithm: str,
    device: int = -1,
) -> tuple[int, int]:
    """(workspace bytes, reserve-space bytes) cuDNN asks for a forward of ``config`` over [max_time, batch]
    full-length sequences under ``algorithm``, asked on CUDA device ``device`` of this process (-1: the current one).
    Needs a GPU."""
    workspace, reserve = extension.module().temp_space_sizes(
        **convention.config_attributes(config),
        dtype=config.dtype.name,
        allow_tf32=allow_tf32,
        algorithm=algorithm,
        max_time=max_time,
        batch=batch,
        padded=padded,
        training=training,
        device=device,
    )
    return int(workspace), int(reserve)
