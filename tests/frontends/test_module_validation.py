"""Bad inputs to the Flax modules are ValueError/TypeError naming the argument as the caller passed it (``x``,
``initial_carry[0]``, ``seq_lengths``, ``resets``: never ``rnn()``'s h0/c0), what was expected and what came."""

import re

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jax_cudnn_rnn.flax import LSTM, RNN
from jax_cudnn_rnn.nnx import LSTM as NNXLSTM
from jax_cudnn_rnn.nnx import RNN as NNXRNN

B, T, I, H = 2, 5, 3, 4


@pytest.fixture(scope="module")
def lstm():
    module = LSTM(num_units=H, num_layers=2)
    variables = module.init(jax.random.key(0), jnp.ones((B, T, I)))
    return module, variables


def test_wrong_rank(lstm):
    """nn.RNN's ranks: [*batch, time, features], or one sequence [time, features]; less is an error."""
    module, variables = lstm
    with pytest.raises(ValueError, match=re.escape("x has shape (3,); expected (*batch, time, features), or (time, ")):
        module.apply(variables, jnp.ones((I,)))


def test_feature_size_differs_from_init(lstm):
    """Only the cause, not two whole RNNConfigs (the issue's case)."""
    module, variables = lstm
    with pytest.raises(ValueError) as error:  # noqa: PT011 - the assert below checks the whole message
        module.apply(variables, jnp.ones((B, T, 7)))
    assert str(error.value) == "x has 7 features (its last axis) but the module's parameters were made for input_size=3"


def test_other_module_settings_name_only_the_differing_fields(lstm):
    _, variables = lstm
    with pytest.raises(ValueError) as error:  # noqa: PT011 - the assert below checks the whole message
        LSTM(num_units=H, num_layers=2, direction="bidirectional").apply(variables, jnp.ones((B, T, I)))
    assert str(error.value) == (
        "rnn_params does not match this module: the parameters have direction="
        "'unidirectional' (module: 'bidirectional')"
    )


@pytest.mark.parametrize("lengths", [[5.0, 2.7], np.array([5, 2], np.float32)], ids=["list", "float32"])
def test_float_seq_lengths_are_rejected_like_rnn_does(lstm, lengths):
    """They were truncated silently (2.7 -> 2) while rnn() rejects them."""
    module, variables = lstm
    with pytest.raises(TypeError, match=r"seq_lengths has dtype float(32|64); expected integers"):
        module.apply(variables, jnp.ones((B, T, I)), seq_lengths=lengths)
    model = NNXRNN(in_features=I, mode="gru", num_units=H, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="seq_lengths has dtype float"):
        model(jnp.ones((B, T, I)), seq_lengths=lengths)


def test_integer_seq_lengths_of_any_width_are_accepted(lstm):
    module, variables = lstm
    y64 = module.apply(variables, jnp.ones((B, T, I)), seq_lengths=np.array([5, 2], np.int64))
    y32 = module.apply(variables, jnp.ones((B, T, I)), seq_lengths=jnp.array([5, 2], jnp.int32))
    np.testing.assert_array_equal(np.asarray(y64), np.asarray(y32))


def test_seq_lengths_out_of_range(lstm):
    module, variables = lstm
    with pytest.raises(ValueError, match=re.escape("seq_lengths[1] is 6; every length must be in [0, 5]")):
        module.apply(variables, jnp.ones((B, T, I)), seq_lengths=jnp.array([5, 6], jnp.int32))


def test_seq_lengths_wrong_shape(lstm):
    module, variables = lstm
    with pytest.raises(ValueError, match=re.escape("seq_lengths has shape (3,); expected (2,) = (batch,)")):
        module.apply(variables, jnp.ones((B, T, I)), seq_lengths=jnp.array([1, 2, 3], jnp.int32))


STATE = "(num_layers*num_directions, batch, num_units)"


@pytest.fixture(scope="module")
def gru():
    module = RNN(mode="gru", num_units=H, num_layers=2)
    return module, module.init(jax.random.key(0), jnp.ones((B, T, I)))


@pytest.fixture(scope="module")
def nnx_lstm():
    return NNXRNN(in_features=I, num_units=H, num_layers=2, rngs=nnx.Rngs(0))


def _apply(kind, lstm, gru, nnx_lstm):
    """A call of the module ``kind`` ("linen lstm", "linen gru", "nnx lstm") as (x, **kwargs) -> y."""
    if kind == "linen lstm":
        return lambda x, **kw: lstm[0].apply(lstm[1], x, **kw)
    if kind == "linen gru":
        return lambda x, **kw: gru[0].apply(gru[1], x, **kw)
    return nnx_lstm


