"""Multi-process training and checkpoints: 2 JAX processes x 4 CPU devices joined by ``jax.distributed`` (gloo).

The functions without ``test_`` run in both processes at once (``multiprocess.Cluster``, started once for this
module); every array they build is global over the 8 devices of a ``("batch",)`` mesh, each process holding its 4
devices' shards, as on a multi-host GPU job. They check what they can see in-process (their own shards) and return
NumPy results that the tests compare across processes and with a one-process run.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multiprocess  # noqa: E402
from numpy_reference import numpy_rnn  # noqa: E402

T, B = 5, 16  # 2 sequences per device
ENCODER = jcr.RNNConfig("lstm", num_layers=2, num_units=8, input_size=3, direction="bidirectional")


@pytest.fixture(scope="module")
def cluster():
    with multiprocess.Cluster(num_processes=2, local_devices=4) as running:
        yield running


def _mesh():
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices()), ("batch",))


def _sharding(spec):
    from jax.sharding import NamedSharding

    return NamedSharding(_mesh(), spec)


def _batch(seed: int = 1):
    """x [T, B, 3], the encoder's initial (h0, c0) [4, B, 8] and seq_lengths [B], the same in every process."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, B, ENCODER.input_size)).astype(np.float32)
    h0 = (0.5 * rng.normal(size=ENCODER.state_shape(B))).astype(np.float32)
    c0 = (0.5 * rng.normal(size=ENCODER.cell_shape(B))).astype(np.float32)
    lengths = (np.arange(B) % T + 1).astype(np.int32)
    return x, h0, c0, lengths


# ------------------------------------------------------------------------------------------------ rnn() step
def _rnn_loss(params, x, h0, c0, lengths):
    y, h_n, c_n = jcr.rnn(params, x, h0, c0, ENCODER, seq_lengths=lengths)
    return jnp.mean(y ** 2) + jnp.mean(h_n * c_n)


def _sharded_rnn_step():
    """Loss and weight gradient of a 2-layer bidirectional LSTM, batch split over all 8 devices of both processes,
    next to the same step on one local device."""
    from jax.sharding import PartitionSpec as P

    params = np.asarray(jcr.init_params(jax.random.key(0), ENCODER))
    x, h0, c0, lengths = _batch()
    step = jax.jit(jax.value_and_grad(_rnn_loss))
    batch = _sharding(P(None, "batch"))
    args = (multiprocess.global_array(params, _sharding(P())), multiprocess.global_array(x, batch),
            multiprocess.global_array(h0, batch), multiprocess.global_array(c0, batch),
            multiprocess.global_array(lengths, _sharding(P("batch"))))
    loss, grad = step(*args)
    assert grad.sharding.is_fully_replicated, grad.sharding
    local_loss, local_grad = step(params, x, h0, c0, lengths)
    assert len(local_grad.devices()) == 1
    return {"loss": multiprocess.local_copy(loss), "grad": multiprocess.local_copy(grad),
            "one_device_loss": np.asarray(local_loss), "one_device_grad": np.asarray(local_grad), "params": params}


def test_batch_sharded_rnn_step_equals_one_process(cluster):
    results = cluster.run(_sharded_rnn_step)
    first = results[0]
    for other in results[1:]:  # every process holds the same replicated loss and gradient, bit for bit
        np.testing.assert_array_equal(other["loss"], first["loss"])
        np.testing.assert_array_equal(other["grad"], first["grad"])
    np.testing.assert_allclose(first["loss"], first["one_device_loss"], rtol=1e-6)
    np.testing.assert_allclose(first["grad"], first["one_device_grad"], rtol=1e-5, atol=1e-7)
    # the loss against the float64 oracle, which knows nothing of sharding or of the opaque buffer
    x, h0, c0, lengths = _batch()
    weights, biases = jcr.params_to_canonical(first["params"], ENCODER)
    y, h_n, c_n = numpy_rnn(weights, biases, x, h0, c0, "lstm", 2, 8, True, False, seq_lengths=lengths)
    np.testing.assert_allclose(first["loss"], np.mean(y ** 2) + np.mean(h_n * c_n), rtol=1e-5)
    assert np.abs(first["grad"]).max() > 1e-3


# ------------------------------------------------------------------------------------------------ Flax + optax
def _flax_training(num_steps: int):
    """A Flax LSTM + Dense head trained with Adam for ``num_steps`` batch-sharded steps (params replicated), and the
    same training on one local device. Returns both parameter trees and both loss curves."""
    import flax.linen as nn
    import optax
    from jax.sharding import PartitionSpec as P

    from jax_cudnn_rnn.flax import LSTM

    class Tagger(nn.Module):
        @nn.compact
        def __call__(self, x, seq_lengths):
            y = LSTM(num_units=8, num_layers=2, direction="bidirectional")(x, seq_lengths)
            return nn.Dense(2)(y)

    x, _, _, lengths = _batch()
    x = np.swapaxes(x, 0, 1)  # batch-major, like flax.linen.RNN
    labels = (x.sum(-1) > 0).astype(np.int32)
    model, optimizer = Tagger(), optax.adam(3e-2)
    params = model.init(jax.random.key(0), x, lengths)
    state = (params, optimizer.init(params))

    def step(state, x, labels, lengths):
        params, opt_state = state

        def loss_fn(params):
            logits = model.apply(params, x, lengths)
            mask = jnp.arange(x.shape[1])[None, :] < lengths[:, None]
            losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            return jnp.sum(losses * mask) / jnp.sum(mask)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    replicated, rows = _sharding(P()), _sharding(P("batch"))
    sharded_state = jax.tree.map(lambda a: multiprocess.global_array(a, replicated), state)
    sharded_step = jax.jit(step, out_shardings=(jax.tree.map(lambda _: replicated, state), replicated))
    sharded_args = (multiprocess.global_array(x, rows), multiprocess.global_array(labels, rows),
                    multiprocess.global_array(lengths, rows))
    local_step = jax.jit(step)
    losses, local_losses = [], []
    for _ in range(num_steps):
        sharded_state, loss = sharded_step(sharded_state, *sharded_args)
        state, local_loss = local_step(state, x, labels, lengths)
        losses.append(multiprocess.local_copy(loss))
        local_losses.append(np.asarray(local_loss))
    return {"params": jax.tree.map(multiprocess.local_copy, sharded_state[0]), "losses": np.array(losses),
            "one_device_params": jax.tree.map(np.asarray, state[0]), "one_device_losses": np.array(local_losses)}


def test_flax_module_trained_with_optax_across_processes(cluster):
    results = cluster.run(_flax_training, 4)
    first = results[0]
    for other in results[1:]:
        jax.tree.map(np.testing.assert_array_equal, other["params"], first["params"])
    np.testing.assert_allclose(first["losses"], first["one_device_losses"], rtol=1e-5)
    assert first["losses"][-1] < first["losses"][0]  # it trains
    rnn_params = first["params"]["params"]["LSTM_0"]["rnn_params"]
    assert isinstance(rnn_params, jcr.RNNParams) and rnn_params.config.num_units == 8
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6), first["params"],
                 first["one_device_params"])
