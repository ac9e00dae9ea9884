"""The seed-style classes (CudnnLSTM, CudnnGRU, CudnnRNNTanh, CudnnRNNRelu) against the float64 NumPy oracle: their
outputs, with and without seq_lengths, the default dropout key (``jax.random.key(seed)``) and an explicit one, under
the xla implementation and, on a GPU, cuDNN."""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import (
    IMPLEMENTATIONS,
    LENGTHS,
    MODES,
    ORACLE_TOLERANCE,
    B,
    T,
    assert_outputs_close,
    documented_dropout_masks,
    draw_inputs,
    oracle,
)

CLASSES = {"lstm": jcr.CudnnLSTM, "gru": jcr.CudnnGRU, "rnn_tanh": jcr.CudnnRNNTanh, "rnn_relu": jcr.CudnnRNNRelu}


def _call(model, params, x, h0, c0, **kwargs):
    """The class's own signature: (input_data, input_h, [input_c,] params); returns (y, h_n, c_n or None)."""
    states = (h0, c0) if model.rnn_mode == "lstm" else (h0,)
    outputs = model(*(jnp.asarray(a) for a in (x, *states, params)), **kwargs)
    assert len(outputs) == len(states) + 1
    return (*outputs, None) if model.rnn_mode != "lstm" else outputs


def _assert_matches_oracle(got, want, implementation, what=""):
    tol = ORACLE_TOLERANCE[implementation]
    assert_outputs_close(got, want, atol=tol, rtol=tol, what=what)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("mode", MODES)
def test_outputs_match_the_oracle(mode, implementation):
    model = CLASSES[mode](num_layers=2, num_units=4, input_size=3, direction="bidirectional")
    cfg = model.config
    assert cfg == jcr.RNNConfig(mode, 2, 4, 3, direction="bidirectional")
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(len(mode)))
    lengths = np.array(LENGTHS, np.int32)
    got = _call(model, params, x, h0, c0, is_training=False, implementation=implementation)
    _assert_matches_oracle(got, oracle(cfg, params, x, h0, c0), implementation)
    got = _call(
        model, params, x, h0, c0, is_training=False, seq_lengths=jnp.asarray(lengths), implementation=implementation
    )
    _assert_matches_oracle(got, oracle(cfg, params, x, h0, c0, seq_lengths=lengths), implementation, "seq_lengths")


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_dropout_key_defaults_to_the_seed(implementation):
    model = jcr.CudnnLSTM(num_layers=3, num_units=4, input_size=3, dropout=0.4, seed=5)
    cfg = model.config
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(1))
    lengths = np.array(LENGTHS, np.int32)
    shape = (T, B, cfg.output_size)
    # is_training defaults to True, as in tf.contrib.cudnn_rnn
    got = _call(model, params, x, h0, c0, seq_lengths=jnp.asarray(lengths), implementation=implementation)
    want = oracle(
        cfg,
        params,
        x,
        h0,
        c0,
        seq_lengths=lengths,
        dropout_masks=documented_dropout_masks(jax.random.key(5), cfg, shape),
    )
    _assert_matches_oracle(got, want, implementation, "default key")
    got = _call(model, params, x, h0, c0, dropout_key=jax.random.key(9), implementation=implementation)
    want = oracle(cfg, params, x, h0, c0, dropout_masks=documented_dropout_masks(jax.random.key(9), cfg, shape))
    _assert_matches_oracle(got, want, implementation, "explicit key")
    got = _call(model, params, x, h0, c0, is_training=False, implementation=implementation)
    _assert_matches_oracle(got, oracle(cfg, params, x, h0, c0), implementation, "inference")
