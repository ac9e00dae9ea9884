"""The cells beyond cuDNN's (issue 40): any Keras activation, the reset-before GRU and Keras's recurrent dropout, on
implementations "xla" and "reference", against the independent float64 NumPy oracle (tests/numpy_reference.py, whose
activations and reset-before GRU are written from Keras's documentation): values with lengths and resets, gradients
(xla vs reference autodiff, and both against finite differences of the oracle), jit, vmap; and the registry's
answers: the fused backends refuse these configurations by name, ``implementation=None`` runs "xla".

Tolerances as tests/backends/test_xla_vs_numpy.py and test_gradients.py: float32 1e-5 against the oracle, 2e-5
between implementations; float64 finite differences 1e-7.
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
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from numpy_reference import ACTIVATIONS, numpy_rnn
from support import LENGTHS, B, T, documented_recurrent_masks, draw_inputs, make_config, oracle

IMPLEMENTATIONS = ("xla", "reference")

# (mode, num_layers, direction, config keywords): every mode with activations other than its own, the reset-before
# GRU in every bias mode and input mode, projection and clipping with other activations.
CASES = [
    ("gru_reset_before", 1, "unidirectional", {}),
    ("gru_reset_before", 2, "bidirectional", {}),
    ("gru_reset_before", 2, "unidirectional", dict(bias_mode="single_input")),
    ("gru_reset_before", 1, "bidirectional", dict(bias_mode="single_recurrent", input_mode="skip_input")),
    ("gru_reset_before", 1, "unidirectional", dict(bias_mode="none", activation="relu")),
    ("gru_reset_before", 2, "bidirectional", dict(recurrent_activation="hard_sigmoid", activation="softsign")),
    ("lstm", 2, "bidirectional", dict(activation="relu", recurrent_activation="hard_sigmoid")),
    ("lstm", 1, "unidirectional", dict(activation="selu")),
    ("lstm", 2, "unidirectional", dict(proj_size=2, cell_clip=0.4, activation="softsign")),
    ("lstm", 1, "bidirectional", dict(input_mode="skip_input", recurrent_activation="log_sigmoid")),
    ("gru", 2, "bidirectional", dict(activation="elu", recurrent_activation="hard_sigmoid")),
    ("gru", 1, "unidirectional", dict(recurrent_activation="sparse_sigmoid", bias_mode="single_recurrent")),
    ("rnn_tanh", 2, "bidirectional", dict(activation="silu")),
    ("rnn_relu", 1, "unidirectional", dict(activation="gelu")),
]
IDS = [f"{m}-{L}-{d[:3]}-" + "-".join(f"{k}={v}" for k, v in kw.items()) for m, L, d, kw in CASES]
RESETS = np.zeros((T, B), bool)
RESETS[2, 0] = RESETS[3, 1] = RESETS[1, 2] = True


def _config(mode, num_layers, direction, kw, **more):
    kw = dict(kw, **more)
    input_mode = kw.pop("input_mode", "linear_input")
    return make_config(mode, num_layers, direction, input_mode, **kw)


@functools.cache
def _values(implementation):
    """Every case with lengths and with lengths and resets, in one jit."""
    cases = [_config(*case) for case in CASES]
    inputs = [draw_inputs(cfg, np.random.default_rng(i)) for i, cfg in enumerate(cases)]

    @jax.jit
    def run_all(arrays, lengths, resets):
        return [
            [
                jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths, resets=r, implementation=implementation)
                for r in (None, resets)
            ]
            for cfg, (p, x, h0, c0) in zip(cases, arrays, strict=True)
        ]

    arrays = [tuple(None if a is None else jnp.asarray(a) for a in inp) for inp in inputs]
    return cases, inputs, run_all(arrays, jnp.array(LENGTHS, jnp.int32), jnp.asarray(RESETS))


def _assert_close(got, want, tol, label):
    for name, a, b in zip(("y", "h_n", "c_n"), got, want, strict=True):
        if b is None:
            assert a is None, f"{label} {name}"
            continue
        np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=tol, atol=tol, err_msg=f"{label} {name}")


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_values_match_numpy(implementation, index):
    cases, inputs, outputs = _values(implementation)
    cfg, (params, x, h0, c0) = cases[index], inputs[index]
    plain, with_resets = outputs[index]
    _assert_close(plain, oracle(cfg, params, x, h0, c0, seq_lengths=np.array(LENGTHS)), 1e-5, "lengths")
    _assert_close(
        with_resets, oracle(cfg, params, x, h0, c0, seq_lengths=np.array(LENGTHS), resets=RESETS), 1e-5, "resets"
    )
    # the activation matters: the cell's own activations give other values (the test is not vacuous)
    if not cfg.default_activations:
        import dataclasses

        default = dataclasses.replace(cfg, activation=None, recurrent_activation=None)
        y_default = oracle(default, params, x, h0, c0, seq_lengths=np.array(LENGTHS))[0]
        assert np.abs(y_default - np.asarray(plain[0], np.float64)).max() > 1e-2


DTYPE_CASES = [  # (dtype, tolerance as tests/backends/test_xla_vs_numpy.py's)
    (np.float16, 2e-3),
    ("bfloat16", 1.6e-2),
    (np.float64, 1e-12),
]


@pytest.mark.parametrize("dtype,tol", DTYPE_CASES, ids=["float16", "bfloat16", "float64"])
def test_other_dtypes_match_numpy(dtype, tol):
    """Half precision computes in float32 and rounds; float64 stays float64 (under x64), recurrent dropout included."""
    with jax.enable_x64(dtype == np.float64):
        cfgs = [
            make_config("gru_reset_before", 2, "bidirectional", dtype=dtype),
            make_config("lstm", 1, "unidirectional", dtype=dtype, activation="softsign", recurrent_dropout=0.3),
        ]
        inputs = [draw_inputs(cfg, np.random.default_rng(50 + i)) for i, cfg in enumerate(cfgs)]
        key = jax.random.key(6)
        lengths = jnp.array(LENGTHS, jnp.int32)
        for impl in IMPLEMENTATIONS:
            for cfg, (p, x, h0, c0) in zip(cfgs, inputs, strict=True):
                got = jcr.rnn(
                    p, x, h0, c0, cfg, seq_lengths=lengths, is_training=True, dropout_key=key, implementation=impl
                )
                assert got[0].dtype == cfg.dtype
                masks = documented_recurrent_masks(key, cfg, B) if cfg.recurrent_dropout else None
                want = oracle(cfg, p, x, h0, c0, seq_lengths=np.array(LENGTHS), recurrent_masks=masks)
                _assert_close(got, want, tol, f"{cfg.dtype} {impl}")


def test_reset_before_gru_differs_from_cudnns_gru():
    """Same weights, the reset gate before or after R: different values (and each its own oracle's, above)."""
    cfg = make_config("gru_reset_before", 1, "unidirectional")
    params, x, h0, _ = draw_inputs(cfg, np.random.default_rng(5))
    before = np.asarray(jcr.rnn(params, x, h0, None, cfg, implementation="xla")[0])
    after = np.asarray(jcr.rnn(params, x, h0, None, make_config("gru", 1, "unidirectional"), implementation="xla")[0])
    assert np.abs(before - after).max() > 1e-2


def test_every_named_activation_runs_on_both_implementations():
    """Each activation of jax_cudnn_rnn.config.ACTIVATIONS as the candidate and as the gates' activation of a GRU,
    against the oracle's own definition of it."""
    names = jcr.config.ACTIVATIONS
    assert set(names) == set(ACTIVATIONS)  # the oracle defines every one independently
    # exp as both would overflow: it is the candidate with sigmoid gates, and the gates' with a tanh candidate
    pairs = [(n, n) for n in names if n != "exponential"] + [("exponential", None), ("tanh", "exponential")]
    cfgs = [make_config("gru", 1, "unidirectional", activation=a, recurrent_activation=r) for a, r in pairs]
    inputs = [draw_inputs(cfg, np.random.default_rng(40 + i), steps=3, batch=2) for i, cfg in enumerate(cfgs)]

    @jax.jit
    def run_all(arrays):
        return [
            [jcr.rnn(p, x, h0, None, cfg, implementation=impl) for impl in IMPLEMENTATIONS]
            for cfg, (p, x, h0, _) in zip(cfgs, arrays, strict=True)
        ]

    outputs = run_all([tuple(None if a is None else jnp.asarray(a) for a in inp) for inp in inputs])
    for cfg, (p, x, h0, c0), per_impl in zip(cfgs, inputs, outputs, strict=True):
        want = oracle(cfg, p, x, h0, c0)
        assert np.all(np.isfinite(want[0])), cfg
        for impl, got in zip(IMPLEMENTATIONS, per_impl, strict=True):
            _assert_close(got, want, 2e-5, f"{cfg.activation} {impl}")


def test_callable_activation_equals_the_named_one():
    named = make_config("lstm", 2, "bidirectional", activation="softsign", recurrent_activation="hard_sigmoid")
    given = make_config(
        "lstm", 2, "bidirectional", activation=jax.nn.soft_sign, recurrent_activation=jax.nn.hard_sigmoid
    )
    params, x, h0, c0 = draw_inputs(named, np.random.default_rng(8))
    for impl in IMPLEMENTATIONS:
        a = jcr.rnn(params, x, h0, c0, named, implementation=impl)
        b = jax.jit(lambda p, x, h, c: jcr.rnn(p, x, h, c, given, implementation=impl))(params, x, h0, c0)  # noqa: B023
        for u, v in zip(a, b, strict=True):
            np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------------------
# Recurrent dropout (Keras's): values against the oracle given the documented masks.
# ----------------------------------------------------------------------------------------------------------------------

DROPOUT_CASES = [
    ("lstm", 2, "bidirectional", dict(recurrent_dropout=0.4)),
    ("lstm", 1, "unidirectional", dict(recurrent_dropout=0.3, proj_size=2)),
    ("gru", 2, "unidirectional", dict(recurrent_dropout=0.5, dropout=0.3)),
    ("gru_reset_before", 1, "bidirectional", dict(recurrent_dropout=0.25, activation="relu")),
    ("rnn_tanh", 2, "bidirectional", dict(recurrent_dropout=0.5)),
]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", DROPOUT_CASES, ids=[c[0] + str(c[1]) for c in DROPOUT_CASES])
def test_recurrent_dropout_matches_numpy_given_the_masks(implementation, case):
    from support import documented_dropout_masks

    cfg = _config(*case)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(11))
    key = jax.random.key(7)
    lengths = jnp.array(LENGTHS, jnp.int32)
    got = jax.jit(
        lambda p, x, h, c, k: jcr.rnn(
            p, x, h, c, cfg, seq_lengths=lengths, is_training=True, dropout_key=k, implementation=implementation
        )
    )(params, x, h0, c0, key)
    masks = documented_recurrent_masks(key, cfg, B)
    between = documented_dropout_masks(key, cfg, (T, B, cfg.output_size)) if cfg.dropout else None
    want = oracle(cfg, params, x, h0, c0, seq_lengths=np.array(LENGTHS), dropout_masks=between, recurrent_masks=masks)
    _assert_close(got, want, 1e-5, "training")
    # the masks act: without them the oracle gives other values
    plain = oracle(cfg, params, x, h0, c0, seq_lengths=np.array(LENGTHS), dropout_masks=between)
    assert np.abs(plain[0] - np.asarray(got[0], np.float64)).max() > 1e-2


