"""Linen and NNX modules: values and gradients equal ops.rnn on the same buffer; a jitted optax step trains."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from strict_promotion import OPTAX_ADAM, peer_promotion

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import flax as jcr_flax
from jax_cudnn_rnn import nnx as jcr_nnx
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.ops import rnn
from jax_cudnn_rnn.params import RNNParams

B, T, I, H = 2, 5, 3, 4


def _trained(grads_tree, parameters):
    """{canonical name: gradient} of the tensors a module trains (its named tree's), for comparing with the gradient
    of the whole buffer, of which the held slots are not parameters."""
    return {name: np.asarray(v) for name, v in jcr.layout.flatten_tree(grads_tree).items() if name in parameters.shapes}


def _buffer_grads(buffer_grad, parameters):
    tree = jcr.params_to_tree(buffer_grad, parameters.config)
    return {name: np.asarray(v) for name, v in jcr.layout.flatten_tree(tree).items() if name in parameters.shapes}


def _reference(buffer, config, x, lengths=None):
    """ops.rnn with the naive reference implementation, batch-major in and out."""
    xs = jnp.swapaxes(x, 0, 1)
    h0 = jnp.zeros(config.state_shape(B))
    c0 = jnp.zeros(config.cell_shape(B)) if config.has_cell_state else None
    y, h_n, c_n = rnn(buffer, xs, h0, c0, config, seq_lengths=lengths, implementation="reference")
    return jnp.swapaxes(y, 0, 1), h_n, c_n


@pytest.mark.parametrize("mode,direction", [("lstm", "bidirectional"), ("gru", "unidirectional")])
def test_linen_values_and_gradients_match_rnn(mode, direction):
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    lengths = jnp.array([T, 3], jnp.int32)
    module = jcr_flax.RNN(mode=mode, num_units=H, num_layers=2, direction=direction)
    variables = module.init(jax.random.key(1), x)
    params = module.packed(variables)
    # Flax's cells' biases on the double-bias space (the LSTM's input biases held at zero, the GRU's r's and z's
    # recurrent ones), the space cuDNN's persistent algorithms run
    config = RNNConfig(mode, 2, H, I, direction=direction)
    assert isinstance(params, RNNParams) and params.config == config

    carry, y = module.apply(variables, x, lengths, return_carry=True)
    y_ref, h_ref, _ = _reference(params.buffer, config, x, lengths)
    np.testing.assert_allclose(y, y_ref, atol=1e-5)
    np.testing.assert_allclose(carry[1] if mode == "lstm" else carry, h_ref, atol=1e-5)  # Flax's (c, h)

    def loss_module(v):
        return jnp.sum(jnp.sin(module.apply(v, x, lengths)))

    def loss_reference(buffer):
        return jnp.sum(jnp.sin(_reference(buffer, config, x, lengths)[0]))

    grads = jax.grad(loss_module)(variables)["params"]["rnn_params"]  # one gradient per named tensor
    parameters = module.parameters(I)
    got, want = _trained(grads, parameters), _buffer_grads(jax.grad(loss_reference)(params.buffer), parameters)
    assert set(got) == set(want) == set(parameters.shapes)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)


def test_linen_dropout_uses_the_dropout_stream_and_bf16_compute():
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    module = jcr_flax.LSTM(num_units=H, num_layers=2, dropout=0.5)
    variables = module.init(jax.random.key(1), x)
    buffer = module.packed(variables).buffer
    config = module.rnn_config(I)
    y = module.apply(variables, x, deterministic=False, rngs={"dropout": jax.random.key(7)})
    y_det = module.apply(variables, x)
    np.testing.assert_allclose(y_det, _reference(buffer, config, x)[0], atol=1e-5)
    assert not np.allclose(y, y_det)
    with pytest.raises(Exception, match="dropout"):
        module.apply(variables, x, deterministic=False)  # no 'dropout' rng given
    # computation in bfloat16 over a float32 buffer
    half = jcr_flax.LSTM(num_units=H, num_layers=2, dtype=jnp.bfloat16)
    y_half = half.apply(variables, x)
    assert y_half.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(y_half, np.float32), y_det, atol=3e-2)


def test_linen_jitted_adam_step_reduces_loss():
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    target = jnp.tanh(jnp.cumsum(x, axis=1))[..., :1]
    module = jcr_flax.GRU(num_units=H, num_layers=1)
    params = module.init(jax.random.key(1), x)["params"]
    opt = optax.adam(3e-2)
    opt_state = opt.init(params)

    def loss_fn(p):
        return jnp.mean((module.apply({"params": p}, x)[..., :1] - target) ** 2)

    @jax.jit
    def step(p, s):
        loss, grads = jax.value_and_grad(loss_fn)(p)
        with peer_promotion(OPTAX_ADAM):
            updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    losses = []
    for _ in range(15):
        params, opt_state, loss = step(params, opt_state)
        losses.append(float(loss))
    assert jcr.layout.flatten_tree(params["rnn_params"]).keys() == module.parameters(I).shapes.keys()
    assert losses[-1] < 0.7 * losses[0], losses


def test_nnx_values_gradients_and_training_step():
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    model = jcr_nnx.LSTM(I, H, num_layers=2, direction="bidirectional", rngs=nnx.Rngs(0))
    config = RNNConfig("lstm", 2, H, I, direction="bidirectional")  # nnx.LSTMCell's biases, the input side held
    buffer = model.params.buffer
    np.testing.assert_allclose(model(x), _reference(buffer, config, x)[0], atol=1e-5)

    def loss_fn(m):
        return jnp.sum(jnp.sin(m(x)))

    grads = nnx.grad(loss_fn)(model)  # one gradient per canonical tensor, named as the parameters are
    grad_buffer = model.parameters.pack(nnx.to_pure_dict(grads)["rnn_params"])  # the held input biases: zero
    expected = jax.grad(lambda b: jnp.sum(jnp.sin(_reference(b, config, x)[0])))(buffer)
    expected = model.parameters.pack(model.parameters.from_buffer(expected))  # no gradient where held
    np.testing.assert_allclose(grad_buffer, expected, atol=1e-5)

    optimizer = nnx.Optimizer(model, optax.adam(3e-2), wrt=nnx.Param)

    @nnx.jit
    def step(m, opt):
        loss, g = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(m)
        with peer_promotion(OPTAX_ADAM):
            opt.update(m, g)
        return loss

    losses = [float(step(model, optimizer)) for _ in range(10)]
    assert losses[-1] < 0.7 * losses[0], losses
    assert isinstance(model.params, RNNParams) and model.params.config == config


OPTIONS = dict(proj_size=2, cell_clip=0.3, bias_mode="single_input")


def test_linen_projected_clipped_lstm_matches_rnn():
    x = 3.0 * jax.random.normal(jax.random.key(0), (B, T, I))  # large enough to hit the clip
    module = jcr_flax.LSTM(num_units=H, num_layers=2, direction="bidirectional", precision="float32", **OPTIONS)
    variables = module.init(jax.random.key(1), x)
    params = module.packed(variables)
    config = RNNConfig("lstm", 2, H, I, direction="bidirectional", **OPTIONS)
    assert params.config == config
    carry, y = module.apply(variables, x, return_carry=True)
    assert y.shape == (B, T, 2 * OPTIONS["proj_size"])
    y_ref, _, c_ref = _reference(params.buffer, config, x)
    np.testing.assert_allclose(y, y_ref, atol=1e-5)
    np.testing.assert_allclose(carry[0], c_ref, atol=1e-5)  # Flax's (c, h)
    assert np.max(np.abs(carry[0])) > OPTIONS["cell_clip"]  # the clip acted (c_n is kept unclipped, as in cuDNN)


def test_nnx_projected_clipped_lstm_matches_rnn():
    x = 3.0 * jax.random.normal(jax.random.key(0), (B, T, I))
    model = jcr_nnx.LSTM(I, H, num_layers=2, precision="tensorfloat32", rngs=nnx.Rngs(0), **OPTIONS)
    assert model.params.config == RNNConfig("lstm", 2, H, I, **OPTIONS)
    y = model(x)
    y_ref, _, _ = _reference(model.params.buffer, model.params.config, x)
    # TF32 is real on a GPU (10 mantissa bits: 1e-4 apart on an H200), a no-op on the CPU.
    np.testing.assert_allclose(y, y_ref, atol=1e-5 if jax.default_backend() == "cpu" else 1e-3)


def test_modules_pass_the_algorithm_to_rnn():
    """``algorithm`` reaches ``rnn``: a bad one is rejected by name, a good one runs (ignored by the xla path)."""
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    good = jcr_flax.LSTM(num_units=H, algorithm="autotune", implementation="xla")
    variables = good.init(jax.random.key(1), x)
    np.testing.assert_allclose(
        good.apply(variables, x), jcr_flax.LSTM(num_units=H, implementation="xla").apply(variables, x)
    )
    with pytest.raises(ValueError, match="algorithm is 'fastest'"):
        jcr_flax.LSTM(num_units=H, algorithm="fastest").apply(variables, x)
    with pytest.raises(ValueError, match="algorithm is 'fastest'"):
        jcr_nnx.LSTM(I, H, algorithm="fastest", rngs=nnx.Rngs(0))(x)


def _recurrent_dropout_expected(buffer, config, x, key):
    """rnn() on x [B, T, I] in training with ``key``: what a module with recurrent_dropout computes."""
    return jnp.swapaxes(
        rnn(buffer, jnp.swapaxes(x, 0, 1), *_zeros(config), config, is_training=True, dropout_key=key)[0], 0, 1
    )


def _zeros(config):
    h0 = jnp.zeros(config.state_shape(B), jnp.float32)
    return h0, (jnp.zeros(config.cell_shape(B), jnp.float32) if config.has_cell_state else None)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_linen_and_nnx_recurrent_dropout_is_rnns_with_the_dropout_rng(mode):
    """recurrent_dropout: nothing when deterministic (the module without it); in training, rnn() with the key the
    module draws from its 'dropout' stream (linen's make_rng, NNX's rngs.dropout()), the masks acting, and the same
    key giving the same result; a one-layer module needs the key too (recurrent dropout acts in every layer)."""
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    module = jcr_flax.RNN(H, mode=mode, recurrent_dropout=0.4)
    config = module.rnn_config(I)
    variables = module.init(jax.random.key(1), x)
    buffer = module.packed(variables).buffer
    plain = jcr_flax.RNN(H, mode=mode).apply(variables, x)
    np.testing.assert_allclose(module.apply(variables, x), plain, atol=0)
    got = module.apply(variables, x, deterministic=False, rngs={"dropout": jax.random.key(7)})
    again = module.apply(variables, x, deterministic=False, rngs={"dropout": jax.random.key(7)})
    np.testing.assert_array_equal(np.asarray(got), np.asarray(again))
    key = module.apply(variables, method=lambda m: m.make_rng("dropout"), rngs={"dropout": jax.random.key(7)})
    np.testing.assert_allclose(got, _recurrent_dropout_expected(buffer, config, x, key), atol=1e-6)
    assert not np.allclose(got, plain, atol=1e-3)
    with pytest.raises(Exception, match="dropout"):
        module.apply(variables, x, deterministic=False)  # no 'dropout' rng given

    model = (jcr_nnx.LSTM if mode == "lstm" else jcr_nnx.GRU)(I, H, recurrent_dropout=0.4, rngs=nnx.Rngs(0, dropout=5))
    config = model.config
    buffer = model.params.buffer
    quiet = model(x, deterministic=True)
    np.testing.assert_allclose(quiet, rnn(buffer, jnp.swapaxes(x, 0, 1), *_zeros(config), config)[0].swapaxes(0, 1))
    got = model(x, deterministic=False)
    key = nnx.Rngs(dropout=5).dropout()  # the stream's first key, as the module's draws it
    np.testing.assert_allclose(got, _recurrent_dropout_expected(buffer, config, x, key), atol=1e-6)
    assert not np.allclose(got, quiet, atol=1e-3)
