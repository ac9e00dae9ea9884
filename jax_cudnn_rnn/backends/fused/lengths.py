"""Per-sequence lengths on a fused kernel that takes none (oneDNN): every row runs all T steps, padding included.

``seq_lengths`` means (docs/architecture.md): outputs past a row's length are zero, the forward direction's final
state is the state after the row's last valid step, and the backward direction reads positions len-1 ... 0. A kernel
without lengths runs every row for T steps from h0/c0, so ``with_lengths`` arranges each call so that what it returns
at the valid steps and at step T is exactly that:

* one unidirectional call per layer and direction (``stacking.rnn_with_masks``); the backward direction runs forward
  over the rows reversed within their lengths (``chunking.reverse_rows``), then its outputs are reversed back, so that
  every row starts at step 0 from its initial state and its padding comes after its last valid step;
* the padding steps read zeros instead of whatever the caller left there, and their outputs are zeroed: outputs at
  valid steps do not depend on later steps, and no gradient reaches or leaves a padding step (its outputs' cotangents
  are zero, so every step after a row's end passes zero gradients back, exactly);
* ``h_n`` is the output at step len-1 of each row (a gather; ``h0`` for a row of length 0), so ``dh_n`` reaches the
  kernel as part of that step's output cotangent;
* an LSTM's ``c_n`` is not among the outputs, so the padding must leave c unchanged: the input gets one more channel,
  1 at padding steps and 0 at valid ones, whose input weights are +``SATURATION`` for the forget gate and
  -``SATURATION`` for the input gate (zero for the others). At a padding step f = sigmoid(>= 2^14 - |rest|) = 1
  and i = 0 exactly, so c' = 1·c + 0·g = c and the kernel's c at step T is c after len-1; its backward passes dc
  through unchanged (f = 1) and gives those gates zero gradient (f(1-f) = 0 = i(1-i)). At valid steps the channel is
  0 and changes nothing. A ReLU RNN gets the channel too (-``SATURATION`` on its one gate), so that its padding
  steps output 0 instead of growing without bound (0·inf in the weight gradients would be NaN); GRU and tanh
  outputs stay bounded without it.

Everything is ordinary JAX around the kernel's calls (slices, gathers, a rebuilt buffer for the channel's config), so
gradients flow through it and it composes with ``jax.jit`` and ``jax.vmap``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jax_cudnn_rnn import _buffer, layout
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.fused import stacking
from jax_cudnn_rnn.backends.fused.chunking import reverse_rows
from jax_cudnn_rnn.backends.fused.convention import Kernel, part
from jax_cudnn_rnn.config import RNNConfig

Array = jax.Array

SATURATION = 2.0**14
"""The padding channel's weight: exact in every float dtype, and far beyond where the sigmoid rounds to 0 and 1
(|x| > 17 in float32) for any realistic rest of the preactivation (biases plus the recurrent product of bounded
states)."""

# Per mode that needs the channel: its weight per gate, in gate order (LSTM i, f, g, o; the ReLU RNN's one gate).
CHANNEL_WEIGHTS = {"lstm": (-SATURATION, SATURATION, 0.0, 0.0), "rnn_relu": (-SATURATION,)}


def with_channel(params: Array, config: RNNConfig) -> tuple[Array, RNNConfig]:
    """(the buffer, the config) of ``config``'s one-layer unidirectional network with one more input channel, whose
    input weights are ``CHANNEL_WEIGHTS[config.mode]`` (a constant: no gradient reaches it). Skip input becomes
    linear input with identity matrices.

    The input matrices lead a one-layer, one-direction buffer and everything after them keeps its order, so the new
    buffer is the wider matrices followed by the rest of ``params`` as it is: two concatenations, which XLA runs as
    plain copies (a concatenation of every slot, each sliced, ran as one loop that cost 3 ms of a 100-step B=1 LSTM
    training step)."""
    wider = dataclasses.replace(config, input_size=config.input_size + 1, input_mode="linear_input")
    old, new = layout.layer_slots(config, 0, 0), layout.layer_slots(wider, 0, 0)
    rows = config.num_gates * config.num_units
    stored = rows * config.input_size if old["w_input"] else 0  # skip input stores no input matrices
    moved = [
        (o.offset + rows * wider.input_size - stored, n.offset)
        for g in layout.GROUP_NAMES[1:]
        for o, n in zip(old[g], new[g], strict=True)
    ]
    if new["w_input"][0].offset != 0 or any(a != b for a, b in moved):
        raise AssertionError("layout: the input matrices do not lead a one-layer buffer")
    if old["w_input"]:
        matrices = params[:stored].reshape(rows, config.input_size)
    else:
        matrices = jnp.tile(jnp.eye(config.num_units, dtype=params.dtype), (config.num_gates, 1))
    column = jnp.repeat(jnp.asarray(CHANNEL_WEIGHTS[config.mode], params.dtype), config.num_units)[:, None]
    wide = jnp.concatenate([matrices, column], axis=1).reshape(-1)
    return jnp.concatenate([wide, params[stored:]]), wider


def _last_valid(y: Array, lengths: Array, initial: Array) -> Array:
    """[1, B, hidden]: y[len-1, b] for each row b, ``initial`` [1, B, hidden] where len = 0."""
    step = jnp.maximum(lengths - 1, 0)
    last = jnp.take_along_axis(y, step[None, :, None], axis=0)
    return jnp.where((lengths > 0)[None, :, None], last, initial)


def _one_direction(kernel: Kernel, call: Call, inputs: Inputs, lengths: Array):
    """A one-layer unidirectional ``call.config`` over rows whose padding follows their ``lengths`` valid steps."""
    x, params, config = inputs.x, inputs.params, call.config
    valid = (jnp.arange(x.shape[0], dtype=jnp.int32)[:, None] < lengths[None, :])[:, :, None]
    if config.mode in CHANNEL_WEIGHTS:  # zero padding and the channel in one pass (a pad fuses; a concatenate not)
        x = jax.lax.pad(x, jnp.zeros((), x.dtype), ((0, 0, 0), (0, 0, 0), (0, 1, 0)))
        channel = jnp.arange(x.shape[-1]) == x.shape[-1] - 1
        x = jnp.where(valid, x, channel.astype(x.dtype))
        params, config = with_channel(params, config)
    else:
        x = jnp.where(valid, x, jnp.zeros((), x.dtype))
    padded = inputs._replace(params=params, x=x, seq_lengths=None)
    y, _, c_n = kernel(part(call, padded, config), padded)
    y = jnp.where(valid, y, jnp.zeros((), y.dtype))
    return y, _last_valid(y, lengths, inputs.h0), c_n


def with_lengths(kernel: Kernel) -> Kernel:
    """``kernel`` (which takes no lengths: it is always called with ``inputs.seq_lengths`` None) extended to
    ``seq_lengths`` int32 [B] in [0, T] (see the module docstring); without lengths it is ``kernel`` itself."""

    def run(call: Call, inputs: Inputs):
        if inputs.seq_lengths is None:
            return kernel(call, inputs)
        lengths = jnp.clip(inputs.seq_lengths, 0, inputs.x.shape[0]).astype(jnp.int32)

        def run_layer(layer_call: Call, layer: Inputs):
            single = layer_call.config
            outputs, h_n, c_n = [], [], []
            for direction in range(single.num_directions):
                states = slice(direction, direction + 1)
                one = layer._replace(
                    params=_buffer.sub_params(layer.params, single, 0, direction)
                    if single.num_directions > 1
                    else layer.params,
                    x=layer.x if direction == 0 else reverse_rows(layer.x, lengths),
                    h0=layer.h0[states],
                    c0=None if layer.c0 is None else layer.c0[states],
                )
                one_call = part(layer_call, one, _buffer.sub_config(single, 0, direction))
                y, h_last, c_last = _one_direction(kernel, one_call, one, lengths)
                outputs.append(y if direction == 0 else reverse_rows(y, lengths))
                h_n.append(h_last)
                c_n.append(c_last)
            return (
                jnp.concatenate(outputs, axis=-1),
                jnp.concatenate(h_n),
                None if layer.c0 is None else jnp.concatenate(c_n),
            )

        if call.config.num_layers == 1:
            return run_layer(call, inputs)
        return stacking.rnn_with_masks(run_layer, call, inputs._replace(dropout_masks=None))

    return run
