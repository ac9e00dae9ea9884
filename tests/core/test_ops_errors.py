"""Every bad argument of rnn() and the seed-style classes gives a ValueError/TypeError naming it, what was expected
and what came."""

import functools
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import oracle

T, B, I, H = 5, 3, 4, 6


def _setup(mode="lstm", **kwargs):
    cfg = jcr.RNNConfig(mode=mode, num_layers=2, num_units=H, input_size=I, **kwargs)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jnp.ones((T, B, I), jnp.float32)
    h0 = jnp.zeros(cfg.state_shape(B), jnp.float32)
    c0 = h0 if mode == "lstm" else None
    return cfg, params, x, h0, c0


def _raises(exc, pattern, fn):
    with pytest.raises(exc, match=pattern):
        fn()


def test_x_rank():
    cfg, p, x, h0, c0 = _setup()
    _raises(ValueError, re.escape("x has shape (5, 4); expected rank 3"), lambda: jcr.rnn(p, x[:, 0], h0, c0, cfg))


def test_x_feature_size():
    cfg, p, _, h0, c0 = _setup()
    bad = jnp.ones((T, B, I + 1))
    _raises(ValueError, re.escape("x has shape (5, 3, 5); expected (T, B, 4)"), lambda: jcr.rnn(p, bad, h0, c0, cfg))


@pytest.mark.parametrize("shape", [(0, B, I), (T, 0, I)])
def test_x_empty(shape):
    cfg, p, _, _, _ = _setup()
    x = jnp.ones(shape)
    h0 = jnp.zeros(cfg.state_shape(shape[1]))
    _raises(ValueError, "max_time and batch must be at least 1", lambda: jcr.rnn(p, x, h0, h0, cfg))


def test_x_dtype():
    cfg, p, x, h0, c0 = _setup()
    _raises(TypeError, "x has dtype float16; expected float32", lambda: jcr.rnn(p, x.astype(jnp.float16), h0, c0, cfg))


def test_x_not_array():
    cfg, p, _, h0, c0 = _setup()
    _raises(TypeError, "x must be an array, got list", lambda: jcr.rnn(p, [[1.0]], h0, c0, cfg))


def test_params_length():
    cfg, p, x, h0, c0 = _setup()
    size = jcr.params_size(cfg)
    _raises(
        ValueError,
        re.escape(f"params has shape ({size - 1},); expected ({size},)"),
        lambda: jcr.rnn(p[:-1], x, h0, c0, cfg),
    )


def test_params_dtype():
    cfg, p, x, h0, c0 = _setup()
    _raises(
        TypeError,
        "params has dtype bfloat16; expected float32",
        lambda: jcr.rnn(p.astype(jnp.bfloat16), x, h0, c0, cfg),
    )


def test_h0_shape_names_meaning():
    cfg, p, x, h0, c0 = _setup()
    _raises(
        ValueError,
        re.escape("h0 has shape (1, 3, 6); expected (2, 3, 6) = (num_layers*num_directions, batch, num_units)"),
        lambda: jcr.rnn(p, x, h0[:1], c0, cfg),
    )


def test_h0_batch_mismatch():
    cfg, p, x, h0, c0 = _setup()
    _raises(
        ValueError, re.escape("h0 has shape (2, 2, 6); expected (2, 3, 6)"), lambda: jcr.rnn(p, x, h0[:, :2], c0, cfg)
    )


def test_batch_major_x_is_blamed_not_h0():
    """The issue's case: x given [B, T, I] with a correct h0 used to be reported as a wrong h0."""
    cfg, p, x, h0, c0 = _setup()
    x_batch_major = jnp.swapaxes(x, 0, 1)
    _raises(
        ValueError,
        re.escape(
            "x has shape (3, 5, 4) and h0 (2, 3, 6): h0's batch is 3, x's first axis. rnn() "
            "takes time-major x [T, B, input_size]; x looks batch-major"
        ),
        lambda: jcr.rnn(p, x_batch_major, h0, c0, cfg),
    )
    _raises(ValueError, "jnp.swapaxes", lambda: jcr.rnn(p, x_batch_major, h0, c0, cfg))