H0, C0 = jnp.zeros((2, B, H)), jnp.zeros((2, B, H))
LSTM_CARRY = "mode 'lstm' carries Flax's pair (c, h)"
BAD_CARRIES = [  # (module, initial_carry, error, message): the case and its relatives; an LSTM's is (c, h)
    ("linen lstm", (C0[:1], H0), ValueError, f"initial_carry[0] (c) has shape (1, 2, 4); expected (2, 2, 4) = {STATE}"),
    (
        "linen lstm",
        (C0, H0[:, :1]),
        ValueError,
        f"initial_carry[1] (h) has shape (2, 1, 4); expected (2, 2, 4) = {STATE}",
    ),
    (
        "nnx lstm",
        (C0, H0[..., :3]),
        ValueError,
        f"initial_carry[1] (h) has shape (2, 2, 3); expected (2, 2, 4) = {STATE}",
    ),
    ("linen gru", H0[..., :3], ValueError, f"initial_carry has shape (2, 2, 3); expected (2, 2, 4) = {STATE}"),
    ("linen lstm", H0, TypeError, f"initial_carry is an array of shape (2, 2, 4); {LSTM_CARRY}"),
    ("nnx lstm", (H0,), TypeError, f"initial_carry is a tuple of 1; {LSTM_CARRY}"),
    ("linen gru", (H0, C0), TypeError, "initial_carry is a tuple of 2; mode 'gru' carries h alone"),
    (
        "linen lstm",
        (None, H0),
        ValueError,
        "initial_carry[0] (c) is None; mode 'lstm' needs an initial cell state of shape (2, 2, 4)",
    ),
    ("nnx lstm", (C0, [[0.0]]), TypeError, "initial_carry[1] (h) must be an array, got list"),
    ("linen lstm", (C0[0], H0[0]), ValueError, f"initial_carry[1] (h) has shape (2, 4); expected (2, 2, 4) = {STATE}"),
]


@pytest.mark.parametrize(
    "kind, carry, error, message",
    BAD_CARRIES,
    ids=[f"{kind}-{message.split(';')[0]}" for kind, _, _, message in BAD_CARRIES],
)
def test_a_bad_initial_carry_is_named_as_passed(lstm, gru, nnx_lstm, kind, carry, error, message):
    with pytest.raises(error, match=re.escape(message)):
        _apply(kind, lstm, gru, nnx_lstm)(jnp.ones((B, T, I)), initial_carry=carry)


BAD_INPUTS = [  # (module, x, kwargs, error, message)
    ("linen lstm", [[[1.0] * I] * T] * B, {}, TypeError, "x must be an array, got list"),
    ("nnx lstm", [[[1.0] * I] * T] * B, {}, TypeError, "x must be an array, got list"),
    ("linen lstm", jnp.ones(()), {}, ValueError, "x has shape (); expected (*batch, time, features)"),
    ("nnx lstm", jnp.ones((I,)), {}, ValueError, "x has shape (3,); expected (*batch, time, features)"),
    ("nnx lstm", jnp.ones((T, 2)), {}, ValueError, "x has shape (5, 2); expected (T, 3): its last axis must be"),
    (
        "nnx lstm",
        jnp.ones((T, I)),
        {"seq_lengths": jnp.array([1, 2])},
        ValueError,
        "seq_lengths has shape (2,); expected () (one sequence's length; x is one sequence [time, features]",
    ),
    ("nnx lstm", jnp.ones((B, 0, I)), {}, ValueError, "x has shape (2, 0, 3); time and batch must be at least 1"),
    # x given time-major to a batch-major module: x is blamed, not the carry that matches the batch
    (
        "linen lstm",
        jnp.ones((T, B, I)),
        {"initial_carry": (C0, H0)},
        ValueError,
        "x has shape (5, 2, 3) and initial_carry[1] (h) (2, 2, 4): initial_carry[1] (h)'s batch is 2, x's second axis. "
        "The "
        "module takes batch-major x [B, T, features]; x looks time-major [T, B, features]: pass jnp.swapaxes(x, 0, 1), "
        "or build the module with time_major=True",
    ),
    (
        "nnx lstm",
        jnp.ones((B, T, I)),
        {"seq_lengths": jnp.array([1, 2, 3])},
        ValueError,
        "seq_lengths has shape (3,); expected (2,) = (batch,)",
    ),
    (
        "nnx lstm",
        jnp.ones((B, T, I)),
        {"seq_lengths": jnp.array([1, 9])},
        ValueError,
        "seq_lengths[1] is 9; every length must be in [0, 5] = [0, time]",
    ),
    (
        "linen gru",
        jnp.ones((B, T, I)),
        {"resets": jnp.zeros((T, B), bool)},
        ValueError,
        "resets has shape (5, 2); expected (2, 5) = (batch, time), the first two axes of x",
    ),
    (
        "nnx lstm",
        jnp.ones((B, T, I)),
        {"resets": jnp.full((B, T), 0.5, jnp.float32)},
        ValueError,
        "resets[0, 0] is 0.5; expected a flag, 0 or 1 (or bool)",
    ),
    (
        "nnx lstm",
        jnp.ones((B, T, I)),
        {"resets": jnp.zeros((B, T), jnp.complex64)},
        TypeError,
        "resets has dtype complex64; expected bool, or integer or float flags 0 and 1",
    ),
    (
        "linen lstm",
        jnp.ones((3, B, T, I)),
        {"seq_lengths": jnp.ones((B, 3), jnp.int32)},
        ValueError,
        "seq_lengths has shape (2, 3); expected (*batch,) with the batch axes (3, 2) of x",
    ),
]


