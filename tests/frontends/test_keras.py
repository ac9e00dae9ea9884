"""jax_cudnn_rnn.keras's LSTM, GRU and SimpleRNN against Keras's own layers with the same weights: every mask pattern,
go_backwards, zero_output_for_mask, initial and final states, Bidirectional, stateful calls, input and recurrent
dropout, activations other than cuDNN's, the reset_after=False GRU, fit, .keras files; and every refused argument and
malformed input named in the error."""

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skips import REQUIRE_ONEDNN
from support import import_or_skip, jaxpr_eqns, require_extension

os.environ["KERAS_BACKEND"] = "jax"  # Keras reads it once, at its first import
keras = import_or_skip("keras")
if keras.backend.backend() != "jax":  # imported earlier with another backend: these tests would not test JAX Keras
    raise RuntimeError(f"keras was imported with backend {keras.backend.backend()!r} before this module set 'jax'")

import jax_cudnn_rnn as jcr  # noqa: E402
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


@pytest.mark.parametrize("ours_class, theirs_class, kwargs", LAYERS[:3], ids=IDS[:3])
def test_one_step_reads_the_variables_where_they_lie_and_equals_keras(ours_class, theirs_class, kwargs):
    """A one-step call (decoding, a rollout: Keras's stateless_call at T=1), forward and gradient, equals Keras's layer,
    and reads the layer's variables where they lie: no buffer of the whole weight space is assembled from them (a
    concatenation at every call, then the buffer's step: the LSTM's step at B=4, H=512 took 9x Flax's cell), and the
    LSTM's and SimpleRNN's kernels, whose gates Keras keeps in the canonical order, each enter one product whole."""
    ours, theirs = _pair(ours_class, theirs_class, kwargs, return_sequences=True, return_state=True)
    x, state = X[:, :1], _states(ours_class)

    def grads(layer):
        def loss(trainable, x, state):
            fixed = [v.value for v in layer.non_trainable_variables]
            out, _ = layer.stateless_call(trainable, fixed, x, initial_state=state)
            return sum(jnp.sum(jnp.sin(o)) for o in out), out

        return jax.grad(loss, argnums=(0, 1, 2), has_aux=True)

    trainable = {layer: [v.value for v in layer.trainable_variables] for layer in (ours, theirs)}
    got, want = (jax.jit(grads(layer))(trainable[layer], x, state) for layer in (ours, theirs))
    _assert_same(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), atol=1e-5)

    size = jcr.params_size(ours._rnn_config(I, "float32"))
    gates = ours.cell.kernel.shape[1] // H
    fixed = [v.value for v in ours.non_trainable_variables]
    forward = jax.jit(lambda w, x, s: ours.stateless_call(w, fixed, x, initial_state=s)[0])
    for program in (forward, jax.jit(grads(ours))):
        text = program.lower(trainable[ours], x, state).compile().as_text()
        assert not re.search(rf"\bf32\[{size}\]", text[text.index("ENTRY") :]), "a buffer was assembled"
    jaxpr = jax.make_jaxpr(forward)(trainable[ours], x, state).jaxpr
    products = [e.outvars[0].aval.shape for e in jaxpr_eqns(jaxpr) if e.primitive.name == "dot_general"]
    assert sorted(products) == [(B, gates * H)] * 2, products


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
    # use_cudnn=False is the xla implementation; True is decided per call (test_use_cudnn_behaves_as_keras); Keras's
    # use_cudnn attribute is False on the layer (Keras's fused path stays away), and get_config keeps the request.
    assert jk.GRU(H, use_cudnn=False).implementation == "xla"
    layer = jk.LSTM(H, use_cudnn=True)
    assert (layer.implementation, layer.cudnn_requested, layer.use_cudnn) == (None, True, False)
    assert jk.LSTM.from_config(layer.get_config()).cudnn_requested is True
    for legacy in (0, 1, 2):  # Keras's legacy implementation argument (0: old configs, computes as 2)
        layer = jk.LSTM(H, implementation=legacy)
        assert layer.implementation is None and layer.cell.implementation == legacy


