"""implementation="reference": the textbook version, one ``lax.scan`` step per time step doing both GEMMs through the
cell's ``general_step`` (every cell, activation and recurrent-dropout mask), differentiated by JAX itself. Slower
than the fast path (jax_cudnn_rnn/backends/xla.py), but it supports every
transformation, forward mode (``jax.jvp``, ``jax.jacfwd``, Hessians) included, which a custom_vjp cannot.
"""

from __future__ import annotations

import jax.numpy as jnp

from jax_cudnn_rnn.backends import layers, registry
from jax_cudnn_rnn.backends.call import Call, Inputs


def _reference_direction(direction: layers.Direction, arrays: layers.DirectionInputs):
    """Each step's input GEMM inside the scan, the cell's ``general_step`` (every cell, every activation). The
    precision is set around the whole run by ``layers.run_layers``; autodiff keeps each matmul's."""
    config = direction.config
    w_in, b_in = arrays.weights[0], arrays.weights[3]

    def gate_inputs_of(x_t):
        xp = jnp.tile(x_t, (1, config.num_gates)) if w_in is None else x_t @ w_in.T
        return config.cell.gate_inputs(layers.add_bias(xp, b_in))

    return layers.scan_general(direction, arrays.x, gate_inputs_of, arrays)


def rnn(call: Call, inputs: Inputs):
    """The registry's ``run``: the naive per-step version, differentiable in every mode (jvp included)."""
    return layers.run_layers(_reference_direction, call, inputs)


# Never the default (no cost): the xla implementation computes the same, faster.
registry.register(
    registry.Backend(
        "reference",
        None,
        supports=registry.Supports("the reference implementation"),
        unavailable=lambda: None,
        run=rnn,
    )
)
