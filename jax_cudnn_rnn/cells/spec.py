"""What a cell is: ``Cell``, the one record of a mode's facts that every layer of the package reads (the config's
gate count and names, the layout's tensors, the pure-JAX implementations' steps and the fast one's backward, the native
backends' list of the modes they run), and the activation helpers the cells share.

A cell file (jax_cudnn_rnn/cells/lstm.py, gru.py, gru_reset_before.py, elman.py) defines its ``Cell``;
jax_cudnn_rnn/cells/__init__.py registers it. Arrays in a step: xp is the input part of the pre-activations
(W x + b_W) as ``gate_inputs`` splits it, hp the recurrent part (R h + b_R), both over the gates in canonical order,
[B, G*H]; h [B, hidden] (the state the step reads), c [B, H] or None.

Every cell has a ``general_step``, which takes its activations as functions and the recurrent products as a function
(``recurrent``), so that it can apply the reset gate before R (the reset-before GRU) and Keras's recurrent dropout
(one mask per gate on the h that enters R); both pure-JAX implementations run it, JAX differentiating it. A cell
whose default activations cuDNN runs also has the fast ``step`` over precomputed hp with its hand-written
``step_backward``, which the xla implementation runs for a config with the cell's own activations and no recurrent
dropout in the call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Cell:
    """One recurrent cell (``RNNConfig.mode``).

    mode: its name in ``RNNConfig.mode`` and in the native kernels' attributes.
    gate_names: its gates in canonical order (cuDNN's linLayerID order, PyTorch's row order in weight_ih/weight_hh).
    has_cell_state: whether it carries c besides h (c0/c_n exist).
    description: one line for docs and errors.
    activation: the name of its candidate activation (``RNNConfig.activation=None``): "tanh", "relu" for "rnn_relu".
    recurrent_activation: the name of its gates' activation ("sigmoid"), None for a cell without gates.
    general_step: ``(xps, recurrent, h, c, cell_clip, activation, recurrent_activation) -> (h_new, c_new or None)``:
      one step with the activations as functions; ``recurrent(v, gates)``, for a ``slice`` of the gates, is
      ``R_k v + b_Rk`` of each of those gates side by side [B, len*H] (each gate's recurrent-dropout mask applied to
      ``v`` first); h is the state as carried (no mask).
    gate_inputs: ``xp [..., G*H] -> tuple``: the input pre-activations as the steps read them (split before a scan,
      never inside it: XLA:CPU turns a slice of a scanned operand into scalar code).
    step: the fast step or None: ``(xps, hp, h, c, cell_clip) -> (h_new, c_new or None, saved)`` with the default
      activations; ``saved``, the per-gate arrays ``step_backward`` needs besides h and c.
    step_backward: with ``step``: ``(saved, h, c, dh_new, dc_new, cell_clip) -> (d_xp, d_hp, dh_direct, dc,
      h_new)``: gradients of one step given dh_new (w.r.t. the unprojected h_new) and dc_new: d_xp/d_hp w.r.t. the
      input/recurrent pre-activations (the same array where they are equal), dh_direct the part of dh that bypasses R
      (else None), dc w.r.t. the previous cell state (else None), h_new the recomputed unprojected output (cells with
      a cell state, for a projection's gradient; else None).
    """

    mode: str
    gate_names: tuple[str, ...]
    has_cell_state: bool
    description: str
    activation: str
    recurrent_activation: str | None
    general_step: Callable[..., tuple[Array, Array | None]]
    step: Callable[..., tuple[Array, Array | None, tuple[Array, ...]]] | None = None
    step_backward: Callable[..., tuple[Any, ...]] | None = None
    gate_inputs: Callable[[Array], tuple[Array, ...]] = lambda xp: (xp,)

    @property
    def num_gates(self) -> int:
        """G."""
        return len(self.gate_names)


def leading(a: Array, ndim: int) -> Array:
    """``a`` with unit axes in front up to rank ``ndim`` (a [N] as [1, N] beside [B, N]): broadcasts are spelled out,
    so that the package runs under ``jax_numpy_rank_promotion="raise"`` (JAX's own tests' setting)."""
    return a.reshape((1,) * (ndim - a.ndim) + a.shape)


def sigmoid(x: Array) -> Array:
    """sigmoid(x) = (tanh(x/2) + 1) / 2: one tanh is about half the cost of XLA's exp-and-divide logistic on CPU."""
    return 0.5 * jnp.tanh(0.5 * x) + 0.5


def split_gates(xp: Array, num_gates: int) -> tuple[Array, ...]:
    """[..., G*H] as G arrays [..., H]: one ``lax.split``, whose transpose is one concatenation (G slices' is a pad of
    each and their sum: 72 us a step against 10 in an LSTM's gradient under ``jax.vmap``, H=256, 32 sequences)."""
    units = xp.shape[-1] // num_gates
    if not isinstance(xp, jax.Array):  # gates held apart, which slices give back (backends/xla.py's _Gates)
        return tuple(xp[..., g * units : (g + 1) * units] for g in range(num_gates))
    return tuple(lax.split(xp, [units] * num_gates, axis=xp.ndim - 1))