@pytest.mark.parametrize("ours_class, theirs_class", [(jk.LSTM, keras.layers.LSTM), (jk.GRU, keras.layers.GRU)])
def test_use_cudnn_behaves_as_keras(ours_class, theirs_class):
    # use_cudnn=True where cuDNN cannot run the call: Keras's LSTM raises a ValueError at the call, its GRU runs its own
    # loop (off a GPU); where it can, both run cuDNN. Ours does what Keras's does on this machine.
    ours, theirs = _pair(ours_class, theirs_class, {}, use_cudnn=True, return_sequences=True)
    try:
        want, refusal = theirs(X), None
    except ValueError as error:
        want, refusal = None, str(error)
    if refusal is None:
        _assert_same(ours(X), want, atol=1e-5)
    else:
        assert "use_cudnn=True" in refusal
        with pytest.raises(ValueError, match=r"use_cudnn=True was specified, but cuDNN cannot run this call: it "):
            ours(X)
    ours, theirs = _pair(ours_class, theirs_class, {}, use_cudnn=False, return_sequences=True)
    assert ours.implementation == "xla"
    _assert_same(ours(X, mask=MASKS["holes"]), theirs(X, mask=MASKS["holes"]))


@pytest.mark.parametrize("ours_class, theirs_class, kwargs", LAYERS[:3], ids=IDS[:3])
def test_unroll_computes_what_keras_computes(ours_class, theirs_class, kwargs):
    # Keras unrolls its Python loop over the steps instead of a scan: the same arithmetic, which ours runs fused, but
    # a masked step outputs the previous output (zeros before the first valid step, not h0), zero_output_for_mask or
    # not.
    for go_backwards in (False, True):
        options = dict(return_sequences=True, return_state=True, go_backwards=go_backwards, unroll=True)
        ours, theirs = _pair(ours_class, theirs_class, kwargs, zero_output_for_mask=go_backwards, **options)
        _compare(ours, theirs, [None, MASKS["holes"], MASKS["left-padded"]], [_states(ours_class)])


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


def test_onednn_runs_masked_and_unmasked_layers():
    """oneDNN takes a mask as per-sequence lengths (issue 41), as the xla implementation does."""
    from jax_cudnn_rnn.backends.onednn import extension as onednn_extension

    require_extension(onednn_extension.EXTENSION, REQUIRE_ONEDNN)
    ours, theirs = _pair(jk.LSTM, keras.layers.LSTM, {}, implementation="onednn", return_state=True)
    _assert_same(ours(X), theirs(X), atol=1e-5)
    for mask in (MASKS["right-padded"], MASKS["holes"]):
        _assert_same(_jitted(ours)(X, None, mask), _jitted(theirs)(X, None, mask), atol=1e-5)


# Issue 40: what runs on the xla implementation, against Keras's own layer with the same weights.
BEYOND_CUDNN = [
    (jk.GRU, keras.layers.GRU, {"reset_after": False}),
    (jk.GRU, keras.layers.GRU, {"reset_after": False, "use_bias": False, "activation": "relu"}),
    (jk.LSTM, keras.layers.LSTM, {"activation": None, "recurrent_activation": "hard_sigmoid"}),  # None: linear
    (jk.LSTM, keras.layers.LSTM, {"activation": keras.activations.swish}),  # an activation object: by its name
    (jk.GRU, keras.layers.GRU, {"recurrent_activation": lambda v: keras.ops.sigmoid(2.0 * v)}),  # a callable
    (jk.SimpleRNN, keras.layers.SimpleRNN, {"activation": "selu"}),
]
BEYOND_IDS = ["gru_before", "gru_before-nobias-relu", "lstm-linear", "lstm-swish", "gru-callable", "rnn-selu"]


@pytest.mark.parametrize("ours_class, theirs_class, kwargs", BEYOND_CUDNN, ids=BEYOND_IDS)
def test_configurations_beyond_cudnn_equal_keras(ours_class, theirs_class, kwargs):
    """Outputs and final states (masked, backwards), and the gradients w.r.t. the inputs and every weight."""
    ours, theirs = _pair(ours_class, theirs_class, kwargs, return_sequences=True, return_state=True)
    assert [w.shape for w in ours.weights] == [w.shape for w in theirs.weights]
    for mask in (None, MASKS["holes"]):
        _assert_same(ours(X, mask=mask), theirs(X, mask=mask), atol=2e-6)
    weights = RNG.standard_normal((B, T, H)).astype(np.float32)

    def loss(layer, trainable, x):
        outputs, _ = layer.stateless_call(trainable, [v.value for v in layer.non_trainable_variables], x)
        return jnp.sum(outputs[0] * weights) + jnp.sum(outputs[1])

    grads = [
        jax.grad(lambda w, x, layer=layer: loss(layer, w, x), argnums=(0, 1))(
            [v.value for v in layer.trainable_variables], jnp.asarray(X)
        )
        for layer in (ours, theirs)
    ]
    _assert_same([*grads[0][0], grads[0][1]], [*grads[1][0], grads[1][1]], atol=1e-5)