def test_recurrent_dropout_in_inference_is_no_dropout():
    """is_training=False: exactly the result of the config without recurrent dropout, on the implementation the
    default picks for it too (the fused one where there is one: inference does not need the pure-JAX cells)."""
    import dataclasses

    cfg = make_config("lstm", 2, "bidirectional", recurrent_dropout=0.5)
    none = dataclasses.replace(cfg, recurrent_dropout=0.0)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(12))
    for impl in (*IMPLEMENTATIONS, None):
        a = jcr.rnn(params, x, h0, c0, cfg, implementation=impl, dropout_key=jax.random.key(0))
        b = jcr.rnn(params, x, h0, c0, none, implementation=impl)
        for u, v in zip(a, b, strict=True):
            np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    assert jcr.implementation_for("cpu", Call(cfg)) == jcr.implementation_for("cpu", Call(none))


def test_recurrent_dropout_reproducible_from_the_key():
    cfg = make_config("gru", 1, "bidirectional", recurrent_dropout=0.5)
    params, x, h0, _ = draw_inputs(cfg, np.random.default_rng(13))
    run = jax.jit(lambda k: jcr.rnn(params, x, h0, None, cfg, is_training=True, dropout_key=k)[0])
    a, b, c = run(jax.random.key(1)), run(jax.random.key(1)), run(jax.random.key(2))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.abs(np.asarray(a) - np.asarray(c)).max() > 1e-3
    with pytest.raises(ValueError, match=r"dropout_key is None; is_training=True with config.recurrent_dropout=0.5"):
        jcr.rnn(params, x, h0, None, cfg, is_training=True)


