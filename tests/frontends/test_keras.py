"""jax_cudnn_rnn.keras's LSTM, GRU and SimpleRNN against Keras's own layers with the same weights: every mask pattern,
go_backwards, zero_output_for_mask, initial and final states, Bidirectional, stateful calls, input dropout, fit,
.keras files; and every refused argument and malformed input named in the error."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skips import REQUIRE_ONEDNN
from support import import_or_skip, require_extension

os.environ["KERAS_BACKEND"] = "jax"  # Keras reads it once, at its first import
keras = import_or_skip("keras")
if keras.backend.backend() != "jax":  # imported earlier with another backend: these tests would not test JAX Keras
    raise RuntimeError(f"keras was imported with backend {keras.backend.backend()!r} before this module set 'jax'")

from jax_cudnn_rnn import keras as jk  # noqa: E402

# Nearly every test here runs Keras's own layers beside ours, and Keras is not strict-clean: its cells add a bias [N] to
# [B, N] (keras.layers.LSTM under rank promotion "raise": "Operands could not be broadcast together for add on shapes
# (2, 16) (16,)"). Our layers under the strict settings: tests/frontends/test_strict_frontends.py.
pytestmark = pytest.mark.peer_promotion(reason="Keras's own cells add a rank-1 bias to a [B, N] operand")

B, T, I, H = 3, 6, 4, 5
# (ours, Keras's, constructor arguments): the three layers, SimpleRNN with both of cuDNN's activations.
LAYERS = [
    (jk.LSTM, keras.layers.LSTM, {}),
    (jk.GRU, keras.layers.GRU, {}),
    (jk.SimpleRNN, keras.layers.SimpleRNN, {}),
    (jk.SimpleRNN, keras.layers.SimpleRNN, {"activation": "relu"}),
]
IDS = ["lstm", "gru", "rnn_tanh", "rnn_relu"]
RNG = np.random.default_rng(0)
X = RNG.standard_normal((B, T, I)).astype(np.float32)
MASKS = {
    "none": None,
    "right-padded": np.arange(T)[None] < np.array([T, 2, 0])[:, None],  # with a full and an empty sequence
    "left-padded": np.arange(T)[None] >= np.array([0, 4, 1])[:, None],  # keras.utils.pad_sequences' default
    "holes": np.array([[1, 0, 1, 1, 0, 1], [0, 0, 1, 0, 1, 1], [1, 1, 1, 1, 1, 0]], bool),
}


def _pair(ours_class, theirs_class, kwargs, batch=None, **options):
    """Our layer and Keras's, built for [batch, T, I], holding the same random weights (biases nonzero)."""
    theirs = theirs_class(H, **kwargs, **options)
    ours = ours_class(H, **kwargs, **options)
    theirs.build((batch, None, I))
    ours.build((batch, None, I))
    weights = [RNG.normal(0, 0.5, a.shape).astype(np.float32) for a in theirs.get_weights()]
    theirs.set_weights(weights)
    ours.set_weights(weights)
    return ours, theirs


def _assert_same(ours, theirs, atol=1e-6):
    ours, theirs = (list(v) if isinstance(v, (list, tuple)) else [v] for v in (ours, theirs))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol, rtol=1e-5)


def _jitted(layer):
    """``layer(x, initial_state=state, mask=mask)`` under jax.jit: an eager Keras call traces afresh every time (half
    a second, Keras's layers and ours alike); jitted, the mask patterns share one compilation."""
    return jax.jit(lambda x, state, mask: layer(x, initial_state=state, mask=mask))


def _compare(ours, theirs, masks, states):
    run_ours, run_theirs = _jitted(ours), _jitted(theirs)
    for mask in masks:
        for state in states:
            _assert_same(run_ours(X, state, mask), run_theirs(X, state, mask))


def _states(layer_class):
    return [RNG.standard_normal((B, H)).astype(np.float32) for _ in range(2 if layer_class is jk.LSTM else 1)]


def test_lstm_equals_keras_for_every_mask_direction_and_masked_output():
    for go_backwards in (False, True):
        for zero_output in (False, True):
            ours, theirs = _pair(
                jk.LSTM,
                keras.layers.LSTM,
                {},
                return_sequences=True,
                return_state=True,
                go_backwards=go_backwards,
                zero_output_for_mask=zero_output,
            )
            _compare(ours, theirs, [m for m in MASKS.values() if m is not None], [_states(jk.LSTM)])
    _compare(ours, theirs, [None], [None])  # unmasked, zero initial states


