"""The linen modules' parameters as Flax users' idioms see them (issue 48): named weight matrices and biases, so the
``ndim > 1`` weight-decay mask, ``optax.multi_transform`` by path, per-tensor clipping, ``nn.tabulate`` and parameter
counts work as on Flax's own cells; Flax's carry ``(c, h)`` (and the cells' ``[B, H]``); linen checkpoints written
before, when the parameters were one ``RNNParams`` buffer, still load."""

from __future__ import annotations

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import checkpoint, interop
from jax_cudnn_rnn import flax as jcr_flax

B, T, I, H = 3, 6, 4, 5


class Model(nn.Module):
    """An encoder: our GRU, then a Dense head."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(2, name="head")(jcr_flax.GRU(H, num_layers=2, name="encoder")(x))


def _params():
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    return x, Model().init(jax.random.key(1), x)["params"]


def test_the_weight_decay_mask_by_ndim_decays_the_rnn_s_matrices_and_not_its_biases():
    _, params = _params()
    mask = jax.tree.map(lambda a: a.ndim > 1, params)
    decay = optax.add_decayed_weights(0.5, mask=mask)
    updates, _ = decay.update(jax.tree.map(jnp.zeros_like, params), decay.init(params), params)
    flat = dict(jax.tree_util.tree_flatten_with_path(updates)[0])
    originals = dict(jax.tree_util.tree_flatten_with_path(params)[0])
    rnn_matrices = [path for path in flat if "encoder" in jax.tree_util.keystr(path) and originals[path].ndim == 2]
    rnn_biases = [path for path in flat if "encoder" in jax.tree_util.keystr(path) and originals[path].ndim == 1]
    # layer_0/1 x (w_input, w_recurrent) x r, z, n; nn.GRUCell's biases: ir, iz, in on the input side, hn
    assert len(rnn_matrices) == 12 and len(rnn_biases) == 8
    for path in rnn_matrices:
        np.testing.assert_allclose(flat[path], 0.5 * originals[path])
    for path in rnn_biases:
        np.testing.assert_array_equal(flat[path], np.zeros_like(originals[path]))


def test_parameter_counts_and_tabulate_match_flax_s_cells():
    x = jnp.ones((B, T, I))
    for ours, theirs in [
        (jcr_flax.LSTM(H), nn.RNN(nn.LSTMCell(H))),
        (jcr_flax.GRU(H), nn.RNN(nn.GRUCell(H))),
        (jcr_flax.RNN(H, mode="rnn_tanh"), nn.RNN(nn.SimpleCell(H))),
    ]:
        ours_params = ours.init(jax.random.key(0), x)["params"]
        their_params = theirs.init(jax.random.key(0), x)["params"]
        count = sum(a.size for a in jax.tree.leaves(ours_params))
        assert count == sum(a.size for a in jax.tree.leaves(their_params))
        table = nn.tabulate(ours, jax.random.key(0), console_kwargs={"width": 200})(x)
        assert re.search(rf"Total Parameters: {count}\b", table), table
        assert "w_recurrent" in table


def test_multi_transform_by_path_and_per_tensor_clipping():
    x, params = _params()
    labels = jax.tree_util.tree_map_with_path(
        lambda path, _: "recurrent" if "w_recurrent" in jax.tree_util.keystr(path) else "rest", params
    )
    optimizer = optax.multi_transform({"recurrent": optax.sgd(0.1), "rest": optax.sgd(0.0)}, labels)
    grads = jax.grad(lambda p: jnp.sum(Model().apply({"params": p}, x) ** 2))(params)
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    for path, update in jax.tree_util.tree_flatten_with_path(updates)[0]:
        grad = dict(jax.tree_util.tree_flatten_with_path(grads)[0])[path]
        expected = -0.1 * grad if "w_recurrent" in jax.tree_util.keystr(path) else np.zeros_like(grad)
        np.testing.assert_allclose(update, expected, rtol=1e-6, atol=1e-7)

    # clip_by_block_rms clips each tensor on its own: every RNN tensor's update has RMS <= the threshold
    clipped, _ = optax.clip_by_block_rms(1e-3).update(grads, optax.EmptyState())
    encoder = clipped["encoder"]["rnn_params"]
    for path, leaf in jax.tree_util.tree_flatten_with_path(encoder)[0]:
        grad = dict(jax.tree_util.tree_flatten_with_path(grads["encoder"]["rnn_params"])[0])[path]
        rms = float(jnp.sqrt(jnp.mean(grad**2)))
        np.testing.assert_allclose(leaf, grad * min(1.0, 1e-3 / rms), rtol=1e-5, atol=1e-12)


def test_the_lstm_carry_is_flax_s_and_a_one_layer_module_takes_the_cells_carry():
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    theirs = nn.RNN(nn.LSTMCell(H), return_carry=True)
    their_params = theirs.init(jax.random.key(1), x)["params"]
    ours = jcr_flax.LSTM(H)
    config = ours.rnn_config(I)
    params = ours.unpacked(jcr.RNNParams.from_canonical(*interop.flax_to_canonical(their_params, config), config))
    c0 = jax.random.normal(jax.random.key(2), (B, H))
    h0 = jax.random.normal(jax.random.key(3), (B, H))
    (their_c, their_h), their_y = theirs.apply({"params": their_params}, x, initial_carry=(c0, h0))
    (c, h), y = ours.apply({"params": params}, x, initial_carry=(c0, h0), return_carry=True)  # the cells' [B, H]
    assert c.shape == h.shape == (B, H)
    np.testing.assert_allclose(y, their_y, atol=1e-5)
    np.testing.assert_allclose(c, their_c, atol=1e-5)
    np.testing.assert_allclose(h, their_h, atol=1e-5)
    (c3, h3), _ = ours.apply({"params": params}, x, initial_carry=(c0[None], h0[None]), return_carry=True)
    np.testing.assert_allclose(c3[0], c, atol=1e-6)
    np.testing.assert_allclose(h3[0], h, atol=1e-6)
    c_zero, h_zero = ours.initialize_carry(None, x.shape)  # the cell's, as nn.LSTMCell's initialize_carry
    assert c_zero.shape == h_zero.shape == (B, H)
    assert not np.any(c_zero) and not np.any(h_zero)
    (c1, h1), _ = ours.apply({"params": params}, x, return_carry=True)  # no carry given: the cell's form too
    assert c1.shape == h1.shape == (B, H)
    stacked = jcr_flax.LSTM(H, num_layers=2)
    with pytest.raises(ValueError, match=re.escape("initial_carry[1] (h) has shape (3, 5); expected (2, 3, 5)")):
        stacked.apply(stacked.init(jax.random.key(0), x), x, initial_carry=(c0, h0))


def test_a_linen_checkpoint_of_the_buffer_era_loads_into_a_double_bias_module(tmp_path):
    """Before 0.2 a linen module's parameters were one RNNParams, which CanonicalCheckpointHandler wrote as the
    canonical named tree; that tree is the parameters of a module with bias_mode='double', which trained exactly
    those tensors."""
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    config = jcr.RNNConfig("lstm", 2, H, I)
    buffer = jcr.init_params(jax.random.key(1), config)
    old = {"params": {"rnn_params": jcr.RNNParams(buffer, config)}}
    with ocp.Checkpointer(checkpoint.CanonicalCheckpointHandler()) as writer:
        writer.save(tmp_path / "old", args=checkpoint.CanonicalSave(old))
    with ocp.StandardCheckpointer() as reader:
        restored = reader.restore(tmp_path / "old")  # plain Orbax: nested dicts of named tensors
    module = jcr_flax.LSTM(H, num_layers=2, bias_mode="double")
    y = module.apply(restored, x)
    zeros = jnp.zeros(config.state_shape(B))
    want, _, _ = jcr.rnn(buffer, jnp.swapaxes(x, 0, 1), zeros, zeros, config)
    np.testing.assert_allclose(y, jnp.swapaxes(want, 0, 1), atol=1e-5)
    # the handler restores the RNNParams it wrote; unpacked gives the module's parameters from it
    with ocp.Checkpointer(checkpoint.CanonicalCheckpointHandler()) as reader:
        rebuilt = reader.restore(tmp_path / "old", args=checkpoint.CanonicalRestore())
    params = module.unpacked(rebuilt["params"]["rnn_params"])
    np.testing.assert_allclose(module.apply({"params": params}, x), y, atol=0)
    with pytest.raises(TypeError, match=re.escape("rnn_params is an RNNParams (one opaque buffer")):
        module.apply(old, x)
    with pytest.raises(ValueError, match=re.escape("layer_0/forward/b_recurrent/r is 0.")):
        jcr_flax.GRU(H, num_layers=2).unpacked(jcr.RNNParams.init(jax.random.key(2), jcr.RNNConfig("gru", 2, H, I)))