# ----------------------------------------------------------------------------------------------------------------------
# Gradients.
# ----------------------------------------------------------------------------------------------------------------------

GRAD_CASES = [
    ("gru_reset_before", 2, "bidirectional", {}),
    ("lstm", 2, "bidirectional", dict(activation="relu", recurrent_activation="hard_sigmoid", proj_size=2)),
    ("gru", 1, "unidirectional", dict(activation="softsign", recurrent_dropout=0.4)),
    ("rnn_tanh", 2, "unidirectional", dict(activation="selu", recurrent_dropout=0.3)),
    ("lstm", 1, "bidirectional", dict(recurrent_dropout=0.5)),
]


def _loss(cfg, implementation, lengths, resets, weights, params, x, h0, c0, key):
    y, h, c = jcr.rnn(
        params,
        x,
        h0,
        c0,
        cfg,
        seq_lengths=lengths,
        resets=resets,
        implementation=implementation,
        is_training=key is not None,
        dropout_key=key,
    )
    wy, wh, wc = weights
    total = jnp.sum(y * wy) + jnp.sum(h * wh)
    return total if c is None else total + jnp.sum(c * wc)


def _loss_weights(cfg, rng, steps=T, batch=B):
    wc = rng.normal(size=cfg.cell_shape(batch)).astype(cfg.dtype) if cfg.has_cell_state else None
    return (
        rng.normal(size=(steps, batch, cfg.output_size)).astype(cfg.dtype),
        rng.normal(size=cfg.state_shape(batch)).astype(cfg.dtype),
        wc,
    )


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c[0] + str(c[3]) for c in GRAD_CASES])
def test_xla_gradients_match_reference_with_lengths_and_resets(case):
    cfg = _config(*case)
    rng = np.random.default_rng(21)
    params, x, h0, c0 = draw_inputs(cfg, rng)
    weights = _loss_weights(cfg, rng)
    key = jax.random.key(4) if cfg.recurrent_dropout else None
    argnums = (0, 1, 2, 3) if c0 is not None else (0, 1, 2)
    lengths, resets = jnp.array(LENGTHS, jnp.int32), jnp.asarray(RESETS)
    grads = [
        jax.jit(jax.grad(functools.partial(_loss, cfg, impl, lengths, resets, weights), argnums=argnums))(
            params, x, h0, c0, key
        )
        for impl in IMPLEMENTATIONS
    ]
    for name, a, b in zip(("params", "x", "h0", "c0"), *grads, strict=False):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=f"d{name}")
        assert np.abs(np.asarray(b)).max() > 1e-3, f"d{name} is (nearly) zero"
    dx = np.asarray(grads[0][1])
    for b, n in enumerate(LENGTHS):  # inputs past a sequence's end influence nothing
        assert np.all(dx[n:, b] == 0)


