"""Every frontend under the settings a user's process may set, beside the strict promotion every test here runs under
(tests/strict_promotion.py): ``jax_enable_x64`` (a float32 model stays float32; the rest of the suite runs without it,
so the promotion it could cause is checked here), jitted forward and gradients traced, compiled and run under
``jax.transfer_guard("disallow")`` with the inputs already on the device (issue 37 item 4). The Flax linen and NNX
modules, the Equinox modules, the seed-style classes, the ``jax.experimental.rnn`` drop-in and the Keras layers (whose
own build, Keras's Orthogonal initializer, is the one call exempted: tests/frontends/test_keras.py says why). Values
are the other frontend tests' subject; here each result is checked finite and float32, and not all zero."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from strict_promotion import enable_x64, peer_promotion
from support import import_or_skip

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import compat

B, T, I, H = 3, 5, 4, 6
X = np.random.default_rng(0).standard_normal((B, T, I)).astype(np.float32)
LENGTHS = np.array([5, 2, 0], np.int32)  # ragged, with a full and an empty sequence


def _guarded(function, *arrays):
    """``function`` (jitted) traced, compiled and run twice under a transfer guard that refuses every transfer, on
    ``arrays`` with the NumPy ones put on the device first (models, whose arrays are there already, as they are);
    returns its last result's floating leaves after checking that each is float32 and finite and that not all are
    zero. (jax_debug_nans is rnn()'s test: tests/core/test_strict_config.py.)"""
    arrays = [jax.device_put(a) if isinstance(a, np.ndarray) else a for a in arrays]
    with jax.transfer_guard("disallow"):
        for _ in range(2):
            result = jax.block_until_ready(function(*arrays))
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(result) if jnp.issubdtype(leaf.dtype, jnp.floating)]
    assert leaves
    for leaf in leaves:
        assert leaf.dtype == np.float32 and np.all(np.isfinite(leaf)), leaf.dtype
    assert any(np.any(leaf != 0) for leaf in leaves)
    return leaves


def test_flax_linen():
    from jax_cudnn_rnn import flax as jcr_flax

    with enable_x64():
        module = jcr_flax.LSTM(num_units=H, num_layers=2, direction="bidirectional")
        variables = module.init(jax.random.key(0), jnp.asarray(X))
        loss = lambda v, x, lengths: jnp.sum(module.apply(v, x, seq_lengths=lengths))  # noqa: E731
        _guarded(jax.jit(jax.value_and_grad(loss)), variables, X, LENGTHS)


def test_flax_nnx():
    nnx = import_or_skip("flax.nnx")
    from jax_cudnn_rnn import nnx as jcr_nnx

    with enable_x64():
        model = jcr_nnx.GRU(I, H, num_layers=2, direction="bidirectional", rngs=nnx.Rngs(0))
        loss = lambda m, x, lengths: jnp.sum(m(x, seq_lengths=lengths))  # noqa: E731
        _guarded(nnx.jit(nnx.value_and_grad(loss)), model, X, LENGTHS)


def test_equinox():
    eqx = import_or_skip("equinox")
    from jax_cudnn_rnn import equinox as jcr_eqx

    with enable_x64():
        model = jcr_eqx.LSTM(I, H, num_layers=2, bidirectional=True, key=jax.random.key(1))

        def loss(m, x, lengths):
            return jnp.sum(jax.vmap(lambda x, length: m(x, seq_length=length)[0])(x, lengths))

        _guarded(eqx.filter_jit(eqx.filter_value_and_grad(loss)), model, X, LENGTHS)


@pytest.mark.parametrize("model_class", [jcr.CudnnLSTM, jcr.CudnnGRU, jcr.CudnnRNNTanh, jcr.CudnnRNNRelu])
def test_seed_classes(model_class):
    with enable_x64():
        model = model_class(num_layers=2, num_units=H, input_size=I, direction="bidirectional", dropout=0.25)
        params = model.init_params(jax.random.key(2))
        states = np.zeros(model.config.state_shape(B), np.float32)
        lstm = model.rnn_mode == "lstm"

        def loss(params, x, h0, lengths, key):
            y = model(x, h0, *((h0,) if lstm else ()), params, seq_lengths=lengths, dropout_key=key)[0]
            return jnp.sum(y)

        _guarded(jax.jit(jax.value_and_grad(loss)), params, np.swapaxes(X, 0, 1), states, LENGTHS, jax.random.key(3))


def test_jax_experimental_rnn_drop_in():
    with enable_x64():
        weights = compat.init_lstm_weight(jax.random.key(4), I, H, 2, True)
        states = np.zeros((4, B, H), np.float32)

        def loss(weights, x, h_0, c_0, lengths):
            y, h_n, c_n = compat.lstm(x, h_0, c_0, weights, lengths, I, H, 2, 0.0, True)
            return jnp.sum(y) + jnp.sum(h_n) + jnp.sum(c_n)

        _guarded(jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3))), weights, X, states, states, LENGTHS)


@pytest.mark.parametrize("layer_name", ["LSTM", "GRU", "SimpleRNN"])
def test_keras(layer_name):
    os.environ["KERAS_BACKEND"] = "jax"  # as tests/frontends/test_keras.py: Keras reads it once, at its first import
    keras = import_or_skip("keras")
    if keras.backend.backend() != "jax":
        pytest.skip(f"keras was imported with backend {keras.backend.backend()!r}")
    from jax_cudnn_rnn import keras as jcr_keras

    with enable_x64():
        layer = getattr(jcr_keras, layer_name)(H, return_sequences=True, return_state=True, go_backwards=True)
        with peer_promotion("Keras's Orthogonal initializer (the recurrent kernel's) multiplies [n, n] by [n]"):
            layer.build((B, None, I))
        mask = np.arange(T)[None] < np.maximum(LENGTHS, 1)[:, None]
        _guarded(jax.jit(lambda x, mask: layer(x, mask=mask)), X, mask)