def test_jit_without_static_config_gives_the_fix():
    cfg, p, x, h0, c0 = _setup()
    message = r"config is a traced value .*static_argnames=\('config',\).*RNNParams"
    _raises(TypeError, message, lambda: jax.jit(jcr.rnn)(p, x, h0, c0, cfg))
    _raises(TypeError, message, lambda: jax.jit(jcr.rnn)(p, x, h0, c0, config=cfg))
    # Both fixes the message names work.
    y_static = jax.jit(jcr.rnn, static_argnames=("config",))(p, x, h0, c0, config=cfg)[0]
    y_params = jax.jit(jcr.rnn)(jcr.RNNParams(p, cfg), x, h0, c0)[0]
    np.testing.assert_array_equal(np.asarray(y_static), np.asarray(y_params))


def test_h0_dtype():
    cfg, p, x, h0, c0 = _setup()
    _raises(TypeError, "h0 has dtype float16; expected float32", lambda: jcr.rnn(p, x, h0.astype(jnp.float16), c0, cfg))


def test_c0_missing_for_lstm():
    cfg, p, x, h0, _ = _setup()
    _raises(ValueError, "c0 is None; mode 'lstm' needs an initial cell state", lambda: jcr.rnn(p, x, h0, None, cfg))


def test_c0_given_for_gru():
    cfg, p, x, h0, _ = _setup("gru")
    _raises(ValueError, "c0 was given but mode 'gru' has no cell state", lambda: jcr.rnn(p, x, h0, h0, cfg))


def test_c0_shape():
    cfg, p, x, h0, c0 = _setup()
    _raises(
        ValueError, re.escape("c0 has shape (2, 3, 5); expected (2, 3, 6)"), lambda: jcr.rnn(p, x, h0, c0[..., :5], cfg)
    )


def test_seq_lengths_shape():
    cfg, p, x, h0, c0 = _setup()
    _raises(
        ValueError,
        re.escape("seq_lengths has shape (2,); expected (3,) = (batch,)"),
        lambda: jcr.rnn(p, x, h0, c0, cfg, seq_lengths=jnp.array([1, 2], jnp.int32)),
    )


def test_seq_lengths_dtype():
    cfg, p, x, h0, c0 = _setup()
    _raises(
        TypeError,
        "seq_lengths has dtype float32; expected integers",
        lambda: jcr.rnn(p, x, h0, c0, cfg, seq_lengths=jnp.array([1.0, 2.0, 3.0])),
    )
    _raises(
        TypeError,
        "seq_lengths has dtype float64; expected integers",
        lambda: jcr.rnn(p, x, h0, c0, cfg, seq_lengths=[1, 2.5, 3]),
    )
    _raises(
        TypeError,
        "seq_lengths has dtype bool; expected integers",
        lambda: jcr.rnn(p, x, h0, c0, cfg, seq_lengths=np.array([True, True, False])),
    )


def test_seq_lengths_of_any_integer_type_or_a_list_are_int32_s():
    """NumPy's default int64, unsigned integers and a Python list give what int32 lengths give (range-checked first,
    then converted)."""
    cfg, p, x, h0, c0 = _setup()
    x = jax.random.normal(jax.random.key(1), x.shape)
    want = jcr.rnn(p, x, h0, c0, cfg, seq_lengths=jnp.array([5, 2, 1], jnp.int32))
    for lengths in (np.array([5, 2, 1]), np.array([5, 2, 1], np.uint8), [5, 2, 1], (5, 2, 1)):
        got = jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    _raises(
        ValueError,
        re.escape("seq_lengths[0] is 6; every length must be in [0, 5]"),
        lambda: jcr.rnn(p, x, h0, c0, cfg, seq_lengths=np.array([6, 2, 1], np.int64)),
    )


@pytest.mark.parametrize("lengths, index, value", [([1, -1, 2], 1, -1), ([1, 2, 6], 2, 6), ([-1, 2, 3], 0, -1)])
def test_seq_lengths_range(lengths, index, value):
    cfg, p, x, h0, c0 = _setup()
    _raises(
        ValueError,
        re.escape(f"seq_lengths[{index}] is {value}; every length must be in [0, 5]"),
        lambda: jcr.rnn(p, x, h0, c0, cfg, seq_lengths=jnp.array(lengths, jnp.int32)),
    )