def _numpy_loss(cfg, lengths, weights, masks, params, x, h0, c0):
    w, b = (list(map(np.asarray, group)) for group in jcr.params_to_canonical(jnp.asarray(params), cfg))
    y, h, c = numpy_rnn(
        w,
        b,
        x,
        h0,
        c0,
        cfg.mode,
        cfg.num_layers,
        cfg.num_units,
        cfg.num_directions == 2,
        cfg.skip_input,
        seq_lengths=lengths,
        proj_size=cfg.proj_size,
        activation=cfg.activation,
        recurrent_activation=cfg.recurrent_activation,
        recurrent_masks=masks,
    )
    total = np.sum(y * weights[0]) + np.sum(h * weights[1])
    return total if c is None else total + np.sum(c * weights[2])


@pytest.mark.parametrize(
    "mode,kw",
    [
        ("gru_reset_before", {}),
        ("lstm", dict(activation="softsign", recurrent_activation="hard_sigmoid", recurrent_dropout=0.4)),
        ("gru", dict(activation="silu", recurrent_dropout=0.5)),
    ],
)
def test_gradients_match_finite_differences_of_numpy_oracle(mode, kw):
    with jax.enable_x64(True):
        cfg = jcr.RNNConfig(mode, 2, 3, 2, direction="bidirectional", dtype=np.float64, **kw)
        rng = np.random.default_rng(31)
        params, x, h0, c0 = draw_inputs(cfg, rng, steps=4, batch=2)
        weights = _loss_weights(cfg, rng, steps=4, batch=2)
        key = jax.random.key(9) if cfg.recurrent_dropout else None
        masks = documented_recurrent_masks(key, cfg, 2) if key is not None else None
        lengths = np.array([3, 4], np.int32)
        args = (params, x, h0, c0)
        argnums = (0, 1, 2, 3) if c0 is not None else (0, 1, 2)
        f = functools.partial(_numpy_loss, cfg, lengths, weights, masks)
        rng_d = np.random.default_rng(0)
        directions = [[None if a is None else rng_d.normal(size=a.shape) for a in args] for _ in range(2)]
        for impl in IMPLEMENTATIONS:
            g = jax.jit(jax.grad(functools.partial(_loss, cfg, impl, jnp.asarray(lengths), None, weights), argnums))(
                *args, key
            )
            for direction in directions:
                step = 1e-6
                plus = [None if a is None else a + step * d for a, d in zip(args, direction, strict=True)]
                minus = [None if a is None else a - step * d for a, d in zip(args, direction, strict=True)]
                fd = (f(*plus) - f(*minus)) / (2 * step)
                assert abs(fd) > 1e-3
                analytic = sum(float(np.sum(np.asarray(gi) * di)) for gi, di in zip(g, direction, strict=False))
                np.testing.assert_allclose(analytic, fd, rtol=1e-7, atol=1e-7, err_msg=impl)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_vmap_with_recurrent_dropout_and_other_activations(implementation):
    """vmap over K problems sharing params, each with its own key: each slice is the oracle with its own masks."""
    cfg = make_config("gru_reset_before", 1, "bidirectional", activation="softsign", recurrent_dropout=0.4)
    rng = np.random.default_rng(14)
    params, _, _, _ = draw_inputs(cfg, rng)
    K = 3
    xs = rng.normal(size=(K, T, B, cfg.input_size)).astype(np.float32)
    h0s = (0.5 * rng.normal(size=(K, *cfg.state_shape(B)))).astype(np.float32)
    keys = jax.random.split(jax.random.key(5), K)
    lengths = jnp.array(LENGTHS, jnp.int32)

    def fn(x, h0, key):
        return jcr.rnn(
            params,
            x,
            h0,
            None,
            cfg,
            seq_lengths=lengths,
            is_training=True,
            dropout_key=key,
            implementation=implementation,
        )

    ys, hs, _ = jax.jit(jax.vmap(fn))(xs, h0s, keys)
    grads = jax.jit(jax.vmap(jax.grad(lambda x, h0, key: jnp.sum(fn(x, h0, key)[0] ** 2))))(xs, h0s, keys)
    for k in range(K):
        masks = documented_recurrent_masks(keys[k], cfg, B)
        want = oracle(cfg, params, xs[k], h0s[k], None, seq_lengths=np.array(LENGTHS), recurrent_masks=masks)
        _assert_close((ys[k], hs[k], None), want, 1e-5, f"slice {k}")
        single = jax.grad(lambda x: jnp.sum(fn(x, h0s[k], keys[k])[0] ** 2))(xs[k])  # noqa: B023
        np.testing.assert_allclose(grads[k], single, rtol=2e-5, atol=2e-5)


