"""jax_cudnn_rnn.compat against jax.experimental.rnn itself: the same signatures, the same initial weights for a key,
the same unpacked matrices, and lstm() equal to its reference lstm_ref (values and gradients) with ragged lengths,
both directions and several layers; dropout and precision as documented; every malformed argument named."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import rnn as jax_rnn

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import compat

B, T, I, H = 3, 5, 4, 6
LENGTHS = jnp.array([5, 2, 1], jnp.int32)  # ragged, including 1 and T (lstm_ref reads step length-1, so not 0)
CASES = [(1, False), (2, True), (3, False)]


def _inputs(num_layers, bidirectional, key=1):
    k = jax.random.split(jax.random.key(key), 3)
    states = (num_layers * (2 if bidirectional else 1), B, H)
    return (jax.random.normal(k[0], (B, T, I)), jax.random.normal(k[1], states), jax.random.normal(k[2], states))


def test_signatures_are_jax_experimental_rnns():
    names = ("lstm", "lstm_ref", "init_lstm_weight", "unpack_lstm_weights", "swap_lstm_gates", "get_num_params_in_lstm")
    assert set(names) <= set(compat.__all__)
    for name in names:
        theirs = inspect.signature(getattr(jax_rnn, name)).parameters
        ours = inspect.signature(getattr(compat, name)).parameters
        assert [(p.name, p.kind, p.default) for p in theirs.values()] == [
            (p.name, p.kind, p.default) for p in ours.values()
        ][: len(theirs)], name
        assert all(p.kind is p.KEYWORD_ONLY for p in list(ours.values())[len(theirs) :]), name  # extras: keyword only


@pytest.mark.parametrize("num_layers, bidirectional", CASES)
def test_weights_are_the_same_bytes(num_layers, bidirectional):
    args = (I, H, num_layers, bidirectional)
    assert compat.get_num_params_in_lstm(*args) == jax_rnn.get_num_params_in_lstm(*args)
    weights = compat.init_lstm_weight(jax.random.key(0), *args)
    np.testing.assert_array_equal(np.asarray(weights), np.asarray(jax_rnn.init_lstm_weight(jax.random.key(0), *args)))
    for ours, theirs in zip(
        compat.unpack_lstm_weights(weights, *args), jax_rnn.unpack_lstm_weights(weights, *args), strict=True
    ):
        assert ours.keys() == theirs.keys()
        for p in ours:
            np.testing.assert_array_equal(np.asarray(ours[p]), np.asarray(theirs[p]))
    # and they mean the same to this library: W_ih of pseudo-layer 0 holds its canonical input matrices i, f, g, o
    config = jcr.RNNConfig("lstm", num_layers, H, I, "bidirectional" if bidirectional else "unidirectional")
    matrices, _ = jcr.params_to_canonical(weights, config)
    np.testing.assert_array_equal(
        np.asarray(jnp.concatenate(matrices[:4])), np.asarray(jax_rnn.unpack_lstm_weights(weights, *args)[0][0])
    )


@pytest.mark.parametrize("num_layers, bidirectional", CASES)
def test_lstm_ref_and_swap_lstm_gates_are_jax_experimental_rnns(num_layers, bidirectional):
    """The drop-in's ``lstm_ref`` computes what jax's computes (ragged lengths included), and ``swap_lstm_gates``
    returns jax's bytes; lengths may also be a list or NumPy's default int64."""
    args = (I, H, num_layers, bidirectional)
    weights = compat.init_lstm_weight(jax.random.key(3), *args)
    np.testing.assert_array_equal(
        np.asarray(compat.swap_lstm_gates(weights, *args)), np.asarray(jax_rnn.swap_lstm_gates(weights, *args))
    )
    x, h_0, c_0 = _inputs(num_layers, bidirectional, key=4)
    unpacked = jax_rnn.unpack_lstm_weights(weights, *args)
    want = jax_rnn.lstm_ref(x, h_0, c_0, *unpacked, LENGTHS, *args[:3], 0.0, bidirectional)
    got = compat.lstm_ref(x, h_0, c_0, *unpacked, LENGTHS, *args[:3], 0.0, bidirectional)
    for ours, theirs in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-5)
    as_list = compat.lstm(x, h_0, c_0, weights, [5, 2, 1], *args[:3], 0.0, bidirectional, "highest")
    as_int32 = compat.lstm(x, h_0, c_0, weights, LENGTHS, *args[:3], 0.0, bidirectional, "highest")
    for a, b in zip(as_list, as_int32, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(NotImplementedError, match="dropout"):
        compat.lstm_ref(x, h_0, c_0, *unpacked, LENGTHS, *args[:3], 0.5, bidirectional)


@pytest.mark.parametrize("num_layers, bidirectional", CASES)
def test_lstm_equals_lstm_ref_in_values_and_gradients(num_layers, bidirectional):
    args = (I, H, num_layers, bidirectional)
    weights = compat.init_lstm_weight(jax.random.key(2), *args)
    x, h_0, c_0 = _inputs(num_layers, bidirectional)

    def ours(x, h_0, c_0, weights):
        return compat.lstm(x, h_0, c_0, weights, LENGTHS, *args[:3], 0.0, bidirectional)

    def theirs(x, h_0, c_0, weights):
        return jax_rnn.lstm_ref(
            x, h_0, c_0, *jax_rnn.unpack_lstm_weights(weights, *args), LENGTHS, *args[:3], 0.0, bidirectional
        )

    got, want = jax.jit(ours)(x, h_0, c_0, weights), theirs(x, h_0, c_0, weights)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6)
    assert got[0].shape == (B, T, (2 if bidirectional else 1) * H)
    np.testing.assert_array_equal(np.asarray(got[0][2, 1:]), 0.0)  # past a sequence's length

    def loss(run):
        def value(*arrays):
            y, h_n, c_n = run(*arrays)
            return jnp.sum(y**2) + jnp.sum(jnp.sin(h_n)) + jnp.sum(c_n)

        return value

    grads = jax.grad(loss(ours), argnums=(0, 1, 2, 3))(x, h_0, c_0, weights)
    wants = jax.grad(loss(theirs), argnums=(0, 1, 2, 3))(x, h_0, c_0, weights)
    for name, a, b in zip(("x", "h_0", "c_0", "weights"), grads, wants, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, err_msg=name)


def test_dropout_applies_with_a_key_and_is_refused_without_one():
    args = (I, H, 2, True)
    weights = compat.init_lstm_weight(jax.random.key(3), *args)
    x, h_0, c_0 = _inputs(2, True)
    plain = compat.lstm(x, h_0, c_0, weights, LENGTHS, I, H, 2, False, True)  # jax's docs pass dropout=False
    key = jax.random.key(4)
    dropped = compat.lstm(x, h_0, c_0, weights, LENGTHS, I, H, 2, 0.5, True, dropout_key=key)
    config = jcr.RNNConfig("lstm", 2, H, I, "bidirectional", dropout=0.5)
    want = jcr.rnn(
        weights, jnp.swapaxes(x, 0, 1), h_0, c_0, config, seq_lengths=LENGTHS, is_training=True, dropout_key=key
    )
    np.testing.assert_allclose(np.asarray(dropped[0]), np.asarray(jnp.swapaxes(want[0], 0, 1)), atol=1e-6)
    assert not np.allclose(np.asarray(dropped[0]), np.asarray(plain[0]))
    with pytest.raises(ValueError, match=r"dropout is 0.5 between 2 layers but dropout_key is None"):
        compat.lstm(x, h_0, c_0, weights, LENGTHS, I, H, 2, 0.5, True)
    one_layer = compat.init_lstm_weight(jax.random.key(3), I, H, 1, False)  # nothing between layers: no effect
    x1, h1, c1 = _inputs(1, False)
    for a, b in zip(
        compat.lstm(x1, h1, c1, one_layer, LENGTHS, I, H, 1, 0.5, False),
        compat.lstm(x1, h1, c1, one_layer, LENGTHS, I, H, 1, 0.0, False),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_precision_follows_jax_experimental_rnn():
    assert compat._precision(None) == "tensorfloat32"  # jax.experimental.rnn allows TF32 unless told otherwise
    assert compat._precision((jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)) is jax.lax.Precision.HIGHEST
    with jax.default_matmul_precision("float32"):
        assert compat._precision(None) is None  # rnn() then reads the config: strict
    weights = compat.init_lstm_weight(jax.random.key(5), I, H, 1, False)
    x, h_0, c_0 = _inputs(1, False)
    strict = compat.lstm(x, h_0, c_0, weights, LENGTHS, I, H, 1, 0.0, False, "highest")
    default = compat.lstm(x, h_0, c_0, weights, LENGTHS, I, H, 1, 0.0, False)
    for a, b in zip(strict, default, strict=True):  # no TF32 on the CPU
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match=r"precision is 'fast'; expected None or one of"):
        compat.lstm(x, h_0, c_0, weights, LENGTHS, I, H, 1, 0.0, False, "fast")


def test_errors_name_the_argument():
    weights = compat.init_lstm_weight(jax.random.key(6), I, H, 2, True)
    x, h_0, c_0 = _inputs(2, True)
    good = dict(
        x=x,
        h_0=h_0,
        c_0=c_0,
        weights=weights,
        seq_lengths=LENGTHS,
        input_size=I,
        hidden_size=H,
        num_layers=2,
        dropout=0.0,
        bidirectional=True,
    )
    cases = [
        (
            dict(x=x[0]),
            ValueError,
            r"x has shape \(5, 4\); expected rank 3 \(batch, max_seq_length, input_size\) = "
            r"\(B, T, 4\)",
        ),
        (
            dict(x=x[..., :3]),
            ValueError,
            r"x has shape \(3, 5, 3\); expected \(B, T, 4\): its last axis must be "
            r"input_size",
        ),
        (dict(x=x.astype(jnp.int32)), TypeError, r"x has dtype int32; expected one of"),
        (
            dict(x=jnp.swapaxes(x, 0, 1)),
            ValueError,
            r"x has shape \(5, 3, 4\) and h_0 \(4, 3, 6\): .* lstm\(\) takes "
            r"batch-major x \[B, T, input_size\]; x looks time-major",
        ),
        (dict(x=np.zeros((B, 0, I), np.float32)), ValueError, r"max_seq_length and batch must be at least 1"),
        (
            dict(h_0=h_0[:2]),
            ValueError,
            r"h_0 has shape \(2, 3, 6\); expected \(4, 3, 6\) = \(num_directions \* "
            r"num_layers, batch, hidden_size\)",
        ),
        (dict(c_0=jnp.swapaxes(c_0, 0, 1)), ValueError, r"c_0 has shape \(3, 4, 6\); expected \(4, 3, 6\)"),
        (
            dict(c_0=None),
            ValueError,
            r"c_0 is None; mode 'lstm' needs an initial cell state of shape \(4, 3, 6\) = "
            r"\(num_directions \* num_layers, batch, hidden_size\)",
        ),
        (dict(h_0=h_0.astype(jnp.float16)), TypeError, r"h_0 has dtype float16; expected float32 \(x's dtype\)"),
        (
            dict(weights=weights[:-1]),
            ValueError,
            r"weights has shape \(1535,\); expected \(1536,\) = "
            r"\(get_num_params_in_lstm\(input_size=4, hidden_size=6, "
            r"num_layers=2, bidirectional=True\),\)",
        ),
        (dict(weights=weights.astype(jnp.bfloat16)), TypeError, r"weights has dtype bfloat16; expected float32"),
        (dict(seq_lengths=LENGTHS[:2]), ValueError, r"seq_lengths has shape \(2,\); expected \(3,\) = \(batch,\)"),
        (dict(seq_lengths=LENGTHS.astype(jnp.float32)), TypeError, r"seq_lengths has dtype float32; expected int"),
        (
            dict(seq_lengths=jnp.array([5, 6, 1], jnp.int32)),
            ValueError,
            r"seq_lengths\[1\] is 6; every length must "
            r"be in \[0, 5\]",
        ),
        (dict(seq_lengths=[5, 2, 1.5]), TypeError, r"seq_lengths has dtype float64; expected integers"),
        (dict(input_size=4.0), TypeError, r"input_size must be an int, got float 4.0"),
        (dict(hidden_size=0), ValueError, r"hidden_size must be >= 1, got 0"),
        (dict(num_layers=True), TypeError, r"num_layers must be an int, got bool"),
        (dict(bidirectional="yes"), TypeError, r"bidirectional must be a bool, got str"),
        (dict(dropout=1.0), ValueError, r"dropout must be a rate in \[0, 1\), got 1.0"),
        (dict(dropout="0.1"), TypeError, r"dropout must be a float, got str"),
    ]
    for change, error, message in cases:
        with pytest.raises(error, match=message):
            compat.lstm(**(good | change))
    with pytest.raises(TypeError, match=r"num_layers must be an int, got a traced value \(mark it static"):
        jax.jit(lambda n: compat.lstm(**(good | dict(num_layers=n))))(2)
    with pytest.raises(ValueError, match=r"weights has shape \(3,\); expected \(1536,\)"):
        compat.unpack_lstm_weights(jnp.zeros(3), I, H, 2, True)