@pytest.mark.parametrize("ours_class, theirs_class, kwargs", LAYERS, ids=IDS)
def test_every_layer_equals_keras(ours_class, theirs_class, kwargs):
    ours, theirs = _pair(ours_class, theirs_class, kwargs, return_sequences=True, return_state=True, go_backwards=True)
    assert ours.get_weights()[0].shape == (I, {"lstm": 4, "gru": 3}.get(ours._mode, 1) * H)
    _compare(ours, theirs, [MASKS["holes"], MASKS["right-padded"]], [_states(ours_class)])
    ours, theirs = _pair(ours_class, theirs_class, kwargs, return_state=True, zero_output_for_mask=True)
    _compare(ours, theirs, [None, MASKS["left-padded"]], [None])
    # A layer's weights going back to Keras, eagerly.
    theirs.set_weights([2 * w for w in ours.get_weights()])
    ours.set_weights(theirs.get_weights())
    _assert_same(ours(X), theirs(X))


@pytest.mark.parametrize(
    "ours_class, theirs_class",
    [(jk.LSTM, keras.layers.LSTM), (jk.GRU, keras.layers.GRU), (jk.SimpleRNN, keras.layers.SimpleRNN)],
    ids=IDS[:3],
)
def test_without_biases(ours_class, theirs_class):
    ours, theirs = _pair(ours_class, theirs_class, {}, use_bias=False, return_sequences=True)
    assert len(ours.get_weights()) == 2 and ours.cell.bias is None
    _compare(ours, theirs, [MASKS["holes"]], [None])


def test_gradients_through_a_masked_backward_layer_equal_keras():
    ours, theirs = _pair(jk.LSTM, keras.layers.LSTM, {}, go_backwards=True, return_sequences=True)
    state = _states(jk.LSTM)

    def grads(layer):
        def loss(trainable, x, state):
            fixed = [v.value for v in layer.non_trainable_variables]
            out, _ = layer.stateless_call(trainable, fixed, x, initial_state=state, mask=MASKS["holes"])
            return jnp.sum(jnp.sin(out))

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))([v.value for v in layer.trainable_variables], X, state)

    _assert_same(jax.tree_util.tree_leaves(grads(ours)), jax.tree_util.tree_leaves(grads(theirs)), atol=1e-5)


def test_bidirectional_runs_our_layers_and_equals_keras():
    # Keras's Bidirectional would swap an LSTM for its own fused one unless use_cudnn says no; ours says no.
    ours = keras.layers.Bidirectional(jk.LSTM(H, return_sequences=True, return_state=True))
    theirs = keras.layers.Bidirectional(keras.layers.LSTM(H, return_sequences=True, return_state=True))
    assert type(ours.forward_layer) is jk.LSTM and type(ours.backward_layer) is jk.LSTM
    assert ours.backward_layer.go_backwards and ours.forward_layer.use_cudnn is False
    for layer in (ours, theirs):
        layer.build((None, None, I))
    theirs.set_weights([RNG.normal(0, 0.5, w.shape).astype(np.float32) for w in theirs.get_weights()])
    ours.set_weights(theirs.get_weights())
    state = [RNG.standard_normal((B, H)).astype(np.float32) for _ in range(4)]
    _compare(ours, theirs, [None, MASKS["right-padded"], MASKS["holes"]], [state])
    ours_gru = keras.layers.Bidirectional(jk.GRU(H), merge_mode="sum")
    theirs_gru = keras.layers.Bidirectional(keras.layers.GRU(H), merge_mode="sum")
    for layer in (ours_gru, theirs_gru):
        layer.build((None, None, I))
    ours_gru.set_weights(theirs_gru.get_weights())
    _compare(ours_gru, theirs_gru, [MASKS["left-padded"]], [None])


def _model(layer_class, **options):
    keras.utils.set_random_seed(1)
    return keras.Sequential(
        [
            keras.Input((T, I)),
            keras.layers.Masking(0.0),
            keras.layers.Bidirectional(layer_class(H, return_sequences=True, **options)),
            layer_class(H, **options),
            keras.layers.Dense(2),
        ]
    )