# ----------------------------------------------------------------------------------------------------------------------
# The registry: the fused backends refuse, with the reason; the default runs "xla".
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,training,reason",
    [
        (dict(mode="lstm", recurrent_activation="hard_sigmoid"), False, "recurrent_activation='hard_sigmoid'"),
        (dict(mode="gru", activation=jax.nn.soft_sign), False, "activation=the callable jax"),
        (dict(mode="gru_reset_before"), False, "do not run 'gru_reset_before'"),
        (dict(mode="rnn_tanh", recurrent_dropout=0.2), True, "no recurrent dropout in training"),
    ],
)
def test_fused_backends_refuse_with_the_reason(kw, training, reason):
    cfg = jcr.RNNConfig(num_layers=1, num_units=4, input_size=3, **kw)
    call = Call(cfg, 5, 2, is_training=training, recurrent_dropout=training and cfg.recurrent_dropout > 0)
    for name in ("cudnn", "onednn"):
        why = registry.backend(name).supports.why_not(call)
        assert why is not None and reason in why, (name, why)
    assert set(registry.choose(None, call).values()) == {"xla"}  # every platform
    assert jcr.implementation_for("cpu", call) == jcr.implementation_for("cuda", call) == "xla"
    assert registry.why_not("xla", None, call) is None
    assert registry.why_not("reference", None, call) is None