def test_seq_lengths_under_jit_never_reads_out_of_bounds():
    """Under jit lengths cannot be checked; the documented behaviour: > T acts as T, < 0 as 0 (an empty sequence)."""
    cfg, p, x, h0, c0 = _setup()
    run = jax.jit(lambda lengths: jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths, implementation="xla"))
    y, h_n, c_n = run(jnp.array([9, 0, -4], jnp.int32))
    y_full, h_full, _ = jcr.rnn(p, x, h0, c0, cfg, implementation="xla")
    np.testing.assert_allclose(y[:, 0], y_full[:, 0], atol=1e-6)
    np.testing.assert_allclose(h_n[:, 0], h_full[:, 0], atol=1e-6)
    assert np.all(np.asarray(y[:, 1:]) == 0)
    np.testing.assert_array_equal(h_n[:, 1:], h0[:, 1:])
    np.testing.assert_array_equal(c_n[:, 1:], c0[:, 1:])


def test_dropout_key_required():
    cfg, p, x, h0, c0 = _setup(dropout=0.5)
    _raises(
        ValueError,
        "dropout_key is None; is_training=True with config.dropout=0.5",
        lambda: jcr.rnn(p, x, h0, c0, cfg, is_training=True),
    )


@pytest.mark.parametrize(
    "key, error, message",
    [
        (3, TypeError, "dropout_key must be a JAX PRNG key .*, got 3"),
        ("k", TypeError, "dropout_key must be a JAX PRNG key .*, got 'k'"),
        (np.zeros(3, np.uint32), TypeError, r"dropout_key must be a JAX PRNG key .*shape \(3,\) and dtype uint32"),
        (jax.random.split(jax.random.key(0)), ValueError, r"dropout_key holds keys of shape \(2,\); expected one key"),
        (jax.random.split(jax.random.PRNGKey(0)), ValueError, r"dropout_key holds keys of shape \(2,\)"),
    ],
)
@pytest.mark.parametrize("implementation", [None, "xla"])
def test_dropout_key_must_be_one_key(key, error, message, implementation):
    cfg, p, x, h0, c0 = _setup(dropout=0.5)
    _raises(
        error,
        message,
        lambda: jcr.rnn(p, x, h0, c0, cfg, is_training=True, dropout_key=key, implementation=implementation),
    )


def test_dropout_key_typed_or_raw_draw_the_same_masks():
    """Both spellings of one key pass the check and draw the same masks, eagerly and under jit."""
    cfg, p, x, h0, c0 = _setup(dropout=0.5)
    run = lambda key: jcr.rnn(p, x, h0, c0, cfg, is_training=True, dropout_key=key)[0]  # noqa: E731
    typed, raw = jax.random.key(7), jax.random.PRNGKey(7)
    np.testing.assert_array_equal(run(typed), run(raw))
    np.testing.assert_array_equal(jax.jit(run)(typed), run(raw))
    assert not np.allclose(run(typed), jcr.rnn(p, x, h0, c0, cfg)[0])  # the masks applied


def test_params_none_is_named():
    cfg, _, x, h0, c0 = _setup()
    _raises(TypeError, "params must be an array .* got NoneType", lambda: jcr.rnn(None, x, h0, c0, cfg))


def test_unknown_implementation():
    cfg, p, x, h0, c0 = _setup()
    _raises(
        ValueError,
        "implementation is 'cuda'; expected None or one of",
        lambda: jcr.rnn(p, x, h0, c0, cfg, implementation="cuda"),
    )


def test_cudnn_where_it_cannot_run_is_a_clear_error():
    cfg, p, x, h0, c0 = _setup()
    if jax.default_backend() == "gpu" and jcr.extension_loaded():
        pytest.skip("cuDNN can run here")
    _raises(RuntimeError, "implementation='cudnn' needs", lambda: jcr.rnn(p, x, h0, c0, cfg, implementation="cudnn"))


def test_config_must_be_rnnconfig():
    _, p, x, h0, c0 = _setup()
    _raises(TypeError, "config must be an RNNConfig, got dict", lambda: jcr.rnn(p, x, h0, c0, {"mode": "lstm"}))