@pytest.mark.parametrize(
    "kind, x, kwargs, error, message",
    BAD_INPUTS,
    ids=[f"{kind}-{message.split(';')[0]}" for kind, _, _, _, message in BAD_INPUTS],
)
def test_a_bad_input_is_named_as_passed(lstm, gru, nnx_lstm, kind, x, kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        _apply(kind, lstm, gru, nnx_lstm)(x, **kwargs)


def test_time_major_module_blames_a_batch_major_x():
    module = LSTM(num_units=H, time_major=True)
    variables = module.init(jax.random.key(0), jnp.ones((T, B, I)))
    carry = (jnp.zeros((1, B, H)), jnp.zeros((1, B, H)))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "x's first axis. The module takes time-major x [T, B, features]; x "
            "looks batch-major [B, T, features]: pass jnp.swapaxes(x, 0, 1), or "
            "build the module with time_major=False"
        ),
    ):
        module.apply(variables, jnp.ones((B, T, I)), initial_carry=carry)


def test_valid_calls_with_every_argument_still_run(lstm, gru, nnx_lstm):
    """What the checks above accept: a full carry, integer lengths of any width, lists for lengths and resets, and an
    x or carry of another float dtype (cast to the module's dtype, as Flax modules do)."""
    x = jax.random.normal(jax.random.key(3), (B, T, I))
    carry = (jnp.full((2, B, H), 0.1), jnp.full((2, B, H), -0.2))
    lengths, resets = [T, 2], [[False] * T, [False, False, True, False, False]]
    for kind in ("linen lstm", "nnx lstm"):
        new_carry, y = _apply(kind, lstm, gru, nnx_lstm)(
            x.astype(jnp.float16),
            initial_carry=carry,
            seq_lengths=np.array(lengths, np.int64),
            resets=resets,
            return_carry=True,
        )
        assert y.shape == (B, T, H) and y.dtype == jnp.float32 and new_carry[1].shape == (2, B, H)
        assert np.all(np.isfinite(np.asarray(y))) and np.all(np.asarray(y[1, 2:]) == 0)
    carry, y = _apply("linen gru", lstm, gru, nnx_lstm)(
        x, initial_carry=jnp.zeros((2, B, H), jnp.bfloat16), return_carry=True
    )
    assert carry.shape == (2, B, H) and y.shape == (B, T, H)


def test_unknown_mode():
    with pytest.raises(ValueError, match="mode is 'lstmp'; expected one of"):
        RNN(mode="lstmp", num_units=H).init(jax.random.key(0), jnp.ones((B, T, I)))


def test_skip_input_needs_matching_sizes():
    with pytest.raises(ValueError, match="input_mode 'skip_input' needs input_size == num_units, got input_size 3"):
        RNN(mode="gru", num_units=H, input_mode="skip_input").init(jax.random.key(0), jnp.ones((B, T, I)))


def test_dropout_without_rng_stream_names_it():
    module = LSTM(num_units=H, num_layers=2, dropout=0.5)
    variables = module.init(jax.random.key(0), jnp.ones((B, T, I)))
    with pytest.raises(flax.errors.InvalidRngError, match="dropout"):
        module.apply(variables, jnp.ones((B, T, I)), deterministic=False)


def test_nnx_rngs_name_what_they_must_be():
    """nnx's own layers fail on such rngs with an AttributeError from inside (nnx.Linear(3, 4, rngs=0)); ours say what
    rngs must be, and a missing dropout stream (nnx.Dropout: a KeyError at construction) is a ValueError at the call,
    where the call's own rngs may still supply it."""
    with pytest.raises(TypeError, match=r"LSTM needs rngs=nnx.Rngs\(\.\.\.\) to initialise its parameters, got int"):
        NNXLSTM(I, H, rngs=0)
    model = NNXLSTM(I, H, num_layers=2, dropout=0.5, rngs=nnx.Rngs(params=0))
    x = jnp.ones((B, T, I))
    with pytest.raises(
        ValueError, match=r"dropout applies \(deterministic=False\) but the module has no rngs\.dropout"
    ):
        model(x)
    with pytest.raises(TypeError, match=r"rngs must be an nnx\.Rngs, an nnx\.RngStream or a key .*, got int"):
        model(x, rngs=3)
    by_rngs, by_key = model(x, rngs=nnx.Rngs(dropout=1)), model(x, rngs=jax.random.key(1))
    assert by_rngs.shape == by_key.shape == (B, T, H)
    assert not np.allclose(by_key, model(x, deterministic=True))  # the masks applied


def test_nnx_wrong_feature_size():
    model = NNXRNN(in_features=I, mode="gru", num_units=H, rngs=nnx.Rngs(0))
    with pytest.raises(
        ValueError, match=re.escape("x has shape (2, 5, 6); expected (B, T, 3): its last axis must be in_features")
    ):
        model(jnp.ones((B, T, 6)))
