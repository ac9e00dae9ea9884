"""Issue 40's cells against Keras 3's own layers with identical weights, run by Keras on the JAX backend: the GRU with
``reset_after=False`` (mode "gru_reset_before"), LSTM/GRU/SimpleRNN with activations other than cuDNN's (outputs,
final states, gradients w.r.t. the inputs and every weight), each activation against ``keras.activations``, and
recurrent dropout in inference (Keras's layer with ``recurrent_dropout`` and ``training=False`` is the layer without
it). Training-mode recurrent dropout draws Keras's masks from Keras's seed generator; its semantics (one mask per
gate on h_{t-1}, the GRU's z * h unmasked) are checked against Keras's code by the oracle comparison in
tests/backends/test_general_cells.py and here by running Keras's cell step with our masks."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import interop, layout
from jax_cudnn_rnn.config import RNNConfig

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import assert_outputs_close, import_or_skip, run_xla

os.environ["KERAS_BACKEND"] = "jax"  # Keras reads it once, at its first import
keras = import_or_skip("keras")
if keras.backend.backend() != "jax":
    raise RuntimeError(f"keras was imported with backend {keras.backend.backend()!r} before this module set 'jax'")

T, B, I, H = 5, 3, 4, 6
LENGTHS = np.array([T, 2, 4], np.int32)
# (mode, direction, num_layers, config keywords): Keras's reset_after=False GRU in its own bias layout and in ours,
# and each layer with activations other than cuDNN's.
CASES = [
    ("gru_reset_before", "unidirectional", 1, dict(bias_mode="single_input")),
    ("gru_reset_before", "bidirectional", 2, {}),
    ("gru_reset_before", "unidirectional", 2, dict(activation="relu", recurrent_activation="hard_sigmoid")),
    ("lstm", "bidirectional", 1, dict(activation="softsign", recurrent_activation="hard_sigmoid")),
    ("lstm", "unidirectional", 2, dict(activation="selu", bias_mode="single_input")),
    ("gru", "unidirectional", 1, dict(activation="elu", recurrent_activation="sparse_sigmoid")),
    ("rnn_tanh", "bidirectional", 1, dict(activation="gelu")),
    ("rnn_tanh", "unidirectional", 2, dict(activation="leaky_relu")),
]
IDS = [f"{m}-{d[:3]}-{L}-" + "-".join(f"{k}={v}" for k, v in kw.items()) for m, d, L, kw in CASES]


def _random_canonical(config, rng):
    weight_slots, bias_slots = layout.param_slots(config)
    weights = [rng.uniform(-0.6, 0.6, s.shape).astype(config.dtype) for s in weight_slots]
    biases = [rng.uniform(-0.6, 0.6, s.shape).astype(config.dtype) for s in bias_slots]
    return weights, biases


def _inputs(config, rng):
    x = rng.standard_normal((T, B, config.input_size)).astype(np.float32)
    h0 = (0.5 * rng.standard_normal(config.state_shape(B))).astype(np.float32)
    c0 = (0.5 * rng.standard_normal(config.cell_shape(B))).astype(np.float32) if config.has_cell_state else None
    return x, h0, c0


def _keras_run(layers, config, x, h0, c0, seq_lengths=None, training=False):
    """What ``rnn`` returns, computed by the Keras layers (return_state=True), time-major in and out."""
    lstm, directions = config.has_cell_state, config.num_directions
    mask = None if seq_lengths is None else np.arange(T)[None, :] < np.asarray(seq_lengths)[:, None]
    inputs, h_n, c_n = np.swapaxes(x, 0, 1), [], []
    for layer, keras_layer in enumerate(layers):
        indices = [layer * directions + d for d in range(directions)]
        state = [s for i in indices for s in ((h0[i], c0[i]) if lstm else (h0[i],))]
        outputs = keras_layer(inputs, initial_state=state, mask=mask, training=training)
        inputs, finals = np.asarray(outputs[0]), [np.asarray(s) for s in outputs[1:]]
        h_n += finals[::2] if lstm else finals
        c_n += finals[1::2] if lstm else []
    return np.swapaxes(inputs, 0, 1), np.stack(h_n), np.stack(c_n) if lstm else None


@pytest.mark.parametrize("mode,direction,num_layers,kw", CASES, ids=IDS)
def test_values_match_keras(mode, direction, num_layers, kw):
    config = RNNConfig(mode, num_layers=num_layers, num_units=H, input_size=I, direction=direction, **kw)
    layers = interop.keras_layers(config, return_state=True)
    first = layers[0].forward_layer if direction == "bidirectional" else layers[0]
    assert first.cell.activation is keras.activations.get(config.activation or config.cell.activation)
    if mode.startswith("gru"):
        assert first.cell.reset_after == (mode == "gru")
    rng = np.random.default_rng(len(mode) + num_layers)
    x, h0, c0 = _inputs(config, rng)
    weights, biases = _random_canonical(config, rng)
    params = layout.canonical_to_params(weights, biases, config)
    keras_weights = interop.canonical_to_keras(weights, biases, config)
    for layer, arrays in zip(layers, keras_weights, strict=True):
        layer.set_weights(arrays)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _keras_run(layers, config, x, h0, c0))
    assert_outputs_close(run_xla(params, config, x, h0, c0, LENGTHS), _keras_run(layers, config, x, h0, c0, LENGTHS))
    # and back: Keras's weights give the same network (the reset-before GRU's biases come back summed: exact math)
    back = layout.canonical_to_params(*interop.keras_to_canonical(keras_weights, config), config)
    assert_outputs_close(run_xla(back, config, x, h0, c0), run_xla(params, config, x, h0, c0))


def test_keras_reset_after_false_layer_converts_as_it_is():
    """A GRU(reset_after=False) built and initialised by Keras (Keras 2's default layer): its weights, with random
    biases, run on rnn(mode="gru_reset_before", bias_mode="single_input") as Keras runs them, and come back exactly."""
    layer = keras.layers.GRU(H, reset_after=False, return_sequences=True, return_state=True)
    layer.build((None, None, I))
    rng = np.random.default_rng(3)
    kernel, recurrent, bias = layer.get_weights()
    layer.set_weights([kernel, recurrent, rng.normal(0, 0.5, bias.shape).astype(np.float32)])
    config = RNNConfig("gru_reset_before", 1, H, I, bias_mode="single_input")
    weights, biases = interop.keras_to_canonical([layer], config)
    x, h0, _ = _inputs(config, rng)
    assert_outputs_close(
        run_xla(layout.canonical_to_params(weights, biases, config), config, x, h0, None),
        _keras_run([layer], config, x, h0, None),
    )
    for got, want in zip(interop.canonical_to_keras(weights, biases, config)[0], layer.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "mode,kw",
    [
        ("gru_reset_before", dict(bias_mode="single_input")),
        ("lstm", dict(activation="relu", recurrent_activation="hard_sigmoid", bias_mode="single_input")),
        ("gru", dict(activation="softsign", recurrent_activation="hard_silu")),
        ("rnn_tanh", dict(activation="selu", bias_mode="single_input")),
    ],
)
def test_gradients_match_keras(mode, kw):
    """d(loss)/d(x, h0, every weight) of one layer: ours through the opaque buffer, mapped to Keras's arrays by the
    (linear) canonical_to_keras, against jax.grad of Keras's stateless_call."""
    config = RNNConfig(mode, 1, H, I, **kw)
    (layer,) = interop.keras_layers(config, return_state=True)
    rng = np.random.default_rng(17)
    x, h0, c0 = _inputs(config, rng)
    weights, biases = _random_canonical(config, rng)
    params = layout.canonical_to_params(weights, biases, config)
    layer.set_weights(interop.canonical_to_keras(weights, biases, config)[0])
    wy = rng.standard_normal((T, B, H)).astype(np.float32)
    wh = rng.standard_normal((B, H)).astype(np.float32)
    mask = jnp.asarray(np.arange(T)[None, :] < LENGTHS[:, None])

    def ours(params, x, h0, c0):
        y, h, c = jcr.rnn(params, x, h0, c0, config, seq_lengths=jnp.asarray(LENGTHS), implementation="xla")
        return jnp.sum(y * wy) + jnp.sum(h[0] * wh) + (0.0 if c is None else jnp.sum(c[0] * wh))

    def theirs(trainable, x, h0, c0):
        state = [h0[0], c0[0]] if c0 is not None else [h0[0]]
        outputs, _ = layer.stateless_call(
            trainable, non_trainable, jnp.swapaxes(x, 0, 1), initial_state=state, mask=mask
        )
        y, h = jnp.swapaxes(outputs[0], 0, 1), outputs[1]
        return jnp.sum(y * wy) + jnp.sum(h * wh) + (0.0 if c0 is None else jnp.sum(outputs[2] * wh))

    argnums = (0, 1, 2, 3) if c0 is not None else (0, 1, 2)
    args = (jnp.asarray(params), x, h0, c0)
    value, grads = jax.value_and_grad(ours, argnums)(*args)
    trainable = [v.value for v in layer.trainable_variables]
    non_trainable = [v.value for v in layer.non_trainable_variables]  # the seed generator's state
    keras_value, keras_grads = jax.value_and_grad(theirs, argnums)(trainable, *args[1:])
    np.testing.assert_allclose(value, keras_value, rtol=1e-5, atol=1e-5)
    d_weights, d_biases = layout.params_to_canonical(grads[0], config)
    mapped = interop.canonical_to_keras(d_weights, d_biases, config)[0]
    for name, a, b in zip([v.name for v in layer.trainable_variables], mapped, keras_grads[0], strict=True):
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-5, atol=2e-5, err_msg=name)
    for name, a, b in zip(("x", "h0", "c0"), grads[1:], keras_grads[1:], strict=False):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-5, err_msg=name)
        assert np.abs(np.asarray(b)).max() > 1e-3


