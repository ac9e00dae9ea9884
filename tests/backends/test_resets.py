"""rnn(..., resets=...): every CPU implementation against the NumPy oracle with resets (itself checked against PyTorch
run segment by segment in test_numpy_reference_vs_torch.py), gradients (the xla custom backward against autodiff of
the reference and against finite differences of the oracle), the segment repacking that a fused backend runs
(backends/fused/segments.py), with the xla implementation standing in for cuDNN, and the errors.

Tolerances as in test_xla_vs_numpy.py / test_gradients.py: float32 1e-5 against the oracle, 2e-5 between
implementations, float64 finite differences 1e-7.
"""

from __future__ import annotations

import functools
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import xla
from jax_cudnn_rnn.backends.fused import segments

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import MODES, assert_outputs_close, draw_inputs, make_config, oracle, records

T, B = 7, 3
LENGTHS = (6, 7, 3)


def make_resets() -> np.ndarray:
    """Row 0 resets twice mid-sequence (a one-step segment at 2), row 1 at step 0 and on its last step, row 2 inside
    and past its length (the latter changes nothing): 3 + 3 + 2 = 8 segments."""
    resets = np.zeros((T, B), bool)
    resets[[2, 3], 0] = True
    resets[[0, 4, 6], 1] = True
    resets[[1, 5], 2] = True
    return resets


RESETS = make_resets()
NUM_SEGMENTS = 8


def stand_in(call, inputs):
    """The xla implementation as a fused backend without resets of its own (what cuDNN is to the fused kit)."""
    return xla.rnn(call, inputs)


def run(implementation, params, x, h0, c0, cfg, lengths, resets, dropout_key=None, max_segments=T * B):
    """rnn() for "xla"/"reference"; "segmented" is segments.rnn_segmented over the xla stand-in, by default with room
    for every segment a batch can have (the packed path; test_more_segments_than_the_bound_run_the_fallback covers
    the other)."""
    if implementation != "segmented":
        return jcr.rnn(
            params,
            x,
            h0,
            c0,
            cfg,
            seq_lengths=lengths,
            resets=resets,
            implementation=implementation,
            is_training=dropout_key is not None,
            dropout_key=dropout_key,
        )
    masks = None
    if dropout_key is not None:
        masks = jcr.dropout.dropout_masks(dropout_key, cfg, (x.shape[0], x.shape[1], cfg.output_size), jnp.float32)
    call, inputs = records(params, x, h0, c0, cfg, lengths, masks, resets, max_segments)
    return segments.rnn_segmented(stand_in, stand_in, call, inputs)


# ----------------------------------------------------------------------------------------------------------------------
# Values against the oracle: one jit per (mode, implementation).
# ----------------------------------------------------------------------------------------------------------------------

CASES = [  # (num_layers, direction, input_mode, with_lengths, config options)
    (1, "unidirectional", "linear_input", True, {}),
    (2, "bidirectional", "linear_input", True, {}),
    (2, "unidirectional", "skip_input", False, {}),
    (1, "bidirectional", "linear_input", False, {}),
]
IMPLEMENTATIONS = ("xla", "reference", "segmented")
# The repacking does not look at the cell: two modes (with and without a cell state) cover it, and save compiling.
SEGMENTED_MODES = ("lstm", "gru")


def implementations(mode):
    return IMPLEMENTATIONS if mode in SEGMENTED_MODES else IMPLEMENTATIONS[:2]


@functools.cache
def _results(mode, implementation):
    cases = []
    for i, (num_layers, direction, input_mode, with_lengths, options) in enumerate(CASES):
        cfg = make_config(mode, num_layers, direction, input_mode, **options)
        cases.append((cfg, with_lengths, draw_inputs(cfg, np.random.default_rng(i), T, B)))

    @jax.jit
    def run_all(arrays, lengths, resets):
        return [
            run(implementation, *arrays_i, cfg, lengths if with_lengths else None, resets)
            for (cfg, with_lengths, _), arrays_i in zip(cases, arrays, strict=True)
        ]

    arrays = [tuple(None if a is None else jnp.asarray(a) for a in inputs) for _, _, inputs in cases]
    return cases, run_all(arrays, jnp.array(LENGTHS, jnp.int32), jnp.asarray(RESETS))


