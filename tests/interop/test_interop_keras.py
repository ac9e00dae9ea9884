"""Canonical <-> Keras 3 layers, run by Keras itself on the JAX backend: outputs equal both ways (initial states and
masks included), round trips exact, unsupported configs and malformed weights named."""

import functools
import os
import sys

import jax
import numpy as np
import pytest

from jax_cudnn_rnn import interop, layout
from jax_cudnn_rnn.config import RNNConfig

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import assert_outputs_close, import_or_skip, run_xla, summed_biases

os.environ["KERAS_BACKEND"] = "jax"  # Keras reads it once, at its first import
keras = import_or_skip("keras")
if keras.backend.backend() != "jax":  # imported earlier with another backend: these tests would not test JAX Keras
    raise RuntimeError(f"keras was imported with backend {keras.backend.backend()!r} before this module set 'jax'")

T, B, I, H = 5, 3, 4, 6
# Every mode, both directions, one and two layers, without the full product (Keras builds and runs slowly); with a
# mask (seq_lengths) where it matters: a unidirectional layer (Keras's zero_output_for_mask) and bidirectional ones.
CASES = [
    ("lstm", "unidirectional", 2, True),
    ("lstm", "bidirectional", 2, False),
    ("gru", "unidirectional", 1, False),
    ("gru", "bidirectional", 2, True),
    ("rnn_tanh", "bidirectional", 1, True),
    ("rnn_relu", "unidirectional", 2, False),
]
LENGTHS = np.array([T, 2, 4], np.int32)


@functools.cache
def _layers(config):
    """keras_layers(config) and Keras's own initial weights, built once per config for the whole module."""
    layers = interop.keras_layers(config, return_state=True)
    return layers, [layer.get_weights() for layer in layers]


def _random_canonical(config, rng):
    """Canonical weights and biases (nonzero) drawn from ``rng``, in config.dtype."""
    weight_slots, bias_slots = layout.param_slots(config)
    weights = [rng.uniform(-0.6, 0.6, s.shape).astype(config.dtype) for s in weight_slots]
    biases = [rng.uniform(-0.6, 0.6, s.shape).astype(config.dtype) for s in bias_slots]
    return weights, biases


def _inputs(config, rng):
    x = rng.standard_normal((T, B, config.input_size)).astype(np.float32)
    h0 = (0.5 * rng.standard_normal(config.state_shape(B))).astype(np.float32)
    c0 = (0.5 * rng.standard_normal(config.cell_shape(B))).astype(np.float32) if config.has_cell_state else None
    return x, h0, c0


def _keras_run(layers, config, x, h0, c0, seq_lengths=None):
    """What ``rnn`` returns, computed by the Keras layers (built with return_state=True): x [T, B, I], h0/c0
    [L*D, B, H] time-major as for ``rnn``; ``seq_lengths`` becomes Keras's mask [B, T]."""
    lstm, directions = config.mode == "lstm", config.num_directions
    mask = None if seq_lengths is None else np.arange(T)[None, :] < np.asarray(seq_lengths)[:, None]
    inputs, h_n, c_n = np.swapaxes(x, 0, 1), [], []
    for layer, keras_layer in enumerate(layers):
        indices = [layer * directions + d for d in range(directions)]
        state = [s for i in indices for s in ((h0[i], c0[i]) if lstm else (h0[i],))]
        outputs = keras_layer(inputs, initial_state=state, mask=mask)
        inputs, finals = np.asarray(outputs[0]), [np.asarray(s) for s in outputs[1:]]
        h_n += finals[::2] if lstm else finals
        c_n += finals[1::2] if lstm else []
    return np.swapaxes(inputs, 0, 1), np.stack(h_n), np.stack(c_n) if lstm else None


