"""What x holds past a row's length is never read (issue 59): with ``seq_lengths``, a NaN or an infinity in the padding
changes no output and no gradient on any implementation; the gradient x gets there is zero. Before, the xla and
reference implementations returned NaN gradients for the weights (the padding's steps ran the cell on it and
multiplied its derivative by a zero cotangent) where the three oneDNN paths, which zero the padding first, returned
finite ones: two implementations, two answers for one call. cuDNN reads only a row's valid steps (the case marked
``gpu`` runs it there)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call

T, B = 6, 4
LENGTHS = np.asarray([6, 3, 0, 1], np.int32)


def _poisoned(x):
    """x with NaN, +inf and -inf at every padding step (one kind per row)."""
    padding = np.arange(T)[:, None] >= LENGTHS[None, :]
    kinds = np.asarray([np.nan, np.inf, -np.inf, np.nan], np.float32)
    return jnp.where(jnp.asarray(padding)[..., None], jnp.asarray(kinds)[None, :, None], x), padding


@pytest.mark.parametrize(
    "implementation", [*registry.implementations("cpu"), pytest.param("cudnn", marks=pytest.mark.gpu)]
)
@pytest.mark.parametrize("mode,direction", [("lstm", "bidirectional"), ("gru", "unidirectional")])
def test_padding_values_reach_no_output_and_no_gradient(implementation, mode, direction):
    cfg = jcr.RNNConfig(mode, 2, 5, 3, direction=direction)
    platform = "cuda" if implementation == "cudnn" else "cpu"
    reason = registry.why_not(implementation, platform, Call(cfg, T, B, seq_lengths=True))
    if reason is not None:
        pytest.skip(f"{implementation} cannot run it here: {reason}")
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.random.normal(jax.random.key(1), (T, B, 3))
    h0 = jax.random.normal(jax.random.key(2), cfg.state_shape(B))
    c0 = h0 if mode == "lstm" else None
    poisoned, padding = _poisoned(x)
    clean = jnp.where(jnp.asarray(padding)[..., None], 0.0, x)

    def loss(params, x, h0, c0):
        y, h_n, c_n = jcr.rnn(params, x, h0, c0, cfg, seq_lengths=LENGTHS, implementation=implementation)
        return jnp.sum(jnp.sin(y)) + jnp.sum(h_n**2) + (0.0 if c_n is None else jnp.sum(c_n))

    grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3) if c0 is not None else (0, 1, 2)))
    got = grad(params, poisoned, h0, c0)
    want = grad(params, clean, h0, c0)
    for got_leaf, want_leaf in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert np.all(np.isfinite(np.asarray(got_leaf)))
        np.testing.assert_array_equal(np.asarray(got_leaf), np.asarray(want_leaf))
    dx = np.asarray(got[1][1])
    assert np.all(dx[padding] == 0)