def test_fit_one_epoch_equals_keras_and_a_keras_file_restores_the_model(tmp_path):
    x = RNG.standard_normal((16, T, I)).astype(np.float32)
    x[:, 4:] = 0  # the Masking layer masks steps 4, 5 of every sequence, and 2.. of sequence 3
    x[3, 2:] = 0
    y = RNG.standard_normal((16, 2)).astype(np.float32)
    ours, theirs = _model(jk.GRU, implementation="xla"), _model(keras.layers.GRU)
    ours.set_weights(theirs.get_weights())
    losses = []
    for model in (ours, theirs):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        losses.append(model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0).history["loss"])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)

    path = str(tmp_path / "model.keras")
    ours.save(path)
    restored = keras.models.load_model(path)
    assert type(restored.layers[-2]) is jk.GRU and type(restored.layers[1].forward_layer) is jk.GRU
    assert restored.layers[-2].implementation == "xla"
    np.testing.assert_array_equal(np.asarray(restored.predict(x, verbose=0)), np.asarray(ours.predict(x, verbose=0)))


def test_get_config_round_trip_keeps_the_extras():
    layer = jk.LSTM(
        H,
        return_sequences=True,
        go_backwards=True,
        implementation="reference",
        precision="float32",
        kernel_regularizer="l2",
        use_bias=False,
    )
    clone = jk.LSTM.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert (clone.implementation, clone.precision, clone.go_backwards, clone.use_bias) == (
        "reference",
        "float32",
        True,
        False,
    )
    # use_cudnn maps onto implementation and is then False on the layer (Keras's fused path stays away).
    assert jk.GRU(H, use_cudnn=False).implementation == "xla"
    assert jk.GRU(H, use_cudnn=True).implementation == "cudnn"
    assert jk.LSTM(H, implementation=1).implementation is None and jk.LSTM(H, implementation=1).cell.implementation == 1


def test_stateful_calls_carry_the_state_like_keras():
    ours, theirs = _pair(jk.LSTM, keras.layers.LSTM, {}, batch=B, stateful=True, return_sequences=True)
    for _ in range(2):
        _assert_same(ours(X), theirs(X))
    _assert_same(ours.states, theirs.states)
    ours.reset_state()
    theirs.reset_state()
    _assert_same(ours(X, mask=MASKS["holes"]), theirs(X, mask=MASKS["holes"]))


@pytest.mark.parametrize("ours_class, theirs_class, kwargs", LAYERS[:3], ids=IDS[:3])
def test_input_dropout_draws_keras_masks(ours_class, theirs_class, kwargs):
    ours, theirs = _pair(ours_class, theirs_class, kwargs, dropout=0.4, seed=3, return_sequences=True)
    dropped = ours(X, training=True)
    _assert_same(dropped, theirs(X, training=True))
    assert not np.allclose(np.asarray(dropped), np.asarray(ours(X, training=False)))
    _assert_same(ours(X, training=False), theirs(X, training=False))


def test_regularizers_and_a_mixed_precision_policy_behave_like_keras():
    ours, theirs = _pair(jk.GRU, keras.layers.GRU, {}, kernel_regularizer="l2", recurrent_regularizer="l1")
    _assert_same(ours.losses, theirs.losses)
    ours, theirs = _pair(jk.LSTM, keras.layers.LSTM, {}, dtype="mixed_bfloat16", return_sequences=True)
    got, want = (_jitted(layer)(X, None, MASKS["holes"]) for layer in (ours, theirs))
    assert got.dtype == want.dtype == "bfloat16"
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), atol=3e-2)


def test_onednn_runs_an_unmasked_layer():
    from jax_cudnn_rnn.backends.onednn import extension as onednn_extension

    require_extension(onednn_extension.EXTENSION, REQUIRE_ONEDNN)
    ours, theirs = _pair(jk.LSTM, keras.layers.LSTM, {}, implementation="onednn", return_state=True)
    _assert_same(ours(X), theirs(X), atol=1e-5)
    with pytest.raises(ValueError, match=r"mask was given, but implementation='onednn' has no per-sequence lengths"):
        ours(X, mask=MASKS["holes"])