def _assert_lists_equal(got, want):
    assert [len(g) for g in got] == [len(w) for w in want]
    for g_layer, w_layer in zip(got, want, strict=True):
        for g, w in zip(g_layer, w_layer, strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("mode,direction,num_layers,masked", CASES)
def test_keras_both_ways(mode, direction, num_layers, masked):
    config = RNNConfig(mode, num_layers=num_layers, num_units=H, input_size=I, direction=direction)
    layers, initial = _layers(config)
    rng = np.random.default_rng(len(mode) * 10 + num_layers)
    x, h0, c0 = _inputs(config, rng)

    # ours -> Keras: Keras runs random canonical weights from initial states (and with a mask).
    weights, biases = _random_canonical(config, rng)
    params = layout.canonical_to_params(weights, biases, config)
    keras_weights = interop.canonical_to_keras(weights, biases, config)
    for layer, arrays in zip(layers, keras_weights, strict=True):
        layer.set_weights(arrays)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _keras_run(layers, config, x, h0, c0))
    if masked:
        assert_outputs_close(
            run_xla(params, config, x, h0, c0, LENGTHS), _keras_run(layers, config, x, h0, c0, LENGTHS)
        )
    # and back: GRU's two biases each have a place in Keras, the others come back summed
    w, b = interop.keras_to_canonical(keras_weights, config)
    want_biases = summed_biases(config, biases, config.gate_names if mode == "gru" else ())
    for got, want in zip(w + b, weights + want_biases, strict=True):
        np.testing.assert_array_equal(got, want)

    # Keras -> ours: Keras's own initial kernels with random nonzero biases (Keras initialises them to 0 and 1).
    keras_weights = [
        [rng.normal(0, 0.5, a.shape).astype(a.dtype) if k % 3 == 2 else a for k, a in enumerate(arrays)]
        for arrays in initial
    ]
    for layer, arrays in zip(layers, keras_weights, strict=True):
        layer.set_weights(arrays)
    w, b = interop.keras_to_canonical(layers, config)  # the layers themselves are accepted too
    params = layout.canonical_to_params(w, b, config)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _keras_run(layers, config, x, h0, c0))
    _assert_lists_equal(interop.canonical_to_keras(w, b, config), keras_weights)  # and back, exactly


def test_keras_skip_input_and_bias_modes():
    # skip input: identity kernels both ways; a single bias mode: its bias is Keras's bias, exactly.
    config = RNNConfig(
        "lstm",
        num_layers=2,
        num_units=H,
        input_size=H,
        input_mode="skip_input",
        direction="bidirectional",
        bias_mode="single_recurrent",
    )
    rng = np.random.default_rng(7)
    x, h0, c0 = _inputs(config, rng)
    weights, biases = _random_canonical(config, rng)
    params = layout.canonical_to_params(weights, biases, config)
    keras_weights = interop.canonical_to_keras(weights, biases, config)
    np.testing.assert_array_equal(keras_weights[0][0], np.tile(np.eye(H), 4))
    np.testing.assert_array_equal(keras_weights[0][3], np.tile(np.eye(H), 4))  # the backward layer's kernel
    layers, _ = _layers(config)
    for layer, arrays in zip(layers, keras_weights, strict=True):
        layer.set_weights(arrays)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _keras_run(layers, config, x, h0, c0))
    back = layout.canonical_to_params(*interop.keras_to_canonical(keras_weights, config), config)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(params))

    # no bias: use_bias=False layers, two arrays per direction; a GRU whose recurrent biases are absent.
    for config in (
        RNNConfig("gru", num_layers=2, num_units=H, input_size=I, bias_mode="none"),
        RNNConfig("gru", num_layers=1, num_units=H, input_size=I, bias_mode="single_input"),
    ):
        x, h0, c0 = _inputs(config, rng)
        weights, biases = _random_canonical(config, rng)
        params = layout.canonical_to_params(weights, biases, config)
        layers, _ = _layers(config)
        assert [layer.cell.use_bias for layer in layers] == [config.bias_mode != "none"] * config.num_layers
        keras_weights = interop.canonical_to_keras(weights, biases, config)
        for layer, arrays in zip(layers, keras_weights, strict=True):
            layer.set_weights(arrays)
        assert_outputs_close(run_xla(params, config, x, h0, c0), _keras_run(layers, config, x, h0, c0))
        back = layout.canonical_to_params(*interop.keras_to_canonical(keras_weights, config), config)
        np.testing.assert_array_equal(np.asarray(back), np.asarray(params))


def test_keras_half_precision_uses_a_mixed_policy():
    config = RNNConfig("gru", num_layers=1, num_units=H, input_size=I, direction="bidirectional", dtype="bfloat16")
    layers = interop.keras_layers(config, return_state=True)
    assert layers[0].forward_layer.dtype_policy.name == "mixed_bfloat16"
    rng = np.random.default_rng(8)
    weights, biases = _random_canonical(config, rng)
    keras_weights = interop.canonical_to_keras(weights, biases, config)
    assert {a.dtype for a in keras_weights[0]} == {np.dtype(np.float32)}
    layers[0].set_weights(keras_weights[0])
    x, h0 = (a.astype(config.dtype) for a in _inputs(config, rng)[:2])
    params = layout.canonical_to_params(weights, biases, config)
    ours = [a.astype(np.float32) for a in run_xla(params, config, x, h0, None)[:2]]
    theirs = [a.astype(np.float32) for a in _keras_run(layers, config, x, h0, None)[:2]]
    for a, b in zip(ours, theirs, strict=True):  # bfloat16 keeps 8 bits: a few units of its last place
        np.testing.assert_allclose(a, b, atol=3e-2)
    back, _ = interop.keras_to_canonical(keras_weights, config)
    assert all(w.dtype == config.dtype for w in back)
    for got, want in zip(back, weights, strict=True):
        np.testing.assert_array_equal(got, want)


