"""The Flax linen and NNX modules against the float64 NumPy oracle, every mode: outputs batch-major and time-major,
``initial_carry`` values, the returned carry (h_n and c_n), ``seq_lengths``, and inter-layer dropout with the key the
module drew (masks from the documented recipe). Under the xla implementation and, on a GPU, cuDNN.
test_flax_modules.py checks gradients, training steps and options against ``rnn`` itself."""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jax_cudnn_rnn import flax as jcr_flax
from jax_cudnn_rnn import nnx as jcr_nnx
from jax_cudnn_rnn import ops
from jax_cudnn_rnn.config import RNNConfig

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import IMPLEMENTATIONS, LENGTHS, MODES, ORACLE_TOLERANCE, B, T, documented_dropout_masks, oracle

I, H = 3, 4


def _close(got, want, implementation, what):
    tol = ORACLE_TOLERANCE[implementation]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol, err_msg=what)


def _carry(cfg, seed):
    """A non-zero initial state: (h0, c0) (c0 None but for LSTM), [L*D, B, H] float32."""
    rng = np.random.default_rng(seed)
    h0 = (0.5 * rng.normal(size=cfg.state_shape(B))).astype(np.float32)
    c0 = (0.5 * rng.normal(size=cfg.cell_shape(B))).astype(np.float32) if cfg.has_cell_state else None
    return h0, c0


def _check_carry_run(cfg, buffer, run, implementation, seed):
    """``run(x, lengths, initial_carry)`` -> (carry, y) time-major, against the oracle; the carry is Flax's
    ``(c, h)`` for an LSTM."""
    x = np.random.default_rng(seed).normal(size=(T, B, I)).astype(np.float32)
    h0, c0 = _carry(cfg, seed + 1)
    lengths = np.array(LENGTHS, np.int32)
    carry, y = run(jnp.asarray(x), jnp.asarray(lengths), (c0, h0) if cfg.has_cell_state else h0)
    want_y, want_h, want_c = oracle(cfg, buffer, x, h0, c0, seq_lengths=lengths)
    _close(y, want_y, implementation, "y")
    c_n, h_n = carry if cfg.has_cell_state else (None, carry)
    _close(h_n, want_h, implementation, "h_n")
    if cfg.has_cell_state:
        _close(c_n, want_c, implementation, "c_n")


def _check_batch_major(cfg, buffer, run, implementation, seed):
    """``run(x)`` batch-major [B, T, I] -> y [B, T, D*H] from a zero carry, against the oracle."""
    x = np.random.default_rng(seed).normal(size=(B, T, I)).astype(np.float32)
    xs = np.swapaxes(x, 0, 1)
    zeros = np.zeros(cfg.state_shape(B), np.float32)
    want_y = oracle(cfg, buffer, xs, zeros, zeros if cfg.has_cell_state else None)[0]
    _close(run(jnp.asarray(x)), np.swapaxes(want_y, 0, 1), implementation, "batch-major y")


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("mode", MODES)
def test_linen_module_matches_the_oracle(mode, implementation):
    kwargs = dict(mode=mode, num_units=H, num_layers=2, direction="bidirectional", implementation=implementation)
    time_major = jcr_flax.RNN(time_major=True, **kwargs)
    variables = time_major.init(jax.random.key(1), jnp.zeros((T, B, I)))
    params = time_major.packed(variables)
    cfg, buffer = params.config, params.buffer
    assert cfg == RNNConfig(mode, 2, H, I, direction="bidirectional", bias_mode=cfg.bias_mode)
    _check_carry_run(
        cfg,
        buffer,
        lambda x, n, carry: time_major.apply(variables, x, n, initial_carry=carry, return_carry=True),
        implementation,
        seed=2,
    )
    batch_major = jcr_flax.RNN(**kwargs)
    _check_batch_major(cfg, buffer, lambda x: batch_major.apply(variables, x), implementation, seed=3)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("mode", MODES)
