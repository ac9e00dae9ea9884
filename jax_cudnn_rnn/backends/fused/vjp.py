"""The ``jax.custom_vjp`` both native backends (cuDNN, oneDNN) build their kernels into.

A fused RNN library has an inference forward, a training forward that also returns an opaque reserve space (what its
backward pass reads: cuDNN's reserve space, oneDNN's workspaces), and a backward pass that gives every gradient at
once. ``fused_rnn`` ties them: called without differentiation it runs the inference forward; under ``jax.grad`` /
``jax.vjp`` the training forward, whose outputs and reserve are the residuals, then the backward pass. Each
implementation supplies the two passes and a hashable ``static`` value of what its kernels are specialised on; its
reserve may be any pytree (cuDNN's carries the call's plan with the buffer).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from jax_cudnn_rnn.backends.custom_vjp import custom_vjp


class KernelArrays(NamedTuple):
    """The arrays of one kernel call that get gradients: the opaque buffer, x [T, B, I], h0 [L*D, B, hidden] and c0
    [L*D, B, H] (LSTM) or None."""

    params: jax.Array
    x: jax.Array
    h0: jax.Array
    c0: jax.Array | None


class Residuals(NamedTuple):
    """What the training forward leaves for the backward pass: the inputs, the outputs and the reserve space."""

    arrays: KernelArrays
    seq_lengths: jax.Array | None
    y: jax.Array
    h_n: jax.Array
    c_n: jax.Array | None
    reserve: Any


# forward(arrays, seq_lengths, static, training) -> (y, h_n, c_n or None, reserve or None)
Forward = Callable[..., tuple[Any, Any, Any, Any]]
# backward(static, residuals, (dy, dh_n, dc_n or None)) -> KernelArrays of cotangents (dc0 None without c0)
Backward = Callable[..., KernelArrays]


def fused_rnn(forward: Forward, backward: Backward) -> Callable[..., tuple[Any, Any, Any]]:
    """``rnn(arrays: KernelArrays, seq_lengths, static) -> (y, h_n, c_n or None)``, differentiable in ``arrays``
    (seq_lengths gets no gradient) through ``backward``."""

    @functools.partial(custom_vjp, nondiff_argnums=(2,))
    def rnn(arrays: KernelArrays, seq_lengths, static):
        y, h_n, c_n, _ = forward(arrays, seq_lengths, static, training=False)
        return y, h_n, c_n

    def rnn_fwd(arrays: KernelArrays, seq_lengths, static):
        y, h_n, c_n, reserve = forward(arrays, seq_lengths, static, training=True)
        return (y, h_n, c_n), Residuals(arrays, seq_lengths, y, h_n, c_n, reserve)

    def rnn_bwd(static, residuals: Residuals, cotangents):
        return backward(static, residuals, cotangents), None

    rnn.defvjp(rnn_fwd, rnn_bwd)
    return rnn
