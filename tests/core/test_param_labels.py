"""``params.param_labels`` / ``bias_mask`` name every entry of the opaque buffer, checked against the canonical tree of
a buffer whose entries are their own indices, and drive optax (weight decay on the matrices alone, through
``optax.multi_transform`` and ``optax.masked`` in a tree with other parameters) to the update NumPy computes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.params import bias_mask, param_labels

CONFIGS = [
    jcr.RNNConfig("lstm", 2, 4, 3, direction="bidirectional"),
    jcr.RNNConfig("gru", 2, 4, 4, input_mode="skip_input", bias_mode="single_recurrent"),
    jcr.RNNConfig("lstm", 2, 5, 3, proj_size=2, bias_mode="single_input"),
    jcr.RNNConfig("rnn_relu", 1, 3, 2, bias_mode="none"),
]


def index_tree(config):
    """The canonical named tree of a buffer holding 0, 1, 2, ...: each tensor lists the buffer entries it occupies."""
    indices = jnp.arange(jcr.params_size(config), dtype=jnp.float32)
    flat = {}

    def walk(node, prefix):
        for key, child in node.items():
            path = f"{prefix}/{key}" if prefix else key
            if isinstance(child, dict):
                walk(child, path)
            else:
                flat[path] = np.asarray(child).astype(np.int64).ravel()

    walk(jcr.params_to_tree(indices, config), "")
    return flat


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.mode}-{c.bias_mode}")
def test_labels_and_bias_mask_match_the_canonical_tree(config):
    labels, mask = param_labels(config), bias_mask(jcr.RNNParams.init(jax.random.key(0), config))
    assert labels.shape == mask.shape == (jcr.params_size(config),) and mask.dtype == bool
    covered = np.zeros(labels.shape, bool)
    for name, entries in index_tree(config).items():
        assert set(labels[entries]) == {name}
        assert mask[entries].all() == ("/b_" in name) and mask[entries].any() == ("/b_" in name)
        covered[entries] = True
    assert covered.all()
    assert mask.any() == (config.bias_mode != "none")


def test_labels_refuse_what_is_not_a_config():
    with pytest.raises(TypeError, match="expected an RNNConfig or an RNNParams, got ndarray"):
        param_labels(np.zeros(3))


def test_weight_decay_on_the_matrices_alone_through_optax():
    """SGD with weight decay on every matrix (the RNN's and the head's kernel) and on no bias, as multi_transform and
    as masked transformations; the expected update is NumPy's, with the mask read off the canonical tree."""
    config = CONFIGS[0]
    rnn = jcr.RNNParams.init(jax.random.key(0), config)
    params = {"rnn": rnn, "head": {"kernel": jnp.full((3, 2), 0.5), "bias": jnp.full((2,), 0.25)}}
    grads = jax.tree_util.tree_map(lambda p: 0.1 * jnp.ones_like(p), params)
    lr, wd = 0.1, 0.01

    decay_rnn = jnp.asarray(wd * ~bias_mask(config), config.dtype)  # elementwise: optax's masks are per leaf
    by_label = optax.multi_transform(
        {
            "rnn": optax.chain(optax.add_decayed_weights(decay_rnn), optax.sgd(lr)),
            "decay": optax.chain(optax.add_decayed_weights(wd), optax.sgd(lr)),
            "plain": optax.sgd(lr),
        },
        {"rnn": "rnn", "head": {"kernel": "decay", "bias": "plain"}},
    )
    masked = optax.chain(
        optax.masked(optax.add_decayed_weights(decay_rnn), {"rnn": True, "head": {"kernel": False, "bias": False}}),
        optax.masked(optax.add_decayed_weights(wd), {"rnn": False, "head": {"kernel": True, "bias": False}}),
        optax.sgd(lr),
    )

    is_matrix = np.ones(jcr.params_size(config), bool)
    for name, entries in index_tree(config).items():
        is_matrix[entries] = "/w_" in name
    buffer = np.asarray(rnn.buffer, np.float64)
    want_rnn = buffer - lr * (0.1 + wd * buffer * is_matrix)
    want_kernel, want_bias = 0.5 - lr * (0.1 + wd * 0.5), 0.25 - lr * 0.1
    for tx in (by_label, masked):
        updates, _ = tx.update(grads, tx.init(params), params)
        new = optax.apply_updates(params, updates)
        assert isinstance(new["rnn"], jcr.RNNParams) and new["rnn"].config == config
        np.testing.assert_allclose(new["rnn"].buffer, want_rnn, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(new["head"]["kernel"], want_kernel, rtol=1e-6)
        np.testing.assert_allclose(new["head"]["bias"], want_bias, rtol=1e-6)
        assert not np.allclose(want_rnn, buffer - lr * 0.1)  # the decay acted on the matrices
