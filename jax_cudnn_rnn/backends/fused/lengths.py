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
  outputs stay bounded without it. In bfloat16 a zero input with zero weights comes before the channel where the
  width would be odd, which oneDNN's kernels run slower (``channel_width``). A kernel that takes the channel
  (``with_lengths(..., takes_channel=True)``: oneDNN's fused kernels) gets the params as they are and the channel's
  weights as ``call.input_channel``, and writes the wider input matrices itself; any other gets a widened buffer
  (``with_channel``), built in XLA at every call (its temporaries' page faults cost an LSTM forward up to a third).

Everything is ordinary JAX around the kernel's calls (slices, gathers, a rebuilt buffer for the channel's config where
the kernel does not take it), so gradients flow through it and it composes with ``jax.jit`` and ``jax.vmap``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from jax_cudnn_rnn import _buffer, layout
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.custom_vjp import custom_vjp
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


def channel_width(config: RNNConfig) -> int:
    """The input width of ``config`` with the channel: one more, and for a 16-bit dtype an even number (a zero channel
    before it where needed). Its dot products take inputs in pairs (AVX512-BF16), and oneDNN 3.2 runs an odd input
    width on a slower kernel: a bfloat16 LSTM T=100 B=1 H=256 forward took 1.62 ms of CPU time at 257 inputs, 1.45 at
    258 and 1.30 at 256 (1.35 at 288, whose extra columns cost more than they save at B=32; loaded 2-core Zen 4); at
    H=1024 the widths made no difference."""
    width = config.input_size + 1
    return width + width % 2 if config.dtype.itemsize == 2 else width


def with_channel(params: Array, config: RNNConfig) -> tuple[Array, RNNConfig]:
    """(the buffer, the config) of ``config``'s one-layer unidirectional network with ``channel_width`` inputs: the
    channel last, whose input weights are ``CHANNEL_WEIGHTS[config.mode]`` (a constant: no gradient reaches it),
    zero weights for the inputs between. Skip input becomes linear input with identity matrices.

    The input matrices lead a one-layer, one-direction buffer and everything after them keeps its order, so the new
    buffer is the wider matrices followed by the rest of ``params`` as it is: two concatenations, which XLA runs as
    plain copies (a concatenation of every slot, each sliced, ran as one loop that cost 3 ms of a 100-step B=1 LSTM
    training step), and whose gradient is ``_widened``'s."""
    wider = dataclasses.replace(config, input_size=channel_width(config), input_mode="linear_input")
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
    return _widened(config.mode, rows, config.input_size, wider.input_size, bool(old["w_input"]), params), wider


def _as_bits(a: Array) -> Array:
    """A 16-bit float array as its bits: XLA:CPU computes a bfloat16 concatenation, pad or select in float32 (a
    conversion of every operand and back), where it copies integers as they are (the bfloat16 LSTM T=25 B=64 H=1024
    forward: three passes over the 8 M weights, 32 ms of a 222 ms call on a loaded 2-core Zen 4; x's padding channel
    at T=100 B=1 H=256, 79 against 37 us, at T=25 B=64 H=1024 401 against 233 us, quiet 2-core Zen 4)."""
    return jax.lax.bitcast_convert_type(a, jnp.uint16) if a.dtype.itemsize == 2 else a


def _from_bits(a: Array, dtype) -> Array:
    return jax.lax.bitcast_convert_type(a, dtype) if a.dtype != dtype else a


@functools.partial(custom_vjp, nondiff_argnums=(0, 1, 2, 3, 4))
def _widened(mode: str, rows: int, input_size: int, width: int, has_input: bool, params: Array) -> Array:
    """``params`` with its [rows, input_size] input matrices (identity matrices where ``has_input`` is False: skip
    input) widened to ``width`` columns, the channel's last and zeros between."""
    stored = rows * input_size if has_input else 0
    bits = _as_bits(params)  # before any slice, so that the slices are the concatenations' operands, not copies
    if has_input:
        matrices = bits[:stored].reshape(rows, input_size)
    else:
        matrices = _as_bits(jnp.tile(jnp.eye(input_size, dtype=params.dtype), (rows // input_size, 1)))
    weights = jnp.asarray(CHANNEL_WEIGHTS[mode], params.dtype)
    column = jnp.repeat(weights, rows // len(CHANNEL_WEIGHTS[mode]))[:, None]
    column = _as_bits(jnp.pad(column, ((0, 0), (width - input_size - 1, 0))))  # zeros are zeros in every dtype
    wide = jnp.concatenate([matrices, column], axis=1).reshape(-1)
    return _from_bits(jnp.concatenate([wide, bits[stored:]]), params.dtype)


def _widened_fwd(mode, rows, input_size, width, has_input, params):
    return _widened(mode, rows, input_size, width, has_input, params), None


def _widened_bwd(mode, rows, input_size, width, has_input, residuals, d_widened):
    """The gradient as one concatenation of the wide matrices' first columns and the rest: autodiff's transpose (a
    pad of each part to the whole buffer, then their sum) ran as one elementwise loop over the buffer with 2-D index
    arithmetic at every element, 2.5 ms of a 100-step B=1 bfloat16 LSTM training step on a loaded 2-core Zen 4."""
    del mode, residuals
    wide = rows * width
    rest = d_widened[wide:]
    if not has_input:  # the identity matrices are constants
        return (rest,)
    bits = _as_bits(d_widened)
    matrices = bits[:wide].reshape(rows, width)[:, :input_size].reshape(-1)
    return (_from_bits(jnp.concatenate([matrices, bits[wide:]]), d_widened.dtype),)


_widened.defvjp(_widened_fwd, _widened_bwd)


@functools.partial(custom_vjp, nondiff_argnums=(0,))
def _padded(extra: int, a: Array, valid: Array) -> Array:
    """``a`` [T, B, width] with zeros where ``valid`` [T, B, 1] is False; with ``extra`` > 0 widened by that many
    columns, zeros but the last, the padding channel (1 where ``valid`` is False). One select, on the bits
    (``_as_bits``), whose gradient is the cotangent's columns of ``a`` with zeros where ``valid`` is False."""
    bits, zero = _as_bits(a), _as_bits(jnp.zeros((), a.dtype))
    fill = zero
    if extra:
        bits = jax.lax.pad(bits, zero, ((0, 0, 0), (0, 0, 0), (0, extra, 0)))
        fill = jnp.where(jnp.arange(bits.shape[-1]) == bits.shape[-1] - 1, _as_bits(jnp.ones((), a.dtype)), zero)
    return _from_bits(jnp.where(valid, bits, fill), a.dtype)


def _padded_fwd(extra, a, valid):
    return _padded(extra, a, valid), valid


def _padded_bwd(extra, valid, cotangent):
    return _padded(0, cotangent[..., : cotangent.shape[-1] - extra], valid), None


_padded.defvjp(_padded_fwd, _padded_bwd)


def valid_steps(num_steps: int, lengths: Array) -> Array:
    """bool [T, B, 1]: whether step t of row b is within its length."""
    return (jnp.arange(num_steps, dtype=jnp.int32)[:, None] < lengths[None, :])[:, :, None]


def zero_padding(a: Array, lengths: Array) -> Array:
    """``a`` [T, B, width] with zeros at the steps past each row's length (``_padded``: selected on the bits of a
    16-bit float, its gradient zero there)."""
    return _padded(0, a, valid_steps(a.shape[0], lengths))


def _last_valid(y: Array, lengths: Array, initial: Array) -> Array:
    """[1, B, hidden]: y[len-1, b] for each row b, ``initial`` [1, B, hidden] where len = 0."""
    step = jnp.maximum(lengths - 1, 0)
    last = jnp.take_along_axis(y, step[None, :, None], axis=0)
    return jnp.where((lengths > 0)[None, :, None], last, initial)


def _one_direction(kernel: Kernel, call: Call, inputs: Inputs, lengths: Array, takes_channel: bool):
    """A one-layer unidirectional ``call.config`` over rows whose padding follows their ``lengths`` valid steps."""
    x, params, config = inputs.x, inputs.params, call.config
    valid = valid_steps(x.shape[0], lengths)
    channel = None
    if config.mode in CHANNEL_WEIGHTS:  # zero padding and the channel in one pass (a pad fuses; a concatenate not)
        x = _padded(channel_width(config) - config.input_size, x, valid)
        if takes_channel:  # the kernel writes the channel's weights itself: no widened buffer
            channel = CHANNEL_WEIGHTS[config.mode]
        else:
            params, config = with_channel(_buffer.as_buffer(params), config)
    else:
        x = _padded(0, x, valid)
    padded = inputs._replace(params=params, x=x, seq_lengths=None)
    y, _, c_n = kernel(dataclasses.replace(part(call, padded, config), input_channel=channel), padded)
    y = _padded(0, y, valid)
    return y, _last_valid(y, lengths, inputs.h0), c_n


def with_lengths(kernel: Kernel, takes_channel: bool = False) -> Kernel:
    """``kernel`` (which takes no lengths: it is always called with ``inputs.seq_lengths`` None) extended to
    ``seq_lengths`` int32 [B] in [0, T] (see the module docstring); without lengths it is ``kernel`` itself.
    ``takes_channel``: ``kernel`` takes the padding channel as ``call.input_channel`` (x wider than its config) and
    the params as they are, else it gets ``with_channel``'s widened buffer and config."""

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
                y, h_last, c_last = _one_direction(kernel, one_call, one, lengths, takes_channel)
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