def test_nnx_module_matches_the_oracle(mode, implementation):
    kwargs = dict(mode=mode, num_layers=2, direction="bidirectional", implementation=implementation)
    time_major = jcr_nnx.RNN(I, H, time_major=True, rngs=nnx.Rngs(4), **kwargs)
    buffer, cfg = time_major.params.buffer, time_major.config
    assert cfg == RNNConfig(mode, 2, H, I, direction="bidirectional", bias_mode=cfg.bias_mode)
    _check_carry_run(
        cfg,
        buffer,
        lambda x, n, carry: time_major(x, n, initial_carry=carry, return_carry=True),
        implementation,
        seed=5,
    )
    batch_major = jcr_nnx.RNN(I, H, rngs=nnx.Rngs(4), **kwargs)
    np.testing.assert_array_equal(batch_major.params.buffer, buffer)  # same seed, same buffer
    _check_batch_major(cfg, buffer, batch_major, implementation, seed=6)


@pytest.fixture
def dropout_keys(monkeypatch):
    """The (is_training, dropout_key) of every call the modules make of ``rnn`` after their checks
    (``ops.run_checked``)."""
    calls = []
    real = ops.run_checked

    def spy(*args, **kwargs):
        calls.append((kwargs["is_training"], kwargs["dropout_key"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(ops, "run_checked", spy)
    return calls


def _dropout_problem(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, T, I)).astype(np.float32)
    return x, np.swapaxes(x, 0, 1), np.array(LENGTHS, np.int32)


def _check_dropout(cfg, buffer, y, key, xs, lengths, implementation, what):
    zeros = np.zeros(cfg.state_shape(B), np.float32)
    masks = None if key is None else documented_dropout_masks(key, cfg, (T, B, cfg.output_size))
    want = oracle(
        cfg, buffer, xs, zeros, zeros if cfg.has_cell_state else None, seq_lengths=lengths, dropout_masks=masks
    )[0]
    _close(np.swapaxes(np.asarray(y), 0, 1), want, implementation, what)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_linen_dropout_uses_the_drawn_key(dropout_keys, implementation):
    module = jcr_flax.LSTM(
        num_units=H, num_layers=3, direction="bidirectional", dropout=0.4, implementation=implementation
    )
    x, xs, lengths = _dropout_problem(7)
    variables = module.init(jax.random.key(0), jnp.asarray(x))
    cfg, buffer = module.rnn_config(I), module.packed(variables).buffer
    dropout_keys.clear()
    y = module.apply(
        variables, jnp.asarray(x), jnp.asarray(lengths), deterministic=False, rngs={"dropout": jax.random.key(8)}
    )
    ((training, key),) = dropout_keys
    assert training and key is not None
    _check_dropout(cfg, buffer, y, key, xs, lengths, implementation, "dropout")
    y = module.apply(variables, jnp.asarray(x), jnp.asarray(lengths))  # deterministic by default
    assert dropout_keys[-1] == (False, None)
    _check_dropout(cfg, buffer, y, None, xs, lengths, implementation, "deterministic")


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_nnx_dropout_and_seq_lengths(dropout_keys, implementation):
    model = jcr_nnx.GRU(
        I, H, num_layers=3, dropout=0.4, deterministic=False, implementation=implementation, rngs=nnx.Rngs(0, dropout=3)
    )
    cfg, buffer = model.config, model.params.buffer
    x, xs, lengths = _dropout_problem(9)
    first = model(jnp.asarray(x), jnp.asarray(lengths))
    second = model(jnp.asarray(x), jnp.asarray(lengths))  # the dropout stream moves on: another mask
    (training, key_1), (_, key_2) = dropout_keys
    assert training and not np.array_equal(jax.random.key_data(key_1), jax.random.key_data(key_2))
    _check_dropout(cfg, buffer, first, key_1, xs, lengths, implementation, "first call")
    _check_dropout(cfg, buffer, second, key_2, xs, lengths, implementation, "second call")
    assert np.abs(np.asarray(first) - np.asarray(second)).max() > 1e-3
    y = model(jnp.asarray(x), jnp.asarray(lengths), deterministic=True)
    assert dropout_keys[-1] == (False, None)
    _check_dropout(cfg, buffer, y, None, xs, lengths, implementation, "deterministic")
