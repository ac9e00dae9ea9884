"""Sequences of any length on a fused backend that caps the steps of one call: time chunks with the state carried.

The runner is a ``convention.Runner`` (``run(call, inputs) -> (y, h_n, c_n)``) that needs per-row lengths in [1, T]:
cuDNN's (jax_cudnn_rnn/backends/cudnn/backend.py), or the xla implementation, which stands in for it in the CPU
tests.

``run_chunked`` splits a call longer than ``max_steps`` into consecutive time chunks of at most ``max_steps`` steps and
passes each chunk's final state on as the next chunk's initial state:

* unidirectional: the whole stack per chunk, every layer's state carried;
* bidirectional: layer by layer (layer l + 1 reads both directions of layer l at every step), each direction as a
  unidirectional one-layer network over its own slice of the buffer; the backward direction runs forward over each
  row reversed within its length (``reverse_rows``), so its chunks are the reversed sequence's, in order, and its
  final state is the state after position 0.

With lengths, a row that ends before a chunk has no step in it: ``allow_empty`` makes such a row an empty sequence
(zero outputs, state passed through) for a backend that needs lengths >= 1. Everything here is ordinary JAX around
the backend's calls, so gradients flow through the slicing, gathers and carried states.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_cudnn_rnn import _buffer
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.fused import stacking
from jax_cudnn_rnn.backends.fused.convention import Runner, part

Array = jax.Array


def allow_empty(run: Runner) -> Runner:
    """``run`` with lengths below 1 meaning an empty sequence (zero outputs, h_n/c_n = h0/c0), for a backend that
    needs every length >= 1 (cuDNN fails on 0): such rows run with length 1 and their results are replaced."""

    def wrapped(call: Call, inputs: Inputs):
        seq_lengths = inputs.seq_lengths
        if seq_lengths is None:
            return run(call, inputs)
        empty = seq_lengths < 1
        y, h_n, c_n = run(call, inputs._replace(seq_lengths=jnp.maximum(seq_lengths, 1)))
        # A length of 1 writes step 0 alone (both directions); the padding after it is already zero.
        y = y.at[0].set(jnp.where(empty[:, None], jnp.zeros((), y.dtype), y[0]))
        h_n = jnp.where(empty[None, :, None], inputs.h0, h_n)
        c_n = None if c_n is None else jnp.where(empty[None, :, None], inputs.c0, c_n)
        return y, h_n, c_n

    return wrapped


def reverse_rows(a: Array, seq_lengths: Array | None) -> Array:
    """a [T, B, ...] with each row's first ``seq_lengths[b]`` steps in reverse order and its padding in place (an
    involution): what the backward direction reads, as a forward sequence."""
    num_steps = a.shape[0]
    if seq_lengths is None:
        return a[::-1]
    steps = jnp.arange(num_steps, dtype=jnp.int32)[:, None]
    lengths = jnp.clip(seq_lengths, 0, num_steps)[None, :]
    source = jnp.where(steps < lengths, lengths - 1 - steps, steps)
    return jnp.take_along_axis(a, source.reshape(source.shape + (1,) * (a.ndim - 2)), axis=0)


def _chunk_lengths(seq_lengths: Array | None, start: int, stop: int) -> Array | None:
    return None if seq_lengths is None else jnp.clip(seq_lengths - start, 0, stop - start).astype(jnp.int32)


def _forward_chunks(run: Runner, max_steps: int, call: Call, inputs: Inputs):
    """A unidirectional stack over consecutive chunks of ``x``, the state of every layer carried."""
    run = allow_empty(run)
    x, masks = inputs.x, inputs.dropout_masks
    ys, h, c = [], inputs.h0, inputs.c0
    for start in range(0, x.shape[0], max_steps):
        stop = min(start + max_steps, x.shape[0])
        chunk = inputs._replace(
            x=x[start:stop],
            h0=h,
            c0=c,
            seq_lengths=_chunk_lengths(inputs.seq_lengths, start, stop),
            dropout_masks=None if masks is None else [mask[start:stop] for mask in masks],
        )
        y, h, c = run(part(call, chunk), chunk)
        ys.append(y)
    return jnp.concatenate(ys), h, c


def _bidirectional_chunks(run: Runner, max_steps: int, call: Call, inputs: Inputs):
    """Layer by layer (``stacking.rnn_with_masks``), each direction of a layer a unidirectional one-layer network over
    its own slice of the buffer, run as ``_forward_chunks``; the backward one over the rows reversed."""
    seq_lengths = inputs.seq_lengths

    def run_layer(layer_call: Call, layer: Inputs):
        outputs, h_n, c_n = [], [], []
        for direction in range(2):
            states = slice(direction, direction + 1)
            one = layer._replace(
                params=_buffer.sub_params(layer.params, layer_call.config, 0, direction),
                x=layer.x if direction == 0 else reverse_rows(layer.x, seq_lengths),
                h0=layer.h0[states],
                c0=None if layer.c0 is None else layer.c0[states],
            )
            one_call = part(layer_call, one, _buffer.sub_config(layer_call.config, 0, direction))
            y, h_last, c_last = _forward_chunks(run, max_steps, one_call, one)
            outputs.append(y if direction == 0 else reverse_rows(y, seq_lengths))
            h_n.append(h_last)
            c_n.append(c_last)
        c0 = layer.c0
        return jnp.concatenate(outputs, axis=-1), jnp.concatenate(h_n), (None if c0 is None else jnp.concatenate(c_n))

    return stacking.rnn_with_masks(run_layer, call, inputs)


def run_chunked(run: Runner, max_steps: int, call: Call, inputs: Inputs):
    """``run(call, inputs)``, as time chunks of at most ``max_steps`` steps when x is longer (see the module
    docstring); lengths may be 0 (an empty sequence).

    Arrays as a ``Runner``'s: x [T, B, I] config.dtype; h0 [L*D, B, hidden]; c0 [L*D, B, H] or None; seq_lengths
    int32 [B] in [0, T] or None; dropout_masks None or L-1 arrays [T, B, D*hidden]; returns
    (y [T, B, D*hidden], h_n, c_n).
    """
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps is {max_steps!r}; expected an int >= 1")
    if inputs.x.shape[0] <= max_steps:
        return allow_empty(run)(call, inputs)
    chunks = _forward_chunks if call.config.num_directions == 1 else _bidirectional_chunks
    return chunks(run, max_steps, call, inputs)