def test_activations_are_keras_activations():
    """Every named activation, values and derivatives, against keras.activations (Keras's defaults: gelu exact,
    leaky_relu slope 0.2, hard_sigmoid relu6(x + 3) / 6), and the list is Keras's elementwise ones."""
    from keras.src.activations import ALL_OBJECTS_DICT

    from jax_cudnn_rnn.cells import activations

    along_an_axis = {"softmax", "log_softmax", "glu", "sparsemax"}
    needs_arguments = {"threshold"}
    assert set(activations.ACTIVATIONS) | set(activations.ALIASES) == set(ALL_OBJECTS_DICT) - along_an_axis - (
        needs_arguments
    )
    v = jnp.linspace(-7.0, 7.0, 281, dtype=jnp.float32)
    v = v[jnp.abs(v - jnp.round(v * 2) / 2) > 1e-3]  # away from the kinks at multiples of 0.5
    for name in sorted(ALL_OBJECTS_DICT):
        if name in along_an_axis | needs_arguments:
            continue
        ours, theirs = activations.resolve(activations.canonical_name(name, "activation")), keras.activations.get(name)
        np.testing.assert_allclose(ours(v), theirs(v), rtol=1e-6, atol=1e-6, err_msg=name)
        d_ours = jax.vmap(jax.grad(ours))(v)
        d_theirs = jax.vmap(jax.grad(lambda u: theirs(u)))(v)  # noqa: B023
        np.testing.assert_allclose(d_ours, d_theirs, rtol=1e-5, atol=1e-5, err_msg=f"d {name}")


