"""The vanilla (Elman) RNN cells, h' = tanh(W x + b_W + R h + b_R) ("rnn_tanh") or relu(...) ("rnn_relu"); with
another ``activation`` (Keras's SimpleRNN), that one in its place. They have no gates, so no recurrent activation."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_cudnn_rnn.cells.spec import Cell


def _step(activation):
    def step(xps, hp, h, c, cell_clip):
        del h, c, cell_clip
        h_new = activation(xps[0] + hp)
        return h_new, None, (h_new,)

    return step


def _tanh_backward(saved, h, c, dh_new, dc_new, cell_clip):
    (h_new,) = saved
    d_pre = dh_new * (1 - h_new * h_new)
    return d_pre, d_pre, None, None, None


def _relu_backward(saved, h, c, dh_new, dc_new, cell_clip):
    (h_new,) = saved
    d_pre = jnp.where(h_new > 0, dh_new, 0)
    return d_pre, d_pre, None, None, None


def general_step(xps, recurrent, h, c, cell_clip, activation, recurrent_activation):
    del c, cell_clip, recurrent_activation
    return activation(xps[0] + recurrent(h, slice(0, 1))), None


TANH = Cell(
    "rnn_tanh", ("h",), False, "vanilla RNN with tanh", "tanh", None, general_step, _step(jnp.tanh), _tanh_backward
)
RELU = Cell(
    "rnn_relu", ("h",), False, "vanilla RNN with relu", "relu", None, general_step, _step(jax.nn.relu), _relu_backward
)