@pytest.mark.parametrize("mode, implementation", [(m, i) for m in MODES for i in implementations(m)])
@pytest.mark.parametrize("case_index", range(len(CASES)))
def test_resets_match_numpy(mode, implementation, case_index):
    cases, outputs = _results(mode, implementation)
    cfg, with_lengths, inputs = cases[case_index]
    lengths = np.array(LENGTHS) if with_lengths else None
    want = oracle(cfg, *inputs, lengths, resets=RESETS)
    assert_outputs_close(outputs[case_index], want, atol=1e-5, rtol=1e-5, what=f"{implementation} {cfg}")
    without = oracle(cfg, *inputs, lengths)
    assert np.abs(without[0] - want[0]).max() > 1e-2  # the resets matter in this case


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_projection_clip_and_dropout_with_resets(implementation):
    """A projected, clipped LSTM and a GRU with dropout between layers, resets and lengths: the oracle gets the same
    dropout masks."""
    key = jax.random.key(5)
    lengths = np.array(LENGTHS)
    cfgs = [
        make_config("lstm", 2, "bidirectional", proj_size=2, cell_clip=0.4),
        make_config("gru", 2, "unidirectional", dropout=0.5),
    ]
    for i, cfg in enumerate(cfgs):
        inputs = draw_inputs(cfg, np.random.default_rng(10 + i), T, B)
        dropout_key = key if cfg.dropout else None
        got = jax.jit(functools.partial(run, implementation, cfg=cfg, dropout_key=dropout_key))(
            *(None if a is None else jnp.asarray(a) for a in inputs),
            lengths=jnp.asarray(lengths, jnp.int32),
            resets=jnp.asarray(RESETS),
        )
        masks = None
        if dropout_key is not None:
            masks = [np.asarray(m) for m in jcr.dropout.dropout_masks(key, cfg, (T, B, cfg.output_size), jnp.float32)]
        assert_outputs_close(
            got, oracle(cfg, *inputs, lengths, masks, RESETS), atol=1e-5, rtol=1e-5, what=f"{implementation} {cfg}"
        )


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_zero_lengths_and_resets_everywhere(implementation):
    """Empty sequences (length 0) next to a row that resets at every step (segments of one step each)."""
    cfg = make_config("lstm", 1, "bidirectional")
    inputs = draw_inputs(cfg, np.random.default_rng(3), T, B)
    lengths = np.array([0, T, 4])
    resets = np.zeros((T, B), bool)
    resets[:, 1] = True
    resets[0, 0] = True
    got = run(
        implementation,
        *(None if a is None else jnp.asarray(a) for a in inputs),
        cfg,
        jnp.asarray(lengths, jnp.int32),
        jnp.asarray(resets),
    )
    want = oracle(cfg, *inputs, lengths, resets=resets)
    assert_outputs_close(got, want, atol=1e-5, rtol=1e-5, what=implementation)
    assert np.all(np.asarray(got[0])[:, 0] == 0)
    np.testing.assert_array_equal(np.asarray(got[1])[:, 0], inputs[2][:, 0])
    if implementation != "segmented":  # and without resets
        got = jcr.rnn(*inputs, cfg, seq_lengths=jnp.asarray(lengths, jnp.int32), implementation=implementation)
        assert_outputs_close(got, oracle(cfg, *inputs, lengths), atol=1e-5, rtol=1e-5, what=implementation)


# ----------------------------------------------------------------------------------------------------------------------
# Gradients.
# ----------------------------------------------------------------------------------------------------------------------

GRAD_CASES = [(2, "bidirectional", True), (1, "unidirectional", False)]