def _recording_seeds(layer):
    """Records the seeds ``layer``'s cell draws from its seed generator (the last one keys our recurrent masks)."""
    generator, drawn = layer.cell.seed_generator, []
    draw = generator.next

    def next_seed(*args, **kwargs):
        drawn.append(draw(*args, **kwargs))
        return drawn[-1]

    generator.next = next_seed
    return drawn


@pytest.mark.parametrize(
    "ours_class, theirs_class, kwargs",
    [
        (jk.LSTM, keras.layers.LSTM, {}),
        (jk.GRU, keras.layers.GRU, {}),
        (jk.GRU, keras.layers.GRU, {"reset_after": False}),
        (jk.SimpleRNN, keras.layers.SimpleRNN, {}),
    ],
    ids=["lstm", "gru", "gru_before", "rnn_tanh"],
)
def test_recurrent_dropout_is_kerass(ours_class, theirs_class, kwargs):
    """Inference: Keras's layer (recurrent_dropout acts only in training). Training, with input dropout too: Keras's
    layer given the recurrent masks ours drew (per gate, Keras's order; the input masks per gate are Keras's own,
    from the same seed), so everything else is Keras's computation; the masks act, and the same seed gives the same
    result. recurrent_dropout=1, which Keras clamps and ignores, is no dropout."""
    from jax_cudnn_rnn import dropout, interop

    options = dict(dropout=0.3, recurrent_dropout=0.4, seed=7, return_sequences=True, return_state=True, **kwargs)
    ours, theirs = _pair(ours_class, theirs_class, {}, **options)
    _assert_same(ours(X, mask=MASKS["holes"]), theirs(X, mask=MASKS["holes"]))
    drawn = _recording_seeds(ours)
    got = ours(X, mask=MASKS["holes"], training=True)
    config = ours._rnn_config(I, jnp.float32)
    masks = np.asarray(dropout.recurrent_masks(drawn[-1], config, B))[0]  # [G, B, H], canonical gate order
    keras_order = [config.gate_names.index(g) for g in interop.KERAS_GATES[config.mode]]
    theirs.cell._recurrent_dropout_mask = (
        [jnp.asarray(masks[k]) for k in keras_order] if config.num_gates > 1 else jnp.asarray(masks[0])
    )
    _assert_same(got, theirs(X, mask=MASKS["holes"], training=True), atol=2e-6)
    assert not np.allclose(np.asarray(got[0]), np.asarray(ours(X, mask=MASKS["holes"])[0]), atol=1e-3)
    twin, _ = _pair(ours_class, theirs_class, {}, **options)
    twin.set_weights(ours.get_weights())
    twin(X, mask=MASKS["holes"])  # Keras's call draws its masks (and moves the seed) in inference too
    again = twin(X, mask=MASKS["holes"], training=True)
    _assert_same(again, got, atol=0)
    options.update(recurrent_dropout=1.0, dropout=0.0)
    ours, theirs = _pair(ours_class, theirs_class, {}, **options)
    _assert_same(ours(X, training=True), theirs(X, training=True))


def test_recurrent_dropout_masks_keep_the_rate_under_jit_and_grad():
    """The masks a layer's config draws zero recurrent_dropout of h's entries (a large batch); under jax.jit and
    jax.grad (Keras's stateless_call, as fit runs it) the layer trains, and each step's moved seed gives new masks."""
    from jax_cudnn_rnn import dropout

    layer = jk.GRU(H, recurrent_dropout=0.25, seed=1)
    layer.build((None, None, I))
    config = layer._rnn_config(I, jnp.float32)
    masks = np.asarray(dropout.recurrent_masks(jax.random.key(0), config, 4000))
    assert abs(np.mean(masks == 0) - 0.25) < 0.01
    trainable = [v.value for v in layer.trainable_variables]
    state = [v.value for v in layer.non_trainable_variables]

    @jax.jit
    def step(trainable, state):
        def loss(w):
            outputs, new_state = layer.stateless_call(w, state, jnp.asarray(X), training=True)
            return jnp.sum(outputs), new_state

        return jax.grad(loss, has_aux=True)(trainable)

    grads, state1 = step(trainable, state)
    grads2, _ = step(trainable, state1)  # the seed generator moved on: new masks
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)
    assert not np.allclose(np.asarray(grads[1]), np.asarray(grads2[1]))