@pytest.mark.parametrize(
    "call",
    [
        lambda c: jcr.params_size(c),
        lambda c: jcr.init_params(jax.random.key(0), c),
        lambda c: jcr.params_to_canonical(jnp.zeros(3), c),
        lambda c: jcr.canonical_to_params([], [], c),
        lambda c: jcr.params_to_tree(jnp.zeros(3), c),
        lambda c: jcr.tree_to_params({}, c),
    ],
)
@pytest.mark.parametrize("config", [None, "lstm", {"mode": "lstm"}])
def test_layout_functions_name_a_config_that_is_not_one(call, config):
    # params_to_canonical and params_to_tree take config=None with an RNNParams and say so
    expected = f"config (must be an RNNConfig, got {type(config).__name__}|is None; pass an RNNConfig)"
    _raises(TypeError, expected, lambda: call(config))


def test_config_dtype_none_and_state_shape_batch():
    _raises(TypeError, "dtype is None; expected one of", lambda: jcr.RNNConfig("gru", 1, H, I, dtype=None))
    cfg = jcr.RNNConfig("lstm", 2, H, I)
    _raises(ValueError, "batch_size must be >= 0, got -1", lambda: cfg.state_shape(-1))
    _raises(TypeError, "batch_size must be an int, got float 2.5", lambda: cfg.cell_shape(2.5))
    assert cfg.state_shape(np.int64(3)) == (2, 3, H) and cfg.cell_shape(0) == (2, 0, H)


def test_float64_without_x64():
    if jax.config.jax_enable_x64:
        pytest.skip("x64 is on")
    cfg = jcr.RNNConfig(mode="gru", num_layers=1, num_units=H, input_size=I, dtype="float64")
    _raises(
        TypeError, "config.dtype is float64 but jax_enable_x64 is off", lambda: jcr.init_params(jax.random.key(0), cfg)
    )


def test_non_finite_inputs_pass_through():
    cfg, p, x, h0, c0 = _setup()
    x = x.at[2, 1, 0].set(jnp.nan).at[0, 0, 0].set(jnp.inf)
    y, h_n, c_n = jcr.rnn(p, x, h0, c0, cfg, implementation="xla")
    assert np.isnan(np.asarray(y[2:, 1])).all()  # NaN enters batch 1 at t=2 and stays
    assert np.isfinite(np.asarray(y[:, 2])).all()  # batch 2 never saw a non-finite value
    # Batch 0 got +inf at t=0: every gate's pre-activation is +-inf there and the sigmoids and tanhs saturate, so the
    # states stay finite, with exactly the values IEEE arithmetic gives in the float64 oracle.
    with np.errstate(over="ignore", invalid="ignore"):
        want_y, want_h, want_c = oracle(cfg, p, x, h0, c0)
    assert np.isfinite(want_y[:, 0]).all()
    for name, got, want in (
        ("y", y[:, 0], want_y[:, 0]),
        ("h_n", h_n[:, 0], want_h[:, 0]),
        ("c_n", c_n[:, 0], want_c[:, 0]),
    ):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5, err_msg=name)


# Seed-style classes.


def test_seed_class_lstm_needs_input_c():
    lstm = jcr.CudnnLSTM(1, H, I)
    p = lstm.init_params(jax.random.key(0))
    x = jnp.ones((T, B, I))
    h = jnp.zeros((1, B, H))
    _raises(
        ValueError,
        re.escape("input_c is None; mode 'lstm' needs an initial cell state of shape (1, 3, 6)"),
        lambda: lstm(x, h, None, p),
    )


SEED_CLASSES = {"lstm": jcr.CudnnLSTM, "gru": jcr.CudnnGRU, "rnn_tanh": jcr.CudnnRNNTanh, "rnn_relu": jcr.CudnnRNNRelu}
SEED_STATE = "(num_layers*num_directions, batch, num_units)"