def test_refused_arguments_are_named():
    cases = [
        (dict(recurrent_dropout=0.2), ValueError, r"recurrent_dropout is 0.2; a fused RNN kernel cannot"),
        (dict(dropout=0.2, implementation=1), ValueError, r"dropout=0.2 with Keras's implementation=1"),
        (dict(activation="relu"), ValueError, r"activation is 'relu'; cuDNN's LSTM uses tanh"),
        (dict(recurrent_activation="hard_sigmoid"), ValueError, r"recurrent_activation is 'hard_sigmoid'"),
        (dict(unroll=True), ValueError, r"unroll is True"),
        (dict(use_cudnn="yes"), ValueError, r"use_cudnn is 'yes'; expected 'auto', True or False"),
        (dict(use_cudnn=True, implementation="xla"), ValueError, r"use_cudnn=True contradicts implementation='xla'"),
        (dict(implementation=3), ValueError, r"implementation is 3; expected None, one of rnn\(\)'s"),
        (dict(implementation=["xla"]), TypeError, r"implementation must be None or a str, got list"),
        (dict(precision=0.5), TypeError, r"precision must be None or a str"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            jk.LSTM(H, **kwargs)
    with pytest.raises(ValueError, match=r"reset_after is False; cuDNN's GRU"):
        jk.GRU(H, reset_after=False)
    with pytest.raises(ValueError, match=r"activation is 'sigmoid'; cuDNN's vanilla RNN uses tanh or relu"):
        jk.SimpleRNN(H, activation="sigmoid")
    with pytest.raises(ValueError, match=r"implementation is 2; SimpleRNN has no Keras implementation modes"):
        jk.SimpleRNN(H, implementation=2)


@pytest.mark.parametrize("layer_class", [jk.LSTM, jk.GRU, jk.SimpleRNN], ids=IDS[:3])
def test_malformed_inputs_states_and_masks_are_named(layer_class):
    layer = layer_class(H)
    with pytest.raises(ValueError, match=r"inputs has shape \(3, 4\); expected rank 3 \(batch, timesteps, "):
        layer(X[:, 0])  # an unbuilt layer checks before it builds
    layer(X)
    with pytest.raises(
        ValueError,
        match=r"inputs has shape \(3, 6, 2\); expected \(B, T, 4\): its last axis must be "
        r"the number of features the layer was built for",
    ):
        layer(X[..., :2])
    names = ["h", "c"] if layer_class is jk.LSTM else ["h"]
    good = [np.zeros((B, H), np.float32) for _ in names]
    with pytest.raises(
        ValueError,
        match=rf"initial_state has {len(names) + 1} tensors; expected {len(names)}: "
        rf"\[{', '.join(names)}\], each \(batch, units\) = \(3, 5\)",
    ):
        layer(X, initial_state=good + good[:1])
    for i, name in enumerate(names):
        bad = list(good)
        bad[i] = np.zeros((B + 1, H), np.float32)
        with pytest.raises(
            ValueError,
            match=rf"initial_state\[{i}\] \({name}\) has shape \(4, 5\); expected "
            rf"\(3, 5\) = \(batch, units\)",
        ):
            layer(X, initial_state=bad)
    with pytest.raises(
        ValueError,
        match=r"inputs has shape \(6, 3, 4\) and initial_state\[0\] \(h\) \(3, 5\): .* "
        r"The layer takes batch-major inputs \[B, T, features\]; inputs looks "
        r"time-major \[T, B, features\]: pass keras.ops.swapaxes\(inputs, 0, 1\)",
    ):
        layer(np.swapaxes(X, 0, 1), initial_state=good)  # the state's batch is the time-major inputs' second axis
    with pytest.raises(TypeError, match=r"initial_state\[0\] must be an array, got str"):
        layer(X, initial_state=["zeros"] * len(names))  # (Keras itself refuses arrays mixed with non-arrays)
    with pytest.raises(
        ValueError,
        match=r"mask has shape \(3, 5\); expected \(3, 6\) = \(batch, timesteps\) of "
        r"inputs",
    ):
        layer(X, mask=np.ones((B, T - 1), bool))


def test_importing_the_keras_layers_imports_neither_flax_nor_equinox_and_sets_nothing():
    code = (
        "import os, sys; before = dict(os.environ); import jax_cudnn_rnn.keras; "
        "bad = [m for m in ('flax', 'equinox') if m in sys.modules]; assert not bad, bad; "
        "changed = {k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)}; "
        "assert changed <= {'TF_CPP_MIN_LOG_LEVEL', 'TPU_SKIP_MDS_QUERY'}, changed"
    )  # what jax itself sets
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "KERAS_BACKEND": "jax"}, timeout=120)


def test_keras_on_another_backend_is_a_clear_import_error():
    code = "import keras, jax_cudnn_rnn.keras"
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KERAS_BACKEND": "numpy"},
    )
    assert run.returncode != 0 and "Set the environment variable KERAS_BACKEND=jax" in run.stderr, run.stderr[-2000:]
