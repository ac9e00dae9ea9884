"""rnn() (implementations "xla" and "reference") against the independent float64 NumPy oracle.

The oracle (tests/numpy_reference.py, itself validated against PyTorch) gets the canonical lists from
``params_to_canonical(params)``; rnn() gets the opaque buffer. Compiling is what costs on CPU, so the cases of one
(mode, implementation) are compiled together in one ``jax.jit`` (cached per module) and each case is still its own
test.

Tolerances: float32 atol = rtol = 1e-5 (values are O(1), a few dozen float32 ops deep); float64 1e-12; float16 and
bfloat16 are computed in float32 and rounded to the dtype at the end (and between layers), so a few half-ulps:
float16 2e-3 (relative half-ulp 2^-11 ~ 4.9e-4: about 4 of them), bfloat16 1.6e-2 (2^-8 ~ 3.9e-3: about 4 of them).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_cudnn_rnn as jcr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import LENGTHS, MODES, B, T, documented_dropout_masks, draw_inputs, make_config, oracle

DIRECTIONS = ("unidirectional", "bidirectional")


def make_inputs(cfg, seed=0, batch=B, steps=T):
    """(params, x, h0, c0) drawn with ``seed`` (``support.draw_inputs``)."""
    return draw_inputs(cfg, np.random.default_rng(seed), steps, batch)


def assert_matches(got, want, cfg, tol, label=""):
    y, h, c = got
    wy, wh, wc = want
    assert y.shape == wy.shape and y.dtype == cfg.dtype, (label, y.shape, y.dtype)
    assert h.shape == wh.shape and h.dtype == cfg.dtype, (label, h.shape, h.dtype)
    np.testing.assert_allclose(np.asarray(y).astype(np.float64), wy, rtol=tol, atol=tol, err_msg=f"{label} y")
    np.testing.assert_allclose(np.asarray(h).astype(np.float64), wh, rtol=tol, atol=tol, err_msg=f"{label} h_n")
    if cfg.mode == "lstm":
        assert c.shape == wc.shape and c.dtype == cfg.dtype
        np.testing.assert_allclose(np.asarray(c).astype(np.float64), wc, rtol=tol, atol=tol, err_msg=f"{label} c_n")
    else:
        assert c is None


# ----------------------------------------------------------------------------------------------------------------------
# float32: the full product, compiled per (mode, implementation) in one jit.
# ----------------------------------------------------------------------------------------------------------------------

# Every (layers, direction, input mode) with seq_lengths; without them a subset (the unmasked path differs only in
# the absent mask). The reference implementation, a second opinion next to "xla", gets a smaller subset. Compiling
# dominates the runtime on CPU, hence the trimming.
WITH_LENGTHS = [
    (L, d, im, True) for L, d, im in itertools.product((1, 2, 3), DIRECTIONS, ("linear_input", "skip_input"))
]
F32_CASES = {
    "xla": [
        *WITH_LENGTHS,
        (1, "unidirectional", "skip_input", False),
        (1, "bidirectional", "linear_input", False),
        (2, "bidirectional", "linear_input", False),
        (3, "unidirectional", "linear_input", False),
    ],
    "reference": [c for c in WITH_LENGTHS if c[0] == 1 or (c[0] == 3 and c[1] == "bidirectional")]
    + [(2, "bidirectional", "skip_input", False)],
}
F32_PARAMS = [(impl, *case) for impl, cases in F32_CASES.items() for case in cases]


@functools.cache
def _f32_results(mode, implementation):
    cases = []
    for num_layers, direction, input_mode, with_lengths in F32_CASES[implementation]:
        cfg = make_config(mode, num_layers, direction, input_mode)
        seed = 100 * num_layers + 10 * len(direction) + len(input_mode) + len(mode)
        cases.append((cfg, with_lengths, make_inputs(cfg, seed=seed)))
    lengths = jnp.array(LENGTHS, jnp.int32)

    @jax.jit
    def run_all(arrays, lengths):
        return [
            jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths if with_lengths else None, implementation=implementation)
            for (cfg, with_lengths, _), (p, x, h0, c0) in zip(cases, arrays, strict=True)
        ]

    outputs = run_all([tuple(None if a is None else jnp.asarray(a) for a in inputs) for _, _, inputs in cases], lengths)
    return {
        case: (cfg, inputs, out)
        for case, (cfg, _, inputs), out in zip(F32_CASES[implementation], cases, outputs, strict=True)
    }


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("implementation,num_layers,direction,input_mode,with_lengths", F32_PARAMS)
def test_float32_matches_numpy(mode, implementation, num_layers, direction, input_mode, with_lengths):
    cfg, (params, x, h0, c0), out = _f32_results(mode, implementation)[
        (num_layers, direction, input_mode, with_lengths)
    ]
    lengths = np.array(LENGTHS) if with_lengths else None
    want = oracle(cfg, params, x, h0, c0, seq_lengths=lengths)
    assert_matches(out, want, cfg, 1e-5)
    if with_lengths:  # zero padding past each length, for both directions
        y = np.asarray(out[0])
        for b, n in enumerate(LENGTHS):
            assert np.all(y[n:, b] == 0)


# ----------------------------------------------------------------------------------------------------------------------
# float64 (x64 enabled only inside the test), float16, bfloat16: a representative subset.
# ----------------------------------------------------------------------------------------------------------------------

SUBSET = [
    ("lstm", 2, "bidirectional", "linear_input", True),
    ("gru", 2, "bidirectional", "skip_input", True),
    ("rnn_tanh", 1, "unidirectional", "linear_input", False),
    ("rnn_relu", 2, "unidirectional", "skip_input", True),
]


@pytest.mark.parametrize("implementation", ["xla", "reference"])
def test_float64_matches_numpy(implementation):
    with jax.enable_x64(True):
        cases = SUBSET
        cfgs = [make_config(m, L, d, im, dtype=np.float64) for m, L, d, im, _ in cases]
        inputs = [make_inputs(cfg, seed=i) for i, cfg in enumerate(cfgs)]
        lengths = jnp.array(LENGTHS, jnp.int32)

        @jax.jit
        def run_all(arrays, lengths):
            return [
                jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths if case[-1] else None, implementation=implementation)
                for cfg, case, (p, x, h0, c0) in zip(cfgs, cases, arrays, strict=True)
            ]

        outs = run_all([tuple(None if a is None else jnp.asarray(a) for a in inp) for inp in inputs], lengths)
        for cfg, case, inp, out in zip(cfgs, cases, inputs, outs, strict=True):
            assert out[0].dtype == np.float64
            want = oracle(cfg, *inp, seq_lengths=np.array(LENGTHS) if case[-1] else None)
            assert_matches(out, want, cfg, 1e-12, label=str(case))


@pytest.mark.parametrize(
    "dtype,tol,implementation",
    [(np.float16, 2e-3, "xla"), (ml_dtypes.bfloat16, 1.6e-2, "reference")],
    ids=["float16-xla", "bfloat16-reference"],
)
def test_half_precision_matches_numpy(dtype, tol, implementation):
    cases = SUBSET
    cfgs = [make_config(m, L, d, im, dtype=dtype) for m, L, d, im, _ in cases]
    inputs = [make_inputs(cfg, seed=3) for cfg in cfgs]
    lengths = jnp.array(LENGTHS, jnp.int32)

    @jax.jit
    def run_all(arrays, lengths):
        return [
            jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths if case[-1] else None, implementation=implementation)
            for cfg, case, (p, x, h0, c0) in zip(cfgs, cases, arrays, strict=True)
        ]

    outs = run_all([tuple(None if a is None else jnp.asarray(a) for a in inp) for inp in inputs], lengths)
    for cfg, case, inp, out in zip(cfgs, cases, inputs, outs, strict=True):
        want = oracle(cfg, *inp, seq_lengths=np.array(LENGTHS) if case[-1] else None)
        assert_matches(out, want, cfg, tol, label=str(case))


# ----------------------------------------------------------------------------------------------------------------------
# Projection, cell clipping and bias modes.
# ----------------------------------------------------------------------------------------------------------------------

EXTRA_CASES = [
    ("lstm", dict(proj_size=2), "bidirectional", 2),
    ("lstm", dict(proj_size=3, cell_clip=0.3), "unidirectional", 2),
    ("lstm", dict(cell_clip=0.25), "bidirectional", 1),
    ("lstm", dict(bias_mode="none"), "unidirectional", 2),
    ("gru", dict(bias_mode="single_input"), "bidirectional", 2),
    ("gru", dict(bias_mode="single_recurrent"), "unidirectional", 1),
    ("rnn_tanh", dict(bias_mode="single_recurrent"), "bidirectional", 2),
]


@pytest.mark.parametrize("implementation", ["xla", "reference"])
def test_projection_clip_bias_modes_match_numpy(implementation):
    cfgs = [make_config(m, L, d, "linear_input", **kw) for m, kw, d, L in EXTRA_CASES]
    inputs = [make_inputs(cfg, seed=5) for cfg in cfgs]
    lengths = jnp.array(LENGTHS, jnp.int32)

    @jax.jit
    def run_all(arrays, lengths):
        return [
            jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths, implementation=implementation)
            for cfg, (p, x, h0, c0) in zip(cfgs, arrays, strict=True)
        ]

    outs = run_all([tuple(None if a is None else jnp.asarray(a) for a in inp) for inp in inputs], lengths)
    for cfg, inp, out in zip(cfgs, inputs, outs, strict=True):
        want = oracle(cfg, *inp, seq_lengths=np.array(LENGTHS))
        assert_matches(out, want, cfg, 1e-5, label=str(cfg))
        if cfg.cell_clip is not None:
            # h = o * tanh(clip(c)) (times W_proj when projected): bounded by tanh(cell_clip) without projection
            if not cfg.proj_size:
                assert np.abs(np.asarray(out[1])).max() <= np.tanh(cfg.cell_clip) + 1e-6
            # the clip bites: the unclipped oracle differs
            unclipped = oracle(dataclasses.replace(cfg, cell_clip=None), *inp, seq_lengths=np.array(LENGTHS))
            assert np.abs(unclipped[0] - want[0]).max() > 1e-3


# ----------------------------------------------------------------------------------------------------------------------
# Dropout.
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,num_layers,direction,implementation",
    [("lstm", 3, "bidirectional", "xla"), ("gru", 2, "unidirectional", "reference")],
)
def test_dropout_matches_numpy_with_documented_masks(mode, num_layers, direction, implementation):
    cfg = make_config(mode, num_layers, direction, "linear_input", dropout=0.4)
    params, x, h0, c0 = make_inputs(cfg, seed=8)
    lengths = jnp.array(LENGTHS, jnp.int32)
    args = (jnp.asarray(params), jnp.asarray(x), jnp.asarray(h0), None if c0 is None else jnp.asarray(c0), cfg)
    train = jax.jit(
        lambda key: jcr.rnn(
            *args, seq_lengths=lengths, is_training=True, dropout_key=key, implementation=implementation
        )
    )
    key = jax.random.key(42)
    got, again, other = train(key), train(key), train(jax.random.key(43))
    inference = jcr.rnn(*args, seq_lengths=lengths, is_training=False, dropout_key=key, implementation=implementation)
    masks = documented_dropout_masks(key, cfg, (T, B, cfg.output_size))
    # Masks are 0 or 1/(1-p), and some of each.
    for m in masks:
        assert set(np.unique(m).round(6)) == {0.0, round(1 / 0.6, 6)}
    assert_matches(got, oracle(cfg, params, x, h0, c0, seq_lengths=np.array(LENGTHS), dropout_masks=masks), cfg, 1e-5)
    for a, b in zip(got, again, strict=True):
        if a is not None:
            np.testing.assert_array_equal(a, b)
    assert np.abs(np.asarray(other[0]) - np.asarray(got[0])).max() > 1e-3
    # is_training=False ignores dropout (even with a key)
    assert_matches(inference, oracle(cfg, params, x, h0, c0, seq_lengths=np.array(LENGTHS)), cfg, 1e-5)


def test_dropout_is_identical_across_implementations():
    cfg = make_config("rnn_tanh", 2, "unidirectional", "linear_input", dropout=0.5)
    params, x, h0, _ = make_inputs(cfg, seed=9)
    key = jax.random.key(7)
    outs = [
        jcr.rnn(
            jnp.asarray(params),
            jnp.asarray(x),
            jnp.asarray(h0),
            None,
            cfg,
            is_training=True,
            dropout_key=key,
            implementation=impl,
        )[0]
        for impl in ("xla", "reference")
    ]
    masks = documented_dropout_masks(key, cfg, (T, B, cfg.output_size))
    want = oracle(cfg, params, x, h0, None, dropout_masks=masks)[0]
    for out in outs:
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)


def test_dropout_zero_or_single_layer_ignores_key():
    """dropout=0 or num_layers=1: training output equals the plain oracle."""
    for cfg in (
        make_config("gru", 2, "unidirectional", "linear_input", dropout=0.0),
        make_config("gru", 1, "unidirectional", "linear_input", dropout=0.5),
    ):
        params, x, h0, _ = make_inputs(cfg, seed=10)
        got = jcr.rnn(
            jnp.asarray(params),
            jnp.asarray(x),
            jnp.asarray(h0),
            None,
            cfg,
            is_training=True,
            dropout_key=jax.random.key(0),
            implementation="xla",
        )
        assert_matches(got, oracle(cfg, params, x, h0, None), cfg, 1e-5)