def _seed_call(mode, **replace):
    """A two-layer seed-class model of ``mode`` called with valid arguments, those in ``replace`` swapped in."""
    model = SEED_CLASSES[mode](num_layers=2, num_units=H, input_size=I)
    args = {
        "input_data": jnp.ones((T, B, I)),
        "input_h": jnp.zeros((2, B, H)),
        "input_c": jnp.zeros((2, B, H)),
        "params": model.init_params(jax.random.key(0)),
    }
    if mode != "lstm":
        del args["input_c"]
    args.update(replace)
    return model(**args, is_training=False)


# (argument, value, error, message): every argument of the seed classes' call, by its name; for params, the value is
# made from the model's params_size(), which the message names as {size}
BAD_SEED_ARGUMENTS = [
    (
        "input_data",
        jnp.ones((T, B)),
        ValueError,
        "input_data has shape (5, 3); expected rank 3 (max_time, batch, input_size) = (T, B, 4)",
    ),
    (
        "input_data",
        jnp.ones((T, B, I + 1)),
        ValueError,
        "input_data has shape (5, 3, 5); expected (T, B, 4): its last axis must be input_size",
    ),
    (
        "input_data",
        jnp.ones((T, B, I), jnp.float16),
        TypeError,
        "input_data has dtype float16; expected float32 (the model's dtype)",
    ),
    ("input_data", [[[1.0] * I] * B] * T, TypeError, "input_data must be an array, got list"),
    (
        "input_data",
        jnp.ones((B, T, I)),
        ValueError,
        "input_data has shape (3, 5, 4) and input_h (2, 3, 6): input_h's "
        "batch is 3, input_data's first axis. The model takes time-major "
        "input_data [T, B, input_size]; input_data looks batch-major",
    ),
    ("input_h", jnp.zeros((1, B, H)), ValueError, f"input_h has shape (1, 3, 6); expected (2, 3, 6) = {SEED_STATE}"),
    (
        "input_h",
        jnp.zeros((2, B, H), jnp.bfloat16),
        TypeError,
        "input_h has dtype bfloat16; expected float32 (the model's dtype)",
    ),
    ("input_h", None, TypeError, "input_h must be an array, got NoneType"),
    (
        "params",
        lambda size: jnp.zeros((7,)),
        ValueError,
        "params has shape (7,); expected ({size},) = (params_size(),)",
    ),
    (
        "params",
        lambda size: jnp.zeros((size,), jnp.float16),
        TypeError,
        "params has dtype float16; expected float32 (the model's dtype)",
    ),
    ("seq_lengths", jnp.array([1, 2], jnp.int32), ValueError, "seq_lengths has shape (2,); expected (3,) = (batch,)"),
    (
        "seq_lengths",
        jnp.array([1, 2, 6], jnp.int32),
        ValueError,
        "seq_lengths[2] is 6; every length must be in [0, 5] = [0, max_time]",
    ),
]


@pytest.mark.parametrize("mode", SEED_CLASSES)
@pytest.mark.parametrize(
    "argument, value, error, message",
    BAD_SEED_ARGUMENTS,
    ids=[message.split(";")[0] for _, _, _, message in BAD_SEED_ARGUMENTS],
)
def test_seed_class_errors_name_its_own_arguments(mode, argument, value, error, message):
    """The issue: the seed classes' errors named rnn()'s x, h0, c0 instead of input_data, input_h, input_c."""
    if argument == "params":
        size = SEED_CLASSES[mode](2, H, I).params_size()
        value, message = value(size), message.format(size=size)
    _raises(error, re.escape(message), lambda: _seed_call(mode, **{argument: value}))


@pytest.mark.parametrize(
    "value, error, message",
    [
        (jnp.zeros((2, B, H - 1)), ValueError, f"input_c has shape (2, 3, 5); expected (2, 3, 6) = {SEED_STATE}"),
        (
            jnp.zeros((2, B, H), jnp.float16),
            TypeError,
            "input_c has dtype float16; expected float32 (the model's dtype)",
        ),
        ([0.0], TypeError, "input_c must be an array, got list"),
    ],
)
def test_seed_class_lstm_names_input_c(value, error, message):
    _raises(error, re.escape(message), lambda: _seed_call("lstm", input_c=value))


