"""implementation="reference": the textbook version, one ``lax.scan`` step per time step doing both GEMMs,
differentiated by JAX itself. Slower than the fast path (jax_cudnn_rnn/backends/xla.py), but it supports every
transformation, forward mode (``jax.jvp``, ``jax.jacfwd``, Hessians) included, which a custom_vjp cannot.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jax_cudnn_rnn.backends import layers, registry
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.config import RNNConfig


def _reference_direction(config, x, weights, h0, c0, mask, reset, reverse, precision):
    del precision  # set around the whole run by layers.run_layers; autodiff keeps each matmul's precision
    w_in, w_rec, w_proj, b_in, b_rec = weights
    cell = config.cell

    def step(carry, inputs):
        x_t, mask_t, reset_t = inputs
        h, c = (layers.zeroed(reset_t, state) for state in carry)
        xp = layers.add_bias(jnp.tile(x_t, (1, config.num_gates)) if w_in is None else x_t @ w_in.T, b_in)
        hp = layers.add_bias(h @ w_rec.T, b_rec)
        h_full, c_new, _ = cell.step(cell.gate_inputs(xp), hp, h, c, config.cell_clip)
        h_new = layers.project(h_full, w_proj)
        y = h_new if mask_t is None else jnp.where(mask_t, h_new, 0)
        return (layers.masked(mask_t, h_new, h), layers.masked(mask_t, c_new, c)), y

    (h_n, c_n), ys = lax.scan(step, (h0, c0), (x, mask, reset), reverse=reverse)
    return ys, h_n, c_n


def rnn_reference(
    params, x, h0, c0, config: RNNConfig, seq_lengths=None, dropout_masks=None, precision="float32", resets=None
):
    """The naive per-step version, differentiable in every mode (jvp included)."""
    return layers.run_layers(
        _reference_direction, params, x, h0, c0, config, seq_lengths, dropout_masks, precision, resets
    )


def rnn(call: Call, inputs: Inputs):
    """The registry's ``run``."""
    return rnn_reference(
        inputs.params,
        inputs.x,
        inputs.h0,
        inputs.c0,
        call.config,
        inputs.seq_lengths,
        inputs.dropout_masks,
        call.precision,
        inputs.resets,
    )


# Never the default: the xla implementation computes the same, faster.
registry.register(
    registry.Backend(
        "reference",
        None,
        priority=None,
        supports=registry.Supports("the reference implementation"),
        unavailable=lambda: None,
        run=rnn,
    )
)
