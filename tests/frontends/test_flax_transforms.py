"""The drop-in inside Flax's lifted transforms, as Flax's own layer is used (issue 60): ``nn.Bidirectional`` of two
of ours, ``nn.remat``, ``nn.jit`` and ``nn.vmap`` of our ``RNN(cell)``, each against the same program on
``nn.RNN(cell)`` with the same parameters (the reference: Flax's own layer, run by Flax)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_cudnn_rnn import flax as jcr_flax

B, T, I, H = 3, 7, 4, 5
X = jax.random.normal(jax.random.key(0), (B, T, I))
LENGTHS = jnp.array([7, 3, 0], jnp.int32)


def _close(got, want, atol=2e-5):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol, rtol=1e-5)


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell])
def test_flax_bidirectional_of_two_of_ours_is_flaxs(cell):
    def build(layer):
        return nn.Bidirectional(layer(cell(H)), layer(cell(H)), return_carry=True)

    theirs, ours = build(nn.RNN), build(jcr_flax.RNN)
    variables = theirs.init(jax.random.key(1), X)
    assert jax.tree.map(jnp.shape, ours.init(jax.random.key(1), X)) == jax.tree.map(jnp.shape, variables)
    want = theirs.apply(variables, X)
    got = ours.apply(variables, X)
    _close(got, want)


@pytest.mark.parametrize("transform", ["remat", "jit"])
def test_remat_and_jit_of_ours_give_flaxs_values_and_gradients(transform):
    lift = getattr(nn, transform)

    def loss(layer, params):
        model = lift(layer)(nn.GRUCell(H))
        y = model.apply({"params": params}, X)
        return jnp.sum(y**2)

    params = nn.RNN(nn.GRUCell(H)).init(jax.random.key(2), X)["params"]
    want = jax.value_and_grad(lambda p: loss(nn.RNN, p))(params)
    got = jax.value_and_grad(lambda p: loss(jcr_flax.RNN, p))(params)
    _close(got, want, atol=1e-4)


def test_vmap_of_ours_over_an_ensemble_is_flaxs():
    """nn.vmap with parameters split over an axis (an ensemble of 2), the input broadcast."""

    def build(layer):
        return nn.vmap(
            layer,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            axis_size=2,
        )(nn.LSTMCell(H))

    theirs, ours = build(nn.RNN), build(jcr_flax.RNN)
    variables = theirs.init(jax.random.key(3), X)
    assert jax.tree.leaves(variables)[0].shape[0] == 2
    _close(ours.apply(variables, X), theirs.apply(variables, X))


def test_lengths_under_bidirectional_match_flax_within_each_row():
    """Where Flax's layer and ours differ by design (ours zero past a row's length), they agree on every valid step."""
    theirs = nn.Bidirectional(nn.RNN(nn.GRUCell(H)), nn.RNN(nn.GRUCell(H)))
    ours = nn.Bidirectional(jcr_flax.RNN(nn.GRUCell(H)), jcr_flax.RNN(nn.GRUCell(H)))
    variables = theirs.init(jax.random.key(4), X)
    want = np.asarray(theirs.apply(variables, X, seq_lengths=LENGTHS))
    got = np.asarray(ours.apply(variables, X, seq_lengths=LENGTHS))
    valid = np.arange(T)[None, :] < np.asarray(LENGTHS)[:, None]
    np.testing.assert_allclose(got[valid], want[valid], atol=2e-5, rtol=1e-5)
    assert not np.any(got[~valid])