@pytest.mark.parametrize("mode", SEED_CLASSES)
def test_seed_class_valid_calls_run(mode):
    outputs = _seed_call(mode, seq_lengths=jnp.array([T, 1, 0], jnp.int32))
    assert outputs[0].shape == (T, B, H) and all(o.shape == (2, B, H) for o in outputs[1:])
    assert np.all(np.asarray(outputs[0][1:, 1]) == 0)


def test_seed_class_gru_signature_has_no_input_c():
    gru = jcr.CudnnGRU(1, H, I)
    p = gru.init_params(jax.random.key(0))
    # A stray input_c lands in the params slot and is rejected by name.
    _raises(
        ValueError,
        re.escape("params has shape (1, 3, 6); expected"),
        lambda: gru(jnp.ones((T, B, I)), jnp.zeros((1, B, H)), jnp.zeros((1, B, H)), p),
    )


def test_is_training_must_be_bool():
    cfg, p, x, h0, c0 = _setup()
    _raises(TypeError, "is_training must be a Python bool", lambda: jcr.rnn(p, x, h0, c0, cfg, is_training=p))


def test_seed_class_bad_seed():
    _raises(TypeError, "seed must be an int, got str", lambda: jcr.CudnnRNNTanh(1, H, I, seed="0"))


def test_seed_class_bad_direction():
    _raises(ValueError, "direction is 'both'; expected one of", lambda: jcr.CudnnRNNRelu(1, H, I, direction="both"))


def test_rnn_accepts_rnn_params_and_checks_config():
    cfg, p, x, h0, c0 = _setup()
    packed = jcr.RNNParams(p, cfg)
    np.testing.assert_array_equal(jcr.rnn(packed, x, h0, c0)[0], jcr.rnn(p, x, h0, c0, cfg)[0])
    other = jcr.RNNConfig(mode="lstm", num_layers=2, num_units=H, input_size=I, direction="unidirectional", dropout=0.1)
    _raises(ValueError, "differs from params.config", lambda: jcr.rnn(packed, x, h0, c0, other))
    _raises(TypeError, "config is None; pass an RNNConfig", lambda: jcr.rnn(p, x, h0, c0))


def test_precision_unknown():
    cfg, params, x, h0, c0 = _setup()
    _raises(
        ValueError,
        re.escape("precision is 'bfloat16'; expected None or one of ['default', 'float32'"),
        lambda: jcr.rnn(params, x, h0, c0, cfg, implementation="xla", precision="bfloat16"),
    )


def test_precision_from_the_jax_config_is_checked_too():
    cfg, params, x, h0, c0 = _setup()
    with jax.default_matmul_precision("bfloat16"):
        _raises(
            ValueError,
            "jax_default_matmul_precision is 'bfloat16'",
            lambda: jcr.rnn(params, x, h0, c0, cfg, implementation="xla"),
        )


# ArgumentNames for frontends whose arrays lack an axis of rnn()'s: unbatched (an Equinox module: x [T, I], states
# [L*D, H], one length) and without the layer axis (a Keras layer: states [B, H]); the words are the frontend's.
UNBATCHED = jcr._checks.ArgumentNames(
    x="x",
    h0="state",
    seq_lengths="seq_length",
    resets="resets",
    dtype="the module's",
    axes=("time", None, "input_size"),
    state_axes=("layers", "hidden_size"),
    layout_fix="jax.vmap it",
)
UNBATCHED_CASES = [  # (change, error, message)
    (
        dict(x=jnp.ones((B, T, I))),
        ValueError,
        "x has shape (3, 5, 4); expected rank 2 (time, input_size) = (T, 4) (jax.vmap it)",
    ),
    (dict(x=jnp.ones((T, I + 1))), ValueError, "x has shape (5, 5); expected (T, 4): its last axis must be "),
    (dict(x=jnp.ones((0, I))), ValueError, "x has shape (0, 4); time must be at least 1"),
    (dict(h0=jnp.zeros((2, 1, H))), ValueError, "state has shape (2, 1, 6); expected (2, 6) = (layers, hidden_size)"),
    (dict(h0=jnp.zeros((2, H), jnp.float16)), TypeError, "state has dtype float16; expected float32 (the module's)"),
    (
        dict(seq_lengths=jnp.array([2], jnp.int32)),
        ValueError,
        "seq_length has shape (1,); expected () (one sequence's length; jax.vmap it)",
    ),
    (
        dict(seq_lengths=jnp.array(T + 1, jnp.int32)),
        ValueError,
        "seq_length is 6; every length must be in [0, 5] = [0, time]",
    ),
    (
        dict(resets=jnp.zeros((T, 1), bool)),
        ValueError,
        "resets has shape (5, 1); expected (5,) = (time,), the first axis of x",
    ),
]