def loss(cfg, implementation, lengths, resets, weights, params, x, h0, c0):
    wy, wh, wc = weights
    y, h_n, c_n = run(implementation, params, x, h0, c0, cfg, lengths, resets)
    total = jnp.sum(y * wy) + jnp.sum(h_n * wh)
    return total if c_n is None else total + jnp.sum(c_n * wc)


def loss_weights(cfg, rng, steps=T, batch=B):
    wc = rng.normal(size=cfg.cell_shape(batch)) if cfg.mode == "lstm" else None
    return tuple(
        None if w is None else w.astype(cfg.dtype)
        for w in (rng.normal(size=(steps, batch, cfg.output_size)), rng.normal(size=cfg.state_shape(batch)), wc)
    )


@functools.cache
def _gradients(mode):
    cases = []
    for i, (num_layers, direction, with_lengths) in enumerate(GRAD_CASES):
        cfg = make_config(mode, num_layers, direction)
        rng = np.random.default_rng(20 + i)
        inputs = draw_inputs(cfg, rng, T, B)
        cases.append((cfg, with_lengths, inputs, loss_weights(cfg, rng)))

    @jax.jit
    def run_all(arrays, lengths, resets):
        out = []
        for (cfg, with_lengths, _, _), (inputs, weights) in zip(cases, arrays, strict=True):
            argnums = (0, 1, 2, 3) if cfg.mode == "lstm" else (0, 1, 2)
            out.append(
                {
                    impl: jax.grad(
                        functools.partial(loss, cfg, impl, lengths if with_lengths else None, resets, weights),
                        argnums=argnums,
                    )(*inputs)
                    for impl in implementations(mode)
                }
            )
        return out

    as_jax = lambda group: tuple(None if a is None else jnp.asarray(a) for a in group)  # noqa: E731
    arrays = [(as_jax(inputs), as_jax(weights)) for _, _, inputs, weights in cases]
    return cases, run_all(arrays, jnp.array(LENGTHS, jnp.int32), jnp.asarray(RESETS))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case_index", range(len(GRAD_CASES)))
def test_gradients_with_resets_match_reference_autodiff(mode, case_index):
    """xla's custom backward and the segment repacking (gathers around the xla stand-in) against autodiff of the
    reference: every gradient, and the semantics they imply."""
    cases, results = _gradients(mode)
    cfg, with_lengths, _, _ = cases[case_index]
    grads = results[case_index]
    for implementation in set(grads) - {"reference"}:
        for name, got, want in zip(
            ("params", "x", "h0", "c0"), grads[implementation], grads["reference"], strict=False
        ):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=f"{implementation} d{name}")
            assert np.abs(np.asarray(want)).max() > 1e-3, f"d{name} is (nearly) zero: the test would be vacuous"
    dh0 = np.asarray(grads["reference"][2])
    directions = cfg.num_directions
    # Row 1 resets at step 0: its forward initial states feed nothing.
    assert np.all(dh0[0::directions, 1] == 0)
    assert np.abs(dh0[0::directions, 0]).max() > 0
    if directions == 2:  # the backward direction's last segment starts from h0 in every row
        assert np.all(np.abs(dh0[1::2]).max(axis=(0, 2)) > 0)
    if with_lengths:
        dx = np.asarray(grads["xla"][1])
        for row, length in enumerate(LENGTHS):
            assert np.all(dx[length:, row] == 0)


