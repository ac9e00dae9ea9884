"""A ``jax.custom_vjp`` for a fused-kernel implementation (today oneDNN's; cuDNN's own carries more: a per-call plan
in its residuals, a donated reserve space when its backward runs eagerly, and is not built on this yet).

A fused RNN library has an inference forward, a training forward that also returns an opaque reserve space (what its
backward pass reads: cuDNN's reserve space, oneDNN's workspaces), and a backward pass that gives every gradient at
once. ``fused_rnn`` ties them: called without differentiation it runs the inference forward; under ``jax.grad`` /
``jax.vjp`` the training forward, whose outputs and reserve are the residuals, then the backward pass. Each
implementation supplies the two passes and a hashable ``static`` tuple of what its kernels are specialised on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np

if TYPE_CHECKING:
    from jax_cudnn_rnn.config import RNNConfig


def config_attributes(config: RNNConfig) -> dict[str, Any]:
    """The network as both native extensions take it, in the FFI attributes of every handler and as the first keywords
    of their modules' functions (common/rnn_config.h RnnConfigAttrs), with the types the C++ side decodes."""
    return dict(mode=config.mode, num_layers=np.int64(config.num_layers), num_units=np.int64(config.num_units),
                input_size=np.int64(config.input_size), proj_size=np.int64(config.proj_size),
                direction=config.direction, input_mode=config.input_mode, bias_mode=config.bias_mode,
                cell_clip=np.float64(config.cell_clip or 0.0))  # 0 means no clipping (cell_clip=None)


class Residuals(NamedTuple):
    """What the training forward leaves for the backward pass: the inputs, the outputs and the reserve space."""

    params: jax.Array
    x: jax.Array
    h0: jax.Array
    c0: jax.Array | None
    seq_lengths: jax.Array | None
    y: jax.Array
    h_n: jax.Array
    c_n: jax.Array | None
    reserve: jax.Array


# forward(params, x, h0, c0, seq_lengths, static, training) -> (y, h_n, c_n or None, reserve or None)
Forward = Callable[..., tuple[Any, Any, Any, Any]]
# backward(static, residuals, dy, dh_n, dc_n or None) -> (dparams, dx, dh0, dc0 or None)
Backward = Callable[..., tuple[Any, Any, Any, Any]]


def fused_rnn(forward: Forward, backward: Backward) -> Callable[..., tuple[Any, Any, Any]]:
    """``rnn(params, x, h0, c0, seq_lengths, static) -> (y, h_n, c_n or None)``, differentiable in its array
    arguments (seq_lengths gets no gradient) through ``backward``."""

    @functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
    def rnn(params, x, h0, c0, seq_lengths, static):
        y, h_n, c_n, _ = forward(params, x, h0, c0, seq_lengths, static, training=False)
        return y, h_n, c_n

    def rnn_fwd(params, x, h0, c0, seq_lengths, static):
        y, h_n, c_n, reserve = forward(params, x, h0, c0, seq_lengths, static, training=True)
        return (y, h_n, c_n), Residuals(params, x, h0, c0, seq_lengths, y, h_n, c_n, reserve)

    def rnn_bwd(static, residuals: Residuals, cotangents):
        dy, dh_n, dc_n = cotangents
        dparams, dx, dh0, dc0 = backward(static, residuals, dy, dh_n, dc_n)
        return dparams, dx, dh0, dc0, None

    rnn.defvjp(rnn_fwd, rnn_bwd)
    return rnn