@pytest.mark.parametrize(
    "change, error, message", UNBATCHED_CASES, ids=[m.split(";")[0] for _, _, m in UNBATCHED_CASES]
)
def test_check_inputs_in_an_unbatched_frontends_words(change, error, message):
    cfg, params, _, _, _ = _setup("gru")
    good = dict(
        x=jnp.ones((T, I)), h0=jnp.zeros((2, H)), seq_lengths=jnp.array(T, jnp.int32), resets=jnp.zeros((T,), bool)
    )
    args = good | change
    jcr._checks.check_inputs(
        params, good["x"], good["h0"], None, cfg, good["seq_lengths"], good["resets"], names=UNBATCHED
    )  # the good call passes
    _raises(
        error,
        re.escape(message),
        lambda: jcr._checks.check_inputs(
            params, args["x"], args["h0"], None, cfg, args["seq_lengths"], args["resets"], names=UNBATCHED
        ),
    )


def test_check_inputs_without_the_layer_axis():
    cfg = jcr.RNNConfig(mode="lstm", num_layers=1, num_units=H, input_size=I)
    names = jcr._checks.ArgumentNames(
        x="inputs",
        h0="h",
        c0="c",
        dtype=None,
        axes=("steps", "batch", "features"),
        state_axes=(None, "units"),
        batch_major=True,
        caller="The layer",
        layout_fix="swap them",
    )
    x, h = jnp.ones((B, T, I)), jnp.zeros((B, H))
    jcr._checks.check_inputs(None, x, h, h, cfg, names=names)  # params None: the frontend builds them itself
    _raises(
        ValueError,
        re.escape("c has shape (2, 6); expected (3, 6) = (batch, units)"),
        lambda: jcr._checks.check_inputs(None, x, h, h[:2], cfg, names=names),
    )
    # h's batch is x's time axis: x is blamed, in the layer's words
    _raises(
        ValueError,
        re.escape(
            "inputs has shape (5, 3, 4) and h (3, 6): h's batch is 3, inputs's second axis. "
            "The layer takes batch-major inputs [B, T, features]; inputs looks time-major "
            "[T, B, features]: swap them"
        ),
        lambda: jcr._checks.check_inputs(None, jnp.ones((T, B, I)), h, h, cfg, names=names),
    )
    stacked = jcr.RNNConfig(mode="lstm", num_layers=2, num_units=H, input_size=I)
    _raises(
        ValueError,
        r"state_axes\[0\] is None .* 2 layer\(s\) and 1 direction\(s\)",
        lambda: jcr._checks.check_inputs(None, x, h, h, stacked, names=names),
    )


def test_rnn_refuses_names_it_cannot_check_by():
    cfg, params, x, h0, c0 = _setup()
    for names in (
        UNBATCHED,
        jcr._checks.ArgumentNames(state_axes=(None, "units")),
        jcr._checks.ArgumentNames(batch_major=True),
    ):
        _raises(
            ValueError,
            "argument_names is batch-major, unbatched or without the state's layer axis",
            functools.partial(jcr.rnn, params, x, h0, c0, cfg, argument_names=names),
        )


def test_config_integers_name_a_traced_size():
    jcr.config.check_int("hidden_size", np.int64(3), 1)
    _raises(
        TypeError,
        re.escape("hidden_size must be an int, got a traced value (mark it static under jax.jit)"),
        lambda: jax.jit(lambda n: jcr.config.check_int("hidden_size", n, 1))(3),
    )
    _raises(
        TypeError,
        re.escape("num_units must be an int, got a traced value"),
        lambda: jax.jit(lambda n: jcr.RNNConfig(mode="gru", num_layers=1, num_units=n, input_size=2))(3),
    )
