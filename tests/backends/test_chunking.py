"""Sequences of any length (backends/fused/chunking.py): time chunks with the state carried, run over the xla
implementation as the stand-in fused backend with the step limit lowered, equal one unchunked xla call in values and
every gradient; a backend that refuses lengths of 0 never sees one; resets (backends/fused/segments.py) compose with
chunking.

Tolerance 1e-5 (float32): the same arithmetic, only the input GEMMs are split over time.
"""

from __future__ import annotations

import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import xla
from jax_cudnn_rnn.backends.fused import chunking, segments

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import draw_inputs, make_config, positional, records

T, B = 7, 4
LENGTHS = (5, 0, 7, 2)  # an empty row, a full one, and rows ending inside and at the edge of a chunk of 2 or 3
XLA = positional(xla.rnn)  # the xla implementation as the kit's runner, called positionally here


def _chunked(max_steps):
    """The xla implementation as a fused backend whose calls take at most ``max_steps`` steps."""
    return positional(lambda call, inputs: chunking.run_chunked(xla.rnn, max_steps, call, inputs))


CASES = [  # (mode, num_layers, direction, with_lengths, config options, max_steps)
    ("lstm", 2, "unidirectional", True, dict(proj_size=2), 2),
    ("gru", 2, "bidirectional", True, dict(dropout=0.5), 3),
    ("rnn_tanh", 1, "bidirectional", False, {}, 2),
    ("lstm", 1, "bidirectional", True, dict(cell_clip=0.5), 2),
    ("rnn_relu", 2, "unidirectional", False, {}, 3),
]


def _masks(cfg):
    if not cfg.dropout:
        return None
    return jcr.dropout.dropout_masks(jax.random.key(4), cfg, (T, B, cfg.output_size), jnp.float32)


def _loss_and_outputs(run, cfg, lengths, masks, params, x, h0, c0):
    y, h_n, c_n = run(params, x, h0, c0, cfg, lengths, masks)
    total = jnp.sum(jnp.sin(y)) + jnp.sum(h_n**2) + (0 if c_n is None else jnp.sum(c_n * 0.3))
    return total, (y, h_n, c_n)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[5]}" for c in CASES])
def test_chunked_equals_unchunked(case):
    mode, num_layers, direction, with_lengths, options, max_steps = case
    cfg = make_config(mode, num_layers, direction, **options)
    inputs = tuple(
        None if a is None else jnp.asarray(a) for a in draw_inputs(cfg, np.random.default_rng(num_layers), T, B)
    )
    lengths = jnp.array(LENGTHS, jnp.int32) if with_lengths else None
    argnums = (0, 1, 2, 3) if cfg.mode == "lstm" else (0, 1, 2)
    chunked = _chunked(max_steps)

    @jax.jit
    def both(inputs):
        return [
            jax.value_and_grad(
                functools.partial(_loss_and_outputs, run, cfg, lengths, _masks(cfg)), argnums=argnums, has_aux=True
            )(*inputs)
            for run in (chunked, XLA)
        ]

    ((_, got), got_grads), ((_, want), want_grads) = both(inputs)
    for name, a, b in zip(
        ("y", "h_n", "c_n", "dparams", "dx", "dh0", "dc0"), (*got, *got_grads), (*want, *want_grads), strict=False
    ):
        if b is None:
            assert a is None
            continue
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)
        assert np.abs(np.asarray(b)).max() > 1e-3, name
    if with_lengths:
        assert np.all(np.asarray(got[0])[:, 1] == 0)
        np.testing.assert_array_equal(got[1][:, 1], inputs[2][:, 1])


def test_backend_never_sees_an_empty_chunk():
    """Eager, so the stand-in can look at the lengths each chunk gets: never 0, though row 1 is empty and rows 0 and
    3 end before the last chunks."""
    cfg = make_config("gru", 1, "bidirectional")
    params, x, h0, _ = (None if a is None else jnp.asarray(a) for a in draw_inputs(cfg, np.random.default_rng(0), T, B))
    seen = []

    def strict(call, inputs):
        seen.append(np.asarray(inputs.seq_lengths))
        assert seen[-1].min() >= 1, seen[-1]
        return xla.rnn(call, inputs)

    lengths = jnp.array(LENGTHS, jnp.int32)
    got = chunking.run_chunked(strict, 3, *records(params, x, h0, None, cfg, lengths))
    want = XLA(params, x, h0, None, cfg, lengths)
    assert len(seen) == 6  # 2 directions x 3 chunks
    np.testing.assert_array_equal(seen[2], [1, 1, 1, 1])  # the last chunk (step 6): only row 2 has a step there
    for a, b in zip(got[:2], want[:2], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_reverse_rows_reverses_within_each_length():
    a = jnp.arange(T * B, dtype=jnp.float32).reshape(T, B)[:, :, None]
    lengths = jnp.array(LENGTHS, jnp.int32)
    got = np.asarray(chunking.reverse_rows(a, lengths))[:, :, 0]
    for row, length in enumerate(LENGTHS):
        column = np.asarray(a)[:, row, 0]
        np.testing.assert_array_equal(got[:, row], np.concatenate([column[:length][::-1], column[length:]]))
    np.testing.assert_array_equal(chunking.reverse_rows(chunking.reverse_rows(a, lengths), lengths), a)
    np.testing.assert_array_equal(chunking.reverse_rows(a, None), a[::-1])


def test_resets_compose_with_chunking():
    """The segment repacking over a chunked backend (what the cuDNN path runs for a long window with resets) equals
    the xla implementation's own resets, values and gradients."""
    cfg = make_config("lstm", 1, "bidirectional")
    inputs = tuple(jnp.asarray(a) for a in draw_inputs(cfg, np.random.default_rng(5), T, B))
    lengths = jnp.array([6, 3, 7, 1], jnp.int32)
    resets = np.zeros((T, B), bool)
    resets[[2, 5], 0] = True
    resets[[0, 1, 2], 1] = True
    resets[3, 2] = True
    resets = jnp.asarray(resets)

    def chunked(call, inputs):
        return chunking.run_chunked(xla.rnn, 2, call, inputs)

    def packed(params, x, h0, c0, cfg, lengths, masks):
        call, inputs = records(params, x, h0, c0, cfg, lengths, masks, resets, max_segments=T * B)
        return segments.rnn_segmented(chunked, xla.rnn, call, inputs)

    own = positional(xla.rnn, resets=resets)

    @jax.jit
    def both(inputs):
        return [
            jax.value_and_grad(
                functools.partial(_loss_and_outputs, run, cfg, lengths, None), argnums=(0, 1, 2, 3), has_aux=True
            )(*inputs)
            for run in (packed, own)
        ]

    ((_, got), got_grads), ((_, want), want_grads) = both(inputs)
    for a, b in zip((*got, *got_grads), (*want, *want_grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_max_steps_must_be_a_positive_int():
    cfg = make_config("gru", 1, "unidirectional")
    params, x, h0, _ = draw_inputs(cfg, np.random.default_rng(0), T, B)
    with pytest.raises(ValueError, match=r"max_steps is 0; expected an int >= 1"):
        chunking.run_chunked(xla.rnn, 0, *records(params, x, h0, None, cfg))
