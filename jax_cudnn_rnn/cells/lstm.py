"""The LSTM cell (cuDNN's, PyTorch's and Flax's ``LSTMCell`` with separate input and recurrent biases):

    i, f, o = sigmoid(W x + b_W + R h + b_R);  g = tanh(...);  c' = f * c + i * g;  h' = o * tanh(c')

(sigmoid: ``recurrent_activation``, tanh: ``activation``, both of g and of c', as Keras's LSTMCell)

with cuDNN's cell clipping (``RNNConfig.cell_clip``): c is clipped where it is read, by the output tanh and by the
next step, and carried unclipped (c_n is unclipped and c0 is clipped on its first use). A projection (``proj_size``)
is applied by the layer, outside the cell.
"""

from __future__ import annotations

import jax.numpy as jnp

from jax_cudnn_rnn.cells.spec import Array, Cell, leading, split_gates


def _activations(pre: Array) -> Array:
    """sigmoid on the i, f, o blocks and tanh on g, as one tanh over all four blocks."""
    hidden = pre.shape[-1] // 4
    half = jnp.full((hidden,), 0.5, pre.dtype)
    scale = leading(jnp.concatenate([half, half, jnp.ones((hidden,), pre.dtype), half]), pre.ndim)
    shift = leading(jnp.concatenate([half, half, jnp.zeros((hidden,), pre.dtype), half]), pre.ndim)
    return jnp.tanh(pre * scale) * scale + shift


def _clip(c: Array, cell_clip: float | None) -> Array:
    """The cell state as the LSTM reads it (CUDNN_RNN_CLIP_MINMAX)."""
    return c if cell_clip is None else jnp.clip(c, -cell_clip, cell_clip)


def _clip_grad(dc: Array, c: Array, cell_clip: float | None) -> Array:
    """dc through ``_clip``: zero where the clip bites."""
    return dc if cell_clip is None else jnp.where(jnp.abs(c) < cell_clip, dc, 0)


def step(xps, hp, h, c, cell_clip):
    i, f, g, o = jnp.split(_activations(xps[0] + hp), 4, axis=-1)
    c_new = f * _clip(c, cell_clip) + i * g
    return o * jnp.tanh(_clip(c_new, cell_clip)), c_new, (i, f, g, o)


def step_backward(saved, h, c, dh_new, dc_new, cell_clip):
    del h
    i, f, g, o = saved
    c_in = _clip(c, cell_clip)
    c_new = f * c_in + i * g
    tanh_c = jnp.tanh(_clip(c_new, cell_clip))
    dc_total = dc_new + _clip_grad(dh_new * o * (1 - tanh_c * tanh_c), c_new, cell_clip)
    d_pre = jnp.concatenate(
        [
            dc_total * g * i * (1 - i),
            dc_total * c_in * f * (1 - f),
            dc_total * i * (1 - g * g),
            dh_new * tanh_c * o * (1 - o),
        ],
        axis=-1,
    )
    return d_pre, d_pre, None, _clip_grad(dc_total * f, c, cell_clip), o * tanh_c


def general_step(xps, recurrent, h, c, cell_clip, activation, recurrent_activation):
    """Keras's LSTMCell with cuDNN's clipping: the candidate and the output use ``activation``, the gates
    ``recurrent_activation``."""
    i, f, g, o = split_gates(xps[0] + recurrent(h, slice(0, 4)), 4)
    i, f, o = recurrent_activation(i), recurrent_activation(f), recurrent_activation(o)
    c_new = f * _clip(c, cell_clip) + i * activation(g)
    return o * activation(_clip(c_new, cell_clip)), c_new


CELL = Cell(
    "lstm",
    ("i", "f", "g", "o"),
    True,
    "LSTM: input, forget, cell (new memory) and output gates",
    "tanh",
    "sigmoid",
    general_step,
    step,
    step_backward,
)
