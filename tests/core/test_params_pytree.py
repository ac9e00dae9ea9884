"""RNNParams: a pytree with the buffer as its only child and the config as static aux data."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from strict_promotion import OPTAX_ADAM, peer_promotion

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.params import RNNParams

CONFIG = RNNConfig("gru", num_layers=2, num_units=3, input_size=2, direction="bidirectional")


def test_flatten_unflatten_and_views():
    params = RNNParams.init(jax.random.key(0), CONFIG)
    np.testing.assert_array_equal(params.buffer, layout.init_params(jax.random.key(0), CONFIG))
    leaves, treedef = jax.tree_util.tree_flatten(params)
    assert len(leaves) == 1 and leaves[0] is params.buffer
    ((path, _),) = jax.tree_util.tree_flatten_with_path(params)[0]
    assert jax.tree_util.keystr(path) == ".buffer"
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    assert isinstance(again, RNNParams) and again.config == CONFIG
    # a different config is a different tree structure
    other = RNNParams.init(jax.random.key(0), RNNConfig("gru", 2, 3, 2, direction="bidirectional", dropout=0.5))
    assert jax.tree_util.tree_structure(other) != treedef

    weights, biases = params.to_canonical()
    ref_w, ref_b = layout.params_to_canonical(params.buffer, CONFIG)
    for a, b in zip(weights + biases, ref_w + ref_b, strict=True):
        np.testing.assert_array_equal(a, b)
    tree = params.to_tree()
    np.testing.assert_array_equal(tree["layer_1"]["backward"]["w_input"]["z"], ref_w[-5])  # z input, layer 1 bwd
    for rebuilt in (RNNParams.from_tree(tree, CONFIG), RNNParams.from_canonical(weights, biases, CONFIG)):
        np.testing.assert_array_equal(rebuilt.buffer, params.buffer)


def test_construction_checks_shape_dtype_and_config():
    with pytest.raises(ValueError, match=r"buffer has shape \(5,\); expected \(\d+,\)"):
        RNNParams(jnp.zeros(5), CONFIG)
    with pytest.raises(TypeError, match="buffer has dtype float16; expected float32"):
        RNNParams(jnp.zeros(layout.params_size(CONFIG), jnp.float16), CONFIG)
    with pytest.raises(TypeError, match="config must be an RNNConfig"):
        RNNParams(jnp.zeros(3), {"mode": "gru"})
    params = RNNParams.init(jax.random.key(0), CONFIG)
    with pytest.raises(AttributeError, match="immutable"):
        params.buffer = None
    abstract = jax.eval_shape(lambda: params)
    assert isinstance(abstract, RNNParams) and isinstance(abstract.buffer, jax.ShapeDtypeStruct)
    assert abstract.buffer.shape == (layout.params_size(CONFIG),)


def test_adam_state_mirrors_params_and_jit_step_matches_manual_adam():
    params = {"rnn": RNNParams.init(jax.random.key(1), CONFIG), "scale": jnp.float32(2.0)}
    opt = optax.adam(0.1)
    state = opt.init(params)
    mu = state[0].mu
    assert isinstance(mu["rnn"], RNNParams) and mu["rnn"].config == CONFIG

    def loss(p):
        return p["scale"] * jnp.sum(p["rnn"].buffer ** 2)

    @jax.jit
    def step(p, s):
        grads = jax.grad(loss)(p)
        with peer_promotion(OPTAX_ADAM):
            updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s

    new, state = step(params, state)
    assert isinstance(new["rnn"], RNNParams)
    # Adam's first step moves every parameter by -lr * sign(grad) (up to eps).
    expected = params["rnn"].buffer - 0.1 * jnp.sign(2.0 * 2.0 * params["rnn"].buffer)
    np.testing.assert_allclose(new["rnn"].buffer, expected, atol=1e-6)
    np.testing.assert_allclose(state[0].mu["rnn"].buffer, 0.1 * 4.0 * params["rnn"].buffer, rtol=1e-6)


def test_pickles_with_its_config():
    """Results of multi-process workers, multiprocessing and cloudpickle'd closures carry RNNParams as pickles."""
    import pickle

    params = RNNParams(np.arange(layout.params_size(CONFIG), dtype=np.float32), CONFIG)
    again = pickle.loads(pickle.dumps(params))
    assert isinstance(again, RNNParams) and again.config == CONFIG
    np.testing.assert_array_equal(again.buffer, params.buffer)
    abstract = pickle.loads(pickle.dumps(jax.eval_shape(lambda: params)))
    assert abstract.buffer == jax.ShapeDtypeStruct(params.shape, params.dtype)
