"""The GRU that applies the reset gate before the recurrent matrix (Keras's ``GRU(reset_after=False)``, Keras 2's
default, and TensorFlow 1's ``GRUCell``):

r, z = sigmoid(W x + b_W + R h + b_R);  n = tanh(W_n x + b_Wn + R_n (r * h) + b_Rn);  h' = (1 - z) * n + z * h

(sigmoid: ``recurrent_activation``, tanh: ``activation``). Its weights have cuDNN's GRU's shapes and gate order, but
every bias sits outside a product, so an input and a recurrent bias of a gate only ever add up: Keras's layer keeps
one bias [3H], which is ``bias_mode="single_input"``. cuDNN and oneDNN's linear-before-reset GRU have no such cell,
so it has no fast step and runs on the pure-JAX implementations only; its opaque buffer is the same scheme as the
other modes' (every matrix, then every bias, in canonical order).
"""

from __future__ import annotations

from jax_cudnn_rnn.cells.spec import Cell, split_gates


def gate_inputs(xp):
    """r, z and n's input parts as three arrays (as jax_cudnn_rnn/cells/gru.py)."""
    return split_gates(xp, 3)


def general_step(xps, recurrent, h, c, cell_clip, activation, recurrent_activation):
    del c, cell_clip
    x_r, x_z, x_n = xps
    h_r, h_z = split_gates(recurrent(h, slice(0, 2)), 2)
    r = recurrent_activation(x_r + h_r)
    z = recurrent_activation(x_z + h_z)
    n = activation(x_n + recurrent(r * h, slice(2, 3)))
    return (1 - z) * n + z * h, None


CELL = Cell(
    "gru_reset_before",
    ("r", "z", "n"),
    False,
    "GRU with the reset gate applied before R (Keras's reset_after=False, TensorFlow 1's GRUCell)",
    "tanh",
    "sigmoid",
    general_step,
    gate_inputs=gate_inputs,
)
