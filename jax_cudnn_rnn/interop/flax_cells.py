"""``FlaxCellStack``: a stacked LSTM/GRU/RNN made only of plain Flax linen parts (``nn.LSTMCell``, ``nn.GRUCell``,
``nn.SimpleCell``, ``nn.RNN``, ``nn.Bidirectional``), with the same math as this library's ``rnn``.

It exists so that a model trained with the fused op can run where this library is not installed: copy this file (it
imports only jax and flax), convert the weights once with ``interop.canonical_to_flax`` (or read a canonical Orbax
checkpoint), and apply. Parameters are nested ``layer_{l}/cell/...`` (unidirectional) or
``layer_{l}/{forward_rnn|backward_rnn}/cell/...`` (bidirectional), each cell with Flax's own names
(``ii``/``hi``... for LSTMCell, ``ir``/``hr``... for GRUCell, ``i``/``h`` for SimpleCell).

Differences from ``rnn`` that the weights conversion absorbs: Flax cells have one bias per gate (LSTMCell in the
recurrent ``h*`` dense, GRUCell/SimpleCell in the input ``i*`` dense, plus GRUCell's separate ``hn`` bias), so the
input and recurrent biases are summed; skip input becomes an identity input kernel. Not representable here:
projection (proj_size) and cell clipping.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["FlaxCellStack", "MODES", "make_cell"]

#: The modes a stack of plain Flax cells can express (all four).
MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def make_cell(
    mode: str,
    num_units: int,
    dtype: Any = None,
    param_dtype: Any = jnp.float32,
    name: str | None = None,
    parent: Any = None,
) -> nn.Module:
    """The plain Flax cell with this library's math for ``mode``."""
    kwargs = dict(features=num_units, dtype=dtype, param_dtype=param_dtype, parent=parent)
    if name is not None:
        kwargs["name"] = name
    if mode == "lstm":
        return nn.LSTMCell(**kwargs)
    if mode == "gru":
        return nn.GRUCell(**kwargs)
    if mode == "rnn_tanh":
        return nn.SimpleCell(activation_fn=jnp.tanh, **kwargs)
    if mode == "rnn_relu":
        return nn.SimpleCell(activation_fn=nn.relu, **kwargs)
    raise ValueError(f"mode is {mode!r}; expected one of {list(MODES)}")


class FlaxCellStack(nn.Module):
    """``num_layers`` recurrent layers of plain Flax cells; optional bidirectional layers concatenate forward and
    backward outputs (forward first), like cuDNN and PyTorch.

    Call: ``y = model.apply({'params': p}, x, seq_lengths=None, initial_state=None, return_state=False)``, with

    * x: [B, T, I] (or [T, B, I] with ``time_major=True``);
    * seq_lengths: optional int [B]: outputs at t >= length are zero, the final state is the one after the last valid
      step, the backward direction reads positions length-1 .. 0 (this library's and PyTorch's semantics);
    * initial_state: optional ``(h0, c0)`` in this library's layout, h0/c0 [num_layers*D, B, H] (c0 None unless
      LSTM); zeros when omitted.

    Returns y [B, T, D*H] (time-major if asked), and with ``return_state=True`` also ``(h_n, c_n)`` in the same
    layout as ``initial_state``.
    """

    mode: str
    num_units: int
    num_layers: int = 1
    bidirectional: bool = False
    time_major: bool = False
    dtype: Any = None
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(
        self, x: jax.Array, seq_lengths: jax.Array | None = None, initial_state: Any = None, return_state: bool = False
    ):
        """y [B, T, D*H] (time-major like x), and ``(h_n, c_n)`` with ``return_state``: see the class docstring."""
        if self.mode not in MODES:
            raise ValueError(f"mode is {self.mode!r}; expected one of {list(MODES)}")
        lstm = self.mode == "lstm"
        num_directions = 2 if self.bidirectional else 1
        time_axis = 0 if self.time_major else 1
        batch = x.shape[1 - time_axis]
        num_steps = x.shape[time_axis]
        if initial_state is None:
            shape = (self.num_layers * num_directions, batch, self.num_units)
            h0 = jnp.zeros(shape, self.param_dtype if self.dtype is None else self.dtype)
            c0 = jnp.zeros_like(h0) if lstm else None
        else:
            h0, c0 = initial_state

        def carry(index: int):
            # Flax's LSTMCell carry is (c, h); the other cells carry h alone.
            return (c0[index], h0[index]) if lstm else h0[index]

        hs, cs = [], []
        inputs = x
        for layer in range(self.num_layers):
            cell = lambda: make_cell(self.mode, self.num_units, self.dtype, self.param_dtype, parent=None)  # noqa: E731
            if self.bidirectional:
                # parent=None: the RNNs are adopted by Bidirectional (params under forward_rnn / backward_rnn).
                module = nn.Bidirectional(
                    nn.RNN(cell(), parent=None),
                    nn.RNN(cell(), parent=None),
                    time_major=self.time_major,
                    name=f"layer_{layer}",
                )
                (carry_f, carry_b), inputs = module(
                    inputs,
                    initial_carry=(carry(2 * layer), carry(2 * layer + 1)),
                    seq_lengths=seq_lengths,
                    return_carry=True,
                )
                finals = [carry_f, carry_b]
            else:
                module = nn.RNN(cell(), time_major=self.time_major, name=f"layer_{layer}")
                final, inputs = module(inputs, initial_carry=carry(layer), seq_lengths=seq_lengths, return_carry=True)
                finals = [final]
            if seq_lengths is not None:
                # nn.RNN computes on the padding too; the fused op writes zeros there.
                steps = jnp.arange(num_steps, dtype=seq_lengths.dtype)  # int64 under jax_enable_x64 otherwise
                valid = (
                    steps[:, None] < seq_lengths[None, :] if self.time_major else steps[None, :] < seq_lengths[:, None]
                )
                inputs = jnp.where(valid[..., None], inputs, jnp.zeros((), inputs.dtype))
            for final in finals:
                if lstm:
                    cs.append(final[0])
                    hs.append(final[1])
                else:
                    hs.append(final)
        if not return_state:
            return inputs
        return inputs, (jnp.stack(hs), jnp.stack(cs) if lstm else None)