def _numpy_loss(cfg, lengths, resets, weights, params, x, h0, c0):
    y, h_n, c_n = oracle(cfg, params, x, h0, c0, lengths, resets=resets)
    wy, wh, wc = (None if w is None else np.asarray(w, np.float64) for w in weights)
    total = np.sum(y * wy) + np.sum(h_n * wh)
    return total if c_n is None else total + np.sum(c_n * wc)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_gradients_with_resets_match_finite_differences_of_the_oracle(mode):
    """Directional derivatives of the float64 oracle with resets against both implementations' gradients (the
    repacking's are compared with these above)."""
    with jax.enable_x64(True):
        cfg = jcr.RNNConfig(
            mode=mode, num_layers=1, num_units=3, input_size=2, direction="bidirectional", dtype=np.float64
        )
        rng = np.random.default_rng(7)
        inputs = draw_inputs(cfg, rng, T, B)
        weights = loss_weights(cfg, rng)
        lengths = np.array(LENGTHS)
        argnums = (0, 1, 2, 3) if mode == "lstm" else (0, 1, 2)
        args = tuple(None if a is None else jnp.asarray(a) for a in inputs)
        grads = {
            impl: jax.jit(
                jax.grad(
                    functools.partial(loss, cfg, impl, jnp.asarray(lengths, jnp.int32), jnp.asarray(RESETS), weights),
                    argnums=argnums,
                )
            )(*args)
            for impl in ("xla", "reference")
        }
        f = functools.partial(_numpy_loss, cfg, lengths, RESETS, weights)
        step = 1e-6
        for _ in range(3):
            direction = [None if a is None else rng.normal(size=a.shape) for a in inputs]
            plus = [None if a is None else a + step * d for a, d in zip(inputs, direction, strict=True)]
            minus = [None if a is None else a - step * d for a, d in zip(inputs, direction, strict=True)]
            fd = (f(*plus) - f(*minus)) / (2 * step)
            assert abs(fd) > 1e-3
            for impl, g in grads.items():
                analytic = sum(
                    float(np.sum(np.asarray(gi) * di)) for gi, di in zip(g, direction, strict=False) if di is not None
                )
                np.testing.assert_allclose(analytic, fd, rtol=1e-7, atol=1e-7, err_msg=impl)


# ----------------------------------------------------------------------------------------------------------------------
# The repacking itself.
# ----------------------------------------------------------------------------------------------------------------------


def test_plan_numbers_segments_row_by_row():
    plan = segments.plan_segments(jnp.asarray(RESETS), jnp.array(LENGTHS, jnp.int32), 10)
    assert int(plan.count) == NUM_SEGMENTS
    np.testing.assert_array_equal(plan.row, [0, 0, 0, 1, 1, 1, 2, 2, 0, 0])
    np.testing.assert_array_equal(plan.start, [0, 2, 3, 0, 4, 6, 0, 1, 0, 0])
    np.testing.assert_array_equal(plan.length, [2, 1, 3, 4, 2, 1, 1, 2, 0, 0])
    np.testing.assert_array_equal(np.asarray(plan.segment_of)[: LENGTHS[0], 0], [0, 0, 1, 2, 2, 2])
    x = jnp.arange(T * B, dtype=jnp.float32).reshape(T, B, 1) + 1
    packed = segments.pack(x, plan)
    np.testing.assert_array_equal(packed[:3, 2, 0], x[3:6, 0, 0])  # segment 2 = steps 3..5 of row 0
    assert np.all(np.asarray(packed[3:, 2]) == 0) and np.all(np.asarray(packed[:, 8:]) == 0)
    valid = np.arange(T)[:, None] < np.array(LENGTHS)[None, :]
    np.testing.assert_array_equal(segments.unpack(packed, plan), np.where(valid[:, :, None], x, 0))


@pytest.mark.parametrize("max_segments, packed", [(NUM_SEGMENTS, True), (NUM_SEGMENTS - 1, False)])
def test_more_segments_than_the_bound_run_the_fallback(max_segments, packed):
    """A stand-in backend that returns garbage shows which branch ran: the packed one up to max_segments segments,
    the fallback (here the correct xla implementation) beyond."""
    cfg = make_config("gru", 1, "bidirectional")
    params, x, h0 = (jnp.asarray(a) for a in draw_inputs(cfg, np.random.default_rng(1), T, B)[:3])

    def garbage(call, inputs):
        y, h_n, c_n = stand_in(call, inputs)
        return y + 100.0, h_n + 100.0, c_n

    lengths, resets = jnp.array(LENGTHS, jnp.int32), jnp.asarray(RESETS)
    got = jax.jit(
        lambda p, x, h: segments.rnn_segmented(
            garbage, stand_in, *records(p, x, h, None, cfg, lengths, None, resets, max_segments)
        )
    )(params, x, h0)
    want = jcr.rnn(params, x, h0, None, cfg, seq_lengths=lengths, resets=resets)
    assert np.allclose(got[1], want[1], atol=1e-5) != packed


