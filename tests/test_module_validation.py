"""Bad inputs to the Flax modules are ValueError/TypeError naming the argument, what was expected and what came."""

import re

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jax_cudnn_rnn.flax import LSTM, RNN
from jax_cudnn_rnn.nnx import RNN as NNXRNN

B, T, I, H = 2, 5, 3, 4


@pytest.fixture(scope="module")
def lstm():
    module = LSTM(num_units=H, num_layers=2)
    variables = module.init(jax.random.key(0), jnp.ones((B, T, I)))
    return module, variables


def test_wrong_rank(lstm):
    module, variables = lstm
    with pytest.raises(ValueError, match=re.escape("x has shape (5, 3); expected rank 3 (batch, time, features)")):
        module.apply(variables, jnp.ones((T, I)))


def test_feature_size_differs_from_init(lstm):
    """Only the cause, not two whole RNNConfigs (the issue's case)."""
    module, variables = lstm
    with pytest.raises(ValueError) as error:
        module.apply(variables, jnp.ones((B, T, 7)))
    assert str(error.value) == "x has 7 features (its last axis) but the module's parameters were made for input_size=3"


def test_other_module_settings_name_only_the_differing_fields(lstm):
    _, variables = lstm
    with pytest.raises(ValueError) as error:
        LSTM(num_units=H, num_layers=2, direction="bidirectional").apply(variables, jnp.ones((B, T, I)))
    assert str(error.value) == ("rnn_params does not match this module: the parameters have direction="
                                "'unidirectional' (module: 'bidirectional')")


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


def test_initial_carry_wrong_shape(lstm):
    module, variables = lstm
    h0 = jnp.zeros((1, B, H))
    with pytest.raises(ValueError, match=re.escape("h0 has shape (1, 2, 4); expected (2, 2, 4)")):
        module.apply(variables, jnp.ones((B, T, I)), initial_carry=(h0, jnp.zeros((2, B, H))))


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


def test_nnx_wrong_feature_size():
    model = NNXRNN(in_features=I, mode="gru", num_units=H, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=re.escape("x has shape (2, 5, 6); expected its last axis to be 3")):
        model(jnp.ones((B, T, 6)))