def test_recurrent_dropout_inference_matches_keras_and_masks_follow_kerass_cell():
    """Keras's layer with recurrent_dropout in inference is ours in inference; in training, Keras's cell step fed our
    masks (per gate, on h_{t-1}) gives our step."""
    config = RNNConfig("gru", 1, H, I, recurrent_dropout=0.4)
    (layer,) = interop.keras_layers(config, return_state=True)
    assert layer.cell.recurrent_dropout == 0.4
    rng = np.random.default_rng(23)
    x, h0, _ = _inputs(config, rng)
    weights, biases = _random_canonical(config, rng)
    params = layout.canonical_to_params(weights, biases, config)
    layer.set_weights(interop.canonical_to_keras(weights, biases, config)[0])
    assert_outputs_close(run_xla(params, config, x, h0, None), _keras_run([layer], config, x, h0, None))

    # Training: Keras's cell, its masks replaced by ours (canonical gate order r, z, n; Keras's z, r, h), one step.
    for mode in ("gru", "gru_reset_before", "lstm", "rnn_tanh"):
        config = RNNConfig(mode, 1, H, I, recurrent_dropout=0.4)
        (layer,) = interop.keras_layers(config)
        weights, biases = _random_canonical(config, rng)
        params = layout.canonical_to_params(weights, biases, config)
        layer.set_weights(interop.canonical_to_keras(weights, biases, config)[0])
        key = jax.random.key(2)
        masks = np.asarray(jcr.dropout.recurrent_masks(key, config, B))[0]  # [G, B, H]
        order = [config.gate_names.index(g) for g in interop.KERAS_GATES[mode]]
        cell = layer.cell
        cell._recurrent_dropout_mask = (
            [jnp.asarray(masks[k]) for k in order] if config.num_gates > 1 else (jnp.asarray(masks[0]))
        )
        x1 = x[:1]
        state = [h0[0], np.zeros_like(h0[0])] if config.has_cell_state else [h0[0]]
        c0 = np.zeros((1, B, H), np.float32) if config.has_cell_state else None
        keras_h, _ = cell(x1[0], state, training=True)
        ours = jcr.rnn(params, x1, h0[:1], c0, config, is_training=True, dropout_key=key, implementation="xla")
        np.testing.assert_allclose(np.asarray(ours[1][0]), np.asarray(keras_h), rtol=1e-5, atol=1e-5, err_msg=mode)
        plain = jcr.rnn(params, x1, h0[:1], c0, config, implementation="xla")
        assert np.abs(np.asarray(plain[1][0]) - np.asarray(keras_h)).max() > 1e-3, mode  # the masks act
