"""Property-based tests: random configurations against the independent NumPy float64 reference, and canonical round
trips. Shapes are kept to a handful of values so that compilation, not search, bounds the run time."""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jax_cudnn_rnn as jcr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_reference import numpy_rnn  # noqa: E402

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
T, B = 4, 3


@st.composite
def configs(draw):
    mode = draw(st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]))
    num_units = draw(st.sampled_from([3, 5]))
    input_mode = draw(st.sampled_from(["linear_input", "skip_input"]))
    input_size = num_units if input_mode == "skip_input" else draw(st.sampled_from([2, 4]))
    extra = {}
    if mode == "lstm":
        extra["proj_size"] = draw(st.sampled_from([0, 0, 2]))
        extra["cell_clip"] = draw(st.sampled_from([None, None, 0.4]))
    return jcr.RNNConfig(mode=mode, num_layers=draw(st.integers(1, 3)), num_units=num_units, input_size=input_size,
                         direction=draw(st.sampled_from(["unidirectional", "bidirectional"])), input_mode=input_mode,
                         bias_mode=draw(st.sampled_from(["double", "double", "single_input", "single_recurrent",
                                                         "none"])), **extra)


def _inputs(cfg, seed):
    rng = np.random.default_rng(seed)
    weights = [rng.uniform(-0.8, 0.8, s.shape).astype(np.float32) for s in jcr.param_slots(cfg)[0]]
    biases = [rng.uniform(-0.8, 0.8, s.shape).astype(np.float32) for s in jcr.param_slots(cfg)[1]]
    x = rng.normal(size=(T, B, cfg.input_size)).astype(np.float32)
    h0 = (0.5 * rng.normal(size=cfg.state_shape(B))).astype(np.float32)
    c0 = (0.5 * rng.normal(size=cfg.cell_shape(B))).astype(np.float32) if cfg.mode == "lstm" else None
    lengths = rng.integers(1, T + 1, size=B).astype(np.int32) if rng.random() < 0.6 else None
    return weights, biases, x, h0, c0, lengths


@SETTINGS
@given(cfg=configs(), seed=st.integers(0, 2**16), implementation=st.sampled_from(["xla", "reference"]))
def test_random_configs_match_numpy_reference(cfg, seed, implementation):
    weights, biases, x, h0, c0, lengths = _inputs(cfg, seed)
    params = jcr.canonical_to_params(weights, biases, cfg)
    y, h_n, c_n = jcr.rnn(params, jnp.asarray(x), jnp.asarray(h0), None if c0 is None else jnp.asarray(c0), cfg,
                          seq_lengths=None if lengths is None else jnp.asarray(lengths), implementation=implementation)
    want_y, want_h, want_c = numpy_rnn(weights, biases, x, h0, c0, cfg.mode, cfg.num_layers, cfg.num_units,
                                       cfg.num_directions == 2, cfg.skip_input, seq_lengths=lengths,
                                       proj_size=cfg.proj_size, cell_clip=cfg.cell_clip, bias_mode=cfg.bias_mode)
    np.testing.assert_allclose(y, want_y, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(h_n, want_h, atol=2e-5, rtol=2e-5)
    if cfg.mode == "lstm":
        np.testing.assert_allclose(c_n, want_c, atol=2e-5, rtol=2e-5)
    else:
        assert c_n is None


@SETTINGS
@given(cfg=configs(), seed=st.integers(0, 2**16))
def test_canonical_round_trips_are_exact(cfg, seed):
    rng = np.random.default_rng(seed)
    params = jnp.asarray(rng.normal(size=jcr.params_size(cfg)).astype(np.float32))
    weights, biases = jcr.params_to_canonical(params, cfg)
    assert [w.shape for w in weights] == [s.shape for s in jcr.param_slots(cfg)[0]]
    np.testing.assert_array_equal(jcr.canonical_to_params(weights, biases, cfg), params)
    np.testing.assert_array_equal(jcr.tree_to_params(jcr.params_to_tree(params, cfg), cfg), params)
    # Every element of the buffer belongs to exactly one canonical tensor.
    assert sum(w.size for w in weights) + sum(b.size for b in biases) == params.size
    np.testing.assert_array_equal(np.sort(np.concatenate([np.ravel(a) for a in weights + biases])),
                                  np.sort(np.asarray(params)))


@SETTINGS
@given(cfg=configs(), seed=st.integers(0, 2**16))
def test_torch_state_dict_round_trip(cfg, seed):
    from jax_cudnn_rnn import interop

    if cfg.skip_input or cfg.bias_mode in ("single_input", "single_recurrent") or cfg.cell_clip is not None:
        return  # not expressible as a torch state_dict (interop raises; tested in test_interop.py)
    weights, biases, *_ = _inputs(cfg, seed)
    state = interop.canonical_to_torch(weights, biases, cfg)
    back_w, back_b = interop.torch_to_canonical(state, cfg)
    for a, b in zip(weights + biases, list(back_w) + list(back_b), strict=True):
        np.testing.assert_array_equal(a, b)


def test_random_configs_float64_match_numpy_reference():
    with jax.enable_x64(True):
        for seed, mode in enumerate(["lstm", "gru", "rnn_tanh", "rnn_relu"]):
            cfg = jcr.RNNConfig(mode=mode, num_layers=2, num_units=4, input_size=3, direction="bidirectional",
                                dtype="float64")
            weights, biases, x, h0, c0, lengths = _inputs(cfg, seed)
            weights = [w.astype(np.float64) for w in weights]
            biases = [b.astype(np.float64) for b in biases]
            params = jcr.canonical_to_params(weights, biases, cfg)
            y, h_n, _ = jcr.rnn(params, jnp.asarray(x, jnp.float64), jnp.asarray(h0, jnp.float64),
                                None if c0 is None else jnp.asarray(c0, jnp.float64), cfg,
                                seq_lengths=None if lengths is None else jnp.asarray(lengths))
            want_y, want_h, _ = numpy_rnn(weights, biases, x, h0, c0, mode, 2, 4, True, False, seq_lengths=lengths)
            np.testing.assert_allclose(y, want_y, atol=1e-12, rtol=1e-12)
            np.testing.assert_allclose(h_n, want_h, atol=1e-12, rtol=1e-12)