def test_refused_arguments_are_named():
    cases = [
        (dict(use_cudnn="yes"), ValueError, r"use_cudnn is 'yes'; expected 'auto', True or False"),
        (dict(use_cudnn=True, implementation="xla"), ValueError, r"use_cudnn=True contradicts implementation='xla'"),
        (dict(implementation=3), ValueError, r"implementation is 3; expected None, one of rnn\(\)'s"),
        (dict(implementation=["xla"]), TypeError, r"implementation must be None or a str, got list"),
        (dict(precision=0.5), TypeError, r"precision must be None or a str"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            jk.LSTM(H, **kwargs)
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


def _keras_model():
    """A Keras model with its RNN layers nested (named: the report's paths are the names): a nested Sequential holding
    a masked Bidirectional LSTM and two GRUs (one with Keras 2's reset_after=False), a TimeDistributed SimpleRNN on a
    second branch; trained one step."""
    keras.utils.set_random_seed(2)
    inner = keras.Sequential(
        [
            keras.Input((T, I)),
            keras.layers.Masking(0.0),
            keras.layers.Bidirectional(keras.layers.LSTM(H, return_sequences=True, name="lstm"), name="bidirectional"),
            keras.layers.GRU(H, return_sequences=True, name="gru"),
            keras.layers.GRU(H, reset_after=False, name="gru_before"),
        ],
        name="inner",
    )
    inputs = keras.Input((T, I))
    b = keras.layers.Reshape((T, 2, I // 2))(inputs)
    b = keras.layers.Flatten()(
        keras.layers.TimeDistributed(
            keras.layers.SimpleRNN(3, activation="relu", name="simple_rnn"), name="time_distributed"
        )(b)
    )
    outputs = keras.layers.Dense(2)(keras.layers.Concatenate()([inner(inputs), b]))
    model = keras.Model(inputs, outputs, name="outer")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model


def test_swap_layers_puts_ours_into_a_saved_model_with_its_weights(tmp_path):
    x = RNG.standard_normal((B, T, I)).astype(np.float32)
    x[1, 4:] = 0  # masked by the Masking layer
    model = _keras_model()
    model.train_on_batch(x, RNG.standard_normal((B, 2)).astype(np.float32))
    path = tmp_path / "model.keras"
    model.save(path)
    expected = [
        ("outer/inner/bidirectional/forward_lstm", "LSTM", None),
        ("outer/inner/bidirectional/backward_lstm", "LSTM", None),
        ("outer/inner/gru", "GRU", None),
        ("outer/inner/gru_before", "GRU", None),  # Keras 2's reset_after=False GRU too
        ("outer/time_distributed/simple_rnn", "SimpleRNN", None),
    ]
    for source in (str(path), model):
        swapped, swaps = jk.swap_layers(source)
        assert sorted((s.path, s.class_name, s.kept) for s in swaps) == sorted(expected), [str(s) for s in swaps]
        inner = swapped.get_layer("inner")
        bidirectional = inner.get_layer("bidirectional")
        assert type(bidirectional.forward_layer) is jk.LSTM and type(bidirectional.backward_layer) is jk.LSTM
        assert type(inner.get_layer("gru")) is jk.GRU and type(inner.get_layer("gru_before")) is jk.GRU
        assert type(swapped.get_layer("time_distributed").layer) is jk.SimpleRNN
        for ours, theirs in zip(swapped.get_weights(), model.get_weights(), strict=True):
            np.testing.assert_array_equal(ours, theirs)
        for ours, theirs in zip(swapped.optimizer.variables, model.optimizer.variables, strict=True):
            np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
        if source is model:  # the same route once saved: its outputs are the file's
            _assert_same(swapped.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-5)
    # The original is untouched.
    assert type(model.get_layer("inner").get_layer("bidirectional").forward_layer) is keras.layers.LSTM
    with pytest.raises(TypeError, match=r"model must be a keras.Model or the path of a saved model, got int"):
        jk.swap_layers(3)