def test_fused_backends_keep_what_they_ran():
    """The cell's own activations, by name or None, and recurrent dropout outside training: the fused backends'
    Supports accept them as before."""
    for cfg in (
        jcr.RNNConfig("lstm", 1, 4, 3, activation="tanh", recurrent_activation="sigmoid"),
        jcr.RNNConfig("rnn_tanh", 1, 4, 3, activation="relu"),
        jcr.RNNConfig("gru", 1, 4, 3, recurrent_dropout=0.5),
    ):
        assert cfg.default_activations
        for name in ("cudnn", "onednn"):
            assert registry.backend(name).supports.why_not(Call(cfg, 5, 2, is_training=True)) is None, (name, cfg)


def test_explicit_fused_implementation_raises_naming_why():
    onednn = registry.backend("onednn")
    if onednn.unavailable() is not None:
        pytest.skip(f"oneDNN not available: {onednn.unavailable()}")
    cfg = make_config("gru_reset_before", 1, "unidirectional")
    params, x, h0, _ = draw_inputs(cfg, np.random.default_rng(0))
    with pytest.raises(RuntimeError, match=r"implementation='onednn' needs mode .*do not run 'gru_reset_before'"):
        jcr.rnn(params, x, h0, None, cfg, implementation="onednn")
    cfg = make_config("lstm", 1, "unidirectional", recurrent_dropout=0.5)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(0))
    with pytest.raises(RuntimeError, match=r"needs no recurrent dropout in training"):
        jcr.rnn(params, x, h0, c0, cfg, implementation="onednn", is_training=True, dropout_key=jax.random.key(0))
    jcr.rnn(params, x, h0, c0, cfg, implementation="onednn")  # inference: runs fused