def test_vmap_and_jit_of_rnn_with_resets():
    cfg = make_config("lstm", 1, "unidirectional")
    params, x, h0, c0 = (jnp.asarray(a) for a in draw_inputs(cfg, np.random.default_rng(2), T, B))
    many = jnp.stack([jnp.asarray(RESETS), jnp.zeros((T, B), bool), jnp.ones((T, B), bool)])
    fn = lambda r: jcr.rnn(params, x, h0, c0, cfg, resets=r)  # noqa: E731
    batched = jax.jit(jax.vmap(fn))(many)
    for k in range(3):
        assert_outputs_close(
            [a[k] for a in batched], oracle(cfg, params, x, h0, c0, resets=np.asarray(many[k])), atol=1e-5, rtol=1e-5
        )


# ----------------------------------------------------------------------------------------------------------------------
# Errors.
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def problem():
    cfg = make_config("lstm", 1, "unidirectional")
    return cfg, tuple(jnp.asarray(a) for a in draw_inputs(cfg, np.random.default_rng(0), T, B))


@pytest.mark.parametrize(
    "resets, error, message",
    [
        (np.zeros((B, T), bool), ValueError, f"resets has shape ({B}, {T}); expected ({T}, {B}) = (max_time, batch)"),
        (np.zeros((T,), bool), ValueError, f"resets has shape ({T},); expected ({T}, {B})"),
        (np.full((T, B), 2, np.int32), ValueError, "resets[0, 0] is 2; expected a flag, 0 or 1 (or bool)"),
        (np.full((T, B), 0.5, np.float32), ValueError, "resets[0, 0] is 0.5; expected a flag, 0 or 1 (or bool)"),
        (np.zeros((T, B), np.complex64), TypeError, "resets has dtype complex64; expected bool, or integer or float"),
        ([[False] * B] * T, TypeError, "resets must be an array, got list"),
    ],
)
def test_bad_resets_name_the_argument(problem, resets, error, message):
    cfg, (params, x, h0, c0) = problem
    for implementation in ("xla", "reference"):
        with pytest.raises(error, match=re.escape(message)):
            jcr.rnn(params, x, h0, c0, cfg, resets=resets, implementation=implementation)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float32])
def test_numeric_flags_run_as_their_bool(problem, dtype):
    """0/1 flags of an integer or float dtype are the bool resets ``!= 0`` (``jnp.where``'s reading of a condition)."""
    cfg, (params, x, h0, c0) = problem
    flags = np.asarray(RESETS)
    want = jcr.rnn(params, x, h0, c0, cfg, resets=jnp.asarray(flags), implementation="xla")
    got = jcr.rnn(params, x, h0, c0, cfg, resets=jnp.asarray(flags.astype(dtype)), implementation="xla")
    assert flags.any() and not flags.all()
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    "max_segments, error, message",
    [
        (B - 1, ValueError, f"max_segments is {B - 1}; expected None or an int >= {B} = batch"),
        (0, ValueError, f"max_segments is 0; expected None or an int >= {B} = batch"),
        (2.5, TypeError, "max_segments must be None or an int, got float 2.5"),
        (True, TypeError, "max_segments must be None or an int, got bool True"),
        ("8", TypeError, "max_segments must be None or an int, got str '8'"),
    ],
)
def test_bad_max_segments_names_the_argument(problem, max_segments, error, message):
    cfg, (params, x, h0, c0) = problem
    with pytest.raises(error, match=re.escape(message)):
        jcr.rnn(params, x, h0, c0, cfg, resets=jnp.asarray(RESETS), max_segments=max_segments)
