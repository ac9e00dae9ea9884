"""Gradients: the hand-written backward pass of implementation="xla" (custom_vjp) against JAX autodiff of
implementation="reference", and both against central finite differences of the independent NumPy oracle in float64.
Also jit, vmap and jvp (forward mode, reference implementation only) checked against the oracle.

Tolerances: xla vs reference in float32 rtol = atol = 2e-5 on gradients of a loss that is a random weighted sum of
all outputs (O(1) values, so float32 summation noise is ~1e-6); float64 1e-11. Finite differences: central, step
1e-6 in float64, truncation ~ step^2 * f''' ~ 1e-12 and cancellation ~ 1e-16 / 1e-6 = 1e-10, so atol 1e-7.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from numpy_reference import numpy_rnn
from support import LENGTHS, MODES, B, T, draw_inputs, make_config


def make_inputs(cfg, seed=0, steps=T, batch=B):
    """(params, x, h0, c0, loss weights for y, h_n, c_n) as NumPy arrays of cfg.dtype."""
    rng = np.random.default_rng(seed)
    params, x, h0, c0 = draw_inputs(cfg, rng, steps, batch)
    dt = cfg.dtype
    wy = rng.normal(size=(steps, batch, cfg.output_size)).astype(dt)
    wh = rng.normal(size=cfg.state_shape(batch)).astype(dt)
    wc = rng.normal(size=cfg.cell_shape(batch)).astype(dt) if cfg.mode == "lstm" else None
    return params, x, h0, c0, (wy, wh, wc)


def jax_loss(cfg, implementation, lengths, loss_weights, params, x, h0, c0, dropout_key=None):
    wy, wh, wc = loss_weights
    y, h, c = jcr.rnn(
        params,
        x,
        h0,
        c0,
        cfg,
        seq_lengths=lengths,
        implementation=implementation,
        is_training=dropout_key is not None,
        dropout_key=dropout_key,
    )
    total = jnp.sum(y * wy) + jnp.sum(h * wh)
    return total if c is None else total + jnp.sum(c * wc)


def numpy_loss(cfg, lengths, loss_weights, params, x, h0, c0):
    weights, biases = jcr.params_to_canonical(jnp.asarray(params), cfg)
    f64 = lambda a: None if a is None else np.asarray(a, np.float64)  # noqa: E731
    y, h, c = numpy_rnn(
        [f64(w) for w in weights],
        [f64(b) for b in biases],
        f64(x),
        f64(h0),
        f64(c0),
        cfg.mode,
        cfg.num_layers,
        cfg.num_units,
        cfg.num_directions == 2,
        cfg.skip_input,
        seq_lengths=lengths,
        proj_size=cfg.proj_size,
        cell_clip=cfg.cell_clip,
        bias_mode=cfg.bias_mode,
    )
    wy, wh, wc = (f64(w) for w in loss_weights)
    total = np.sum(y * wy) + np.sum(h * wh)
    return total if c is None else total + np.sum(c * wc)


# ----------------------------------------------------------------------------------------------------------------------
# xla (custom_vjp) vs reference (autodiff), float32, one jit per mode.
# ----------------------------------------------------------------------------------------------------------------------

GRAD_CASES = [  # (num_layers, direction, input_mode, with_lengths)
    (1, "unidirectional", "linear_input", True),
    (2, "bidirectional", "linear_input", True),
    (2, "unidirectional", "linear_input", False),
    (2, "bidirectional", "skip_input", True),
]


@functools.cache
def _grads(mode):
    lengths = jnp.array(LENGTHS, jnp.int32)
    cases = []
    for i, (L, d, im, wl) in enumerate(GRAD_CASES):
        cfg = make_config(mode, L, d, im)
        cases.append((cfg, wl, make_inputs(cfg, seed=i)))

    @jax.jit
    def run_all(arrays, lengths):
        out = []
        for (cfg, wl, _), (p, x, h0, c0, lw) in zip(cases, arrays, strict=True):
            argnums = (0, 1, 2, 3) if c0 is not None else (0, 1, 2)
            per_impl = []
            for impl in ("xla", "reference"):
                f = functools.partial(jax_loss, cfg, impl, lengths if wl else None, lw)
                per_impl.append(jax.value_and_grad(f, argnums=argnums)(p, x, h0, c0))
            out.append(per_impl)
        return out

    arrays = [
        (
            *(None if a is None else jnp.asarray(a) for a in inp[:4]),
            tuple(None if w is None else jnp.asarray(w) for w in inp[4]),
        )
        for _, _, inp in cases
    ]
    return cases, run_all(arrays, lengths)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case_index", range(len(GRAD_CASES)))
def test_xla_gradients_match_reference_autodiff(mode, case_index):
    cases, results = _grads(mode)
    cfg, with_lengths, inputs = cases[case_index]
    (v_xla, g_xla), (v_ref, g_ref) = results[case_index]
    np.testing.assert_allclose(v_xla, v_ref, rtol=2e-5, atol=2e-5)
    names = ("params", "x", "h0", "c0")
    for name, a, b in zip(names, g_xla, g_ref, strict=False):
        assert a.shape == b.shape and a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=f"d{name}")
        assert np.abs(np.asarray(b)).max() > 1e-3, f"d{name} is (nearly) zero: the test would be vacuous"
    # The loss itself against the oracle (so the two do not agree on a wrong function).
    np.testing.assert_allclose(
        v_ref,
        numpy_loss(cfg, np.array(LENGTHS) if with_lengths else None, inputs[4], *inputs[:4]),
        rtol=1e-5,
        atol=1e-5,
    )
    if with_lengths:  # inputs past a sequence's end do not influence anything
        dx = np.asarray(g_xla[1])
        for b, n in enumerate(LENGTHS):
            assert np.all(dx[n:, b] == 0), f"dx nonzero past length {n} of sequence {b}"


EXTRA_CASES = [  # projection, cell clipping, bias modes: the custom backward has a branch for each
    ("lstm", 2, "bidirectional", dict(proj_size=2)),
    ("lstm", 1, "unidirectional", dict(proj_size=3, cell_clip=0.3)),
    ("lstm", 2, "unidirectional", dict(cell_clip=0.25, bias_mode="single_input")),
    ("gru", 2, "bidirectional", dict(bias_mode="single_recurrent")),
    ("gru", 1, "unidirectional", dict(bias_mode="none")),
    ("rnn_relu", 2, "bidirectional", dict(bias_mode="single_input")),
]


def test_projection_clip_bias_mode_gradients_match_reference():
    lengths = jnp.array(LENGTHS, jnp.int32)
    cfgs = [make_config(m, L, d, **kw) for m, L, d, kw in EXTRA_CASES]
    inputs = [make_inputs(cfg, seed=20 + i) for i, cfg in enumerate(cfgs)]

    @jax.jit
    def run_all(arrays):
        out = []
        for cfg, (p, x, h0, c0, lw) in zip(cfgs, arrays, strict=True):
            argnums = (0, 1, 2, 3) if c0 is not None else (0, 1, 2)
            out.append(
                [
                    jax.grad(functools.partial(jax_loss, cfg, impl, lengths, lw), argnums=argnums)(p, x, h0, c0)
                    for impl in ("xla", "reference")
                ]
            )
        return out

    arrays = [
        (
            *(None if a is None else jnp.asarray(a) for a in inp[:4]),
            tuple(None if w is None else jnp.asarray(w) for w in inp[4]),
        )
        for inp in inputs
    ]
    for cfg, (g_xla, g_ref) in zip(cfgs, run_all(arrays), strict=True):
        for name, a, b in zip(("params", "x", "h0", "c0"), g_xla, g_ref, strict=False):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=f"{cfg}: d{name}")
        # (nearly) every parameter that exists influences the loss; dead relu units legitimately have none
        share = 0.4 if cfg.mode == "rnn_relu" else 0.9
        assert np.count_nonzero(np.asarray(g_ref[0])) > share * g_ref[0].size, cfg


def test_float64_xla_gradients_match_reference():
    with jax.enable_x64(True):
        cfg = make_config("lstm", 1, "bidirectional", dtype=np.float64)
        p, x, h0, c0, lw = make_inputs(cfg, seed=4)
        lengths = jnp.array(LENGTHS, jnp.int32)
        grads = [
            jax.jit(jax.grad(functools.partial(jax_loss, cfg, impl, lengths, lw), argnums=(0, 1, 2, 3)))(
                jnp.asarray(p), jnp.asarray(x), jnp.asarray(h0), jnp.asarray(c0)
            )
            for impl in ("xla", "reference")
        ]
        for a, b in zip(*grads, strict=True):
            assert a.dtype == np.float64
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)


def test_dropout_gradients_match_reference():
    """Same key, same masks: the custom backward pass must route the gradient through them like autodiff does."""
    cfg = make_config("gru", 2, "bidirectional", dropout=0.5)
    p, x, h0, _, lw = make_inputs(cfg, seed=6)
    key = jax.random.key(3)
    lengths = jnp.array(LENGTHS, jnp.int32)
    grads = [
        jax.jit(jax.grad(functools.partial(jax_loss, cfg, impl, lengths, lw), argnums=(0, 1)))(
            jnp.asarray(p), jnp.asarray(x), jnp.asarray(h0), None, key
        )
        for impl in ("xla", "reference")
    ]
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)
    # (that the masks are applied in the forward pass is checked against the oracle in test_xla_vs_numpy.py)


# ----------------------------------------------------------------------------------------------------------------------
# Finite differences of the NumPy oracle, float64.
# ----------------------------------------------------------------------------------------------------------------------


def _float64_problem(mode, seed):
    """A small 2-layer bidirectional float64 network and its inputs, for finite differences (call under x64)."""
    cfg = jcr.RNNConfig(mode=mode, num_layers=2, num_units=3, input_size=2, direction="bidirectional", dtype=np.float64)
    return cfg, make_inputs(cfg, seed=seed, steps=4, batch=2)


def _fd_directional(f, args, direction, step=1e-6):
    plus = [None if a is None else a + step * d for a, d in zip(args, direction, strict=True)]
    minus = [None if a is None else a - step * d for a, d in zip(args, direction, strict=True)]
    return (f(*plus) - f(*minus)) / (2 * step)


@pytest.mark.parametrize("mode", MODES)
def test_gradients_match_finite_differences_of_numpy_oracle(mode):
    with jax.enable_x64(True):
        cfg, (p, x, h0, c0, lw) = _float64_problem(mode, seed=11)
        lengths = np.array([3, 4], np.int32)
        args = (p, x, h0, c0)
        argnums = (0, 1, 2, 3) if c0 is not None else (0, 1, 2)
        grads = {
            impl: jax.jit(jax.grad(functools.partial(jax_loss, cfg, impl, jnp.asarray(lengths), lw), argnums=argnums))(
                *(None if a is None else jnp.asarray(a) for a in args)
            )
            for impl in ("xla", "reference")
        }
        f = functools.partial(numpy_loss, cfg, lengths, lw)
        rng = np.random.default_rng(0)
        for _ in range(3):
            direction = [None if a is None else rng.normal(size=a.shape) for a in args]
            fd = _fd_directional(f, args, direction)
            assert abs(fd) > 1e-3
            for impl, g in grads.items():
                analytic = sum(
                    float(np.sum(np.asarray(gi) * di)) for gi, di in zip(g, direction, strict=False) if di is not None
                )
                np.testing.assert_allclose(analytic, fd, rtol=1e-7, atol=1e-7, err_msg=impl)


# ----------------------------------------------------------------------------------------------------------------------
# jvp (forward mode, reference only), vmap, jit.
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_jvp_of_reference_matches_finite_differences(mode):
    with jax.enable_x64(True):
        cfg, (p, x, h0, c0, _) = _float64_problem(mode, seed=12)
        lengths = np.array([4, 2], np.int32)
        args = tuple(None if a is None else jnp.asarray(a) for a in (p, x, h0, c0))
        rng = np.random.default_rng(1)
        direction = [None if a is None else rng.normal(size=a.shape) for a in args]
        if c0 is None:

            def fn(p, x, h0):
                return jcr.rnn(p, x, h0, None, cfg, seq_lengths=jnp.asarray(lengths), implementation="reference")[:2]

            primals, tangents = jax.jvp(fn, args[:3], tuple(jnp.asarray(d) for d in direction[:3]))
        else:

            def fn(p, x, h0, c0):
                return jcr.rnn(p, x, h0, c0, cfg, seq_lengths=jnp.asarray(lengths), implementation="reference")

            primals, tangents = jax.jvp(fn, args, tuple(jnp.asarray(d) for d in direction))

        def oracle(p, x, h0, c0):
            w, b = (
                [np.asarray(a, np.float64) for a in group] for group in jcr.params_to_canonical(jnp.asarray(p), cfg)
            )
            out = numpy_rnn(w, b, x, h0, c0, mode, 2, 3, True, False, seq_lengths=lengths)
            return out if c0 is not None else out[:2]

        step = 1e-6
        plus = oracle(*[None if a is None else np.asarray(a) + step * d for a, d in zip(args, direction, strict=True)])
        minus = oracle(*[None if a is None else np.asarray(a) - step * d for a, d in zip(args, direction, strict=True)])
        want_primals = oracle(*[None if a is None else np.asarray(a) for a in args])
        for got, want in zip(primals, want_primals, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        for got, a, b in zip(tangents, plus, minus, strict=True):
            np.testing.assert_allclose(got, (a - b) / (2 * step), rtol=1e-7, atol=1e-7)
        assert max(np.abs(np.asarray(t)).max() for t in tangents) > 1e-2


@pytest.mark.parametrize("implementation", ["xla", "reference"])
def test_vmap_over_batch_of_sequences_with_shared_params(implementation):
    cfg = make_config("lstm", 1, "bidirectional")
    p, _, _, _, _ = make_inputs(cfg, seed=13)
    rng = np.random.default_rng(2)
    K = 3
    xs = rng.normal(size=(K, T, B, cfg.input_size)).astype(np.float32)
    h0s = (0.5 * rng.normal(size=(K, *cfg.state_shape(B)))).astype(np.float32)
    c0 = (0.5 * rng.normal(size=cfg.cell_shape(B))).astype(np.float32)
    lengths = jnp.array(LENGTHS, jnp.int32)

    def fn(x, h0):
        return jcr.rnn(jnp.asarray(p), x, h0, jnp.asarray(c0), cfg, seq_lengths=lengths, implementation=implementation)

    ys, hs, cs = jax.jit(jax.vmap(fn))(jnp.asarray(xs), jnp.asarray(h0s))
    assert ys.shape == (K, T, B, cfg.output_size)
    weights, biases = jcr.params_to_canonical(jnp.asarray(p), cfg)
    weights = [np.asarray(a, np.float64) for a in weights]
    biases = [np.asarray(a, np.float64) for a in biases]
    for k in range(K):
        want = numpy_rnn(weights, biases, xs[k], h0s[k], c0, "lstm", 1, 4, True, False, seq_lengths=np.array(LENGTHS))
        for got, wv in zip((ys[k], hs[k], cs[k]), want, strict=True):
            np.testing.assert_allclose(got, wv, rtol=1e-5, atol=1e-5)
    # and vmap of the gradient (per-example gradients w.r.t. shared params)
    if implementation == "xla":

        def loss(p_, x, h0, impl):
            return jnp.sum(jcr.rnn(p_, x, h0, jnp.asarray(c0), cfg, seq_lengths=lengths, implementation=impl)[0] ** 2)

        per_example = jax.jit(jax.vmap(jax.grad(functools.partial(loss, impl="xla")), in_axes=(None, 0, 0)))(
            jnp.asarray(p), jnp.asarray(xs), jnp.asarray(h0s)
        )
        loop = [
            jax.grad(functools.partial(loss, impl="reference"))(jnp.asarray(p), jnp.asarray(xs[k]), jnp.asarray(h0s[k]))
            for k in range(K)
        ]
        for k in range(K):
            np.testing.assert_allclose(per_example[k], loop[k], rtol=2e-5, atol=2e-5)


def test_jit_with_config_as_static_argument_matches_eager_and_oracle():
    cfg = make_config("rnn_tanh", 2, "bidirectional")
    p, x, h0, _, _ = make_inputs(cfg, seed=14)
    run = jax.jit(jcr.rnn, static_argnames=("config", "implementation"))
    got = run(jnp.asarray(p), jnp.asarray(x), jnp.asarray(h0), None, config=cfg, implementation="xla")
    weights, biases = jcr.params_to_canonical(jnp.asarray(p), cfg)
    want = numpy_rnn(
        [np.asarray(a, np.float64) for a in weights],
        [np.asarray(a, np.float64) for a in biases],
        x,
        h0,
        None,
        "rnn_tanh",
        2,
        4,
        True,
        False,
    )
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
    assert got[2] is None


def test_second_order_xla_matches_forward_over_reverse_reference():
    """Hessian-vector products: reverse-over-reverse through the custom_vjp ("xla") against forward-over-reverse
    autodiff of "reference", float64."""
    with jax.enable_x64(True):
        cfg = make_config("lstm", 1, "bidirectional", dtype=np.float64)
        p, x, h0, c0, lw = make_inputs(cfg, seed=15)
        lengths = jnp.array(LENGTHS, jnp.int32)
        args = tuple(jnp.asarray(a) for a in (x, h0, c0))
        v = jnp.asarray(np.random.default_rng(3).normal(size=p.shape))
        grad_xla = jax.grad(lambda q: jax_loss(cfg, "xla", lengths, lw, q, *args))
        hvp_xla = jax.jit(jax.grad(lambda q: jnp.vdot(grad_xla(q), v)))(jnp.asarray(p))
        grad_ref = jax.grad(lambda q: jax_loss(cfg, "reference", lengths, lw, q, *args))
        hvp_ref = jax.jit(lambda q: jax.jvp(grad_ref, (q,), (v,))[1])(jnp.asarray(p))
        np.testing.assert_allclose(hvp_xla, hvp_ref, rtol=1e-10, atol=1e-10)
        assert np.abs(np.asarray(hvp_ref)).max() > 1e-1