def test_keras_errors_name_the_problem():
    with pytest.raises(ValueError, match="proj_size=2 has no Keras equivalent"):
        interop.keras_layers(RNNConfig("lstm", 1, H, I, proj_size=2))
    with pytest.raises(ValueError, match=r"cell_clip=3\.0 has no Keras equivalent"):
        interop.canonical_to_keras([], [], RNNConfig("lstm", 1, H, I, cell_clip=3.0))
    with pytest.raises(ValueError, match=r"dropout=0.3 has no Keras .*keras.layers.Dropout"):
        interop.keras_layers(RNNConfig("lstm", 2, H, I, dropout=0.3))

    config = RNNConfig("gru", num_layers=2, num_units=H, input_size=I, direction="bidirectional")
    weights, biases = layout.params_to_canonical(layout.init_params(jax.random.key(0), config), config)
    keras_weights = interop.canonical_to_keras(weights, biases, config)
    with pytest.raises(TypeError, match="layer_weights must be a list"):
        interop.keras_to_canonical({"layer_0": keras_weights[0]}, config)
    with pytest.raises(ValueError, match="layer_weights has 1 entries; expected num_layers = 2"):
        interop.keras_to_canonical(keras_weights[:1], config)
    with pytest.raises(
        ValueError,
        match=r"layer_weights\[1\] has 5 arrays; expected 6: kernel, recurrent_kernel, "
        r"bias \(forward, then backward\)",
    ):
        interop.keras_to_canonical([keras_weights[0], keras_weights[1][:5]], config)
    broken = [list(keras_weights[0]), list(keras_weights[1])]
    broken[1][4] = np.zeros((H, 2 * H), np.float32)
    with pytest.raises(
        ValueError,
        match=r"layer_weights\[1\]\[4\] \(backward recurrent_kernel\) has shape \(6, 12\); "
        r"expected \(6, 18\)",
    ):
        interop.keras_to_canonical(broken, config)

    # A Keras GRU with Keras's old default reset_after=False is not cuDNN's GRU: it is mode "gru_reset_before".
    classic = keras.layers.GRU(H, reset_after=False)
    classic.build((None, None, I))
    one_layer = RNNConfig("gru", num_layers=1, num_units=H, input_size=I)
    with pytest.raises(
        ValueError,
        match=r"layer_weights\[0\]\[2\] \(forward bias\) has shape \(18,\); expected "
        r"\(2, 18\) \(mode 'gru' is Keras's GRU\(reset_after=True\); reset_after=False is mode 'gru_reset_before'\)",
    ):
        interop.keras_to_canonical([classic.get_weights()], one_layer)
    modern = keras.layers.GRU(H, reset_after=True)
    modern.build((None, None, I))
    with pytest.raises(ValueError, match=r"\(mode 'gru_reset_before' is Keras's GRU\(reset_after=False\)"):
        interop.keras_to_canonical([modern.get_weights()], RNNConfig("gru_reset_before", 1, H, I))

    # Values the canonical form has no room for.
    skip = RNNConfig("rnn_tanh", num_layers=1, num_units=H, input_size=H, input_mode="skip_input")
    arrays = interop.canonical_to_keras(
        *layout.params_to_canonical(layout.init_params(jax.random.key(1), skip), skip), skip
    )
    arrays[0][0] = 2 * arrays[0][0]
    with pytest.raises(
        ValueError,
        match=r"layer_weights\[0\]\[0\]\[:, 0:6\] \(kernel of gate h\) is not "
        r"representable: skip input needs an identity input kernel",
    ):
        interop.keras_to_canonical(arrays, skip)
    assert interop.keras_to_canonical(arrays, skip, atol=1.0)  # within atol it passes
    single = RNNConfig("gru", num_layers=1, num_units=H, input_size=I, bias_mode="single_input")
    arrays = [list(keras_weights[0][:3])]
    with pytest.raises(
        ValueError,
        match=r"layer_weights\[0\]\[2\]\[1, 12:18\] \(recurrent bias of gate n\) is not "
        r"representable: bias_mode 'single_input' has no b_recurrent",
    ):
        interop.keras_to_canonical(arrays, single)
