"""jax_cudnn_rnn.equinox's LSTM, GRU and RNN: against a scan over eqx.nn cells holding the same weights (and the NumPy
oracle for the vanilla RNN, which Equinox lacks), jax.vmap against a loop and as one kernel call, gradients, optax,
serialisation, dropout, and every malformed argument named in the error."""

import operator
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skips import REQUIRE_ONEDNN
from strict_promotion import OPTAX_ADAM, peer_promotion
from support import import_or_skip, jaxpr_eqns, oracle, require_extension

eqx = import_or_skip("equinox")
optax = import_or_skip("optax")

import jax_cudnn_rnn as jcr  # noqa: E402
from jax_cudnn_rnn import equinox as je  # noqa: E402
from jax_cudnn_rnn import interop  # noqa: E402

T, I, H = 6, 3, 4
# Both modes Equinox has cells for, both directions, stacked (the stacking and directions are rnn()'s, tested there).
CASES = [(je.LSTM, 2, False), (je.GRU, 2, True)]
IDS = ["lstm-2-uni", "gru-2-bi"]


@eqx.filter_jit
def _call(model, x, state=None, seq_length=None):
    """``model(x, state, seq_length=...)`` compiled: an eager call traces rnn() afresh each time (a quarter second)."""
    return model(x, state, seq_length=seq_length)


@eqx.filter_jit
def _scan_cells(cells, x, state):
    """What the module computes, by Equinox's cells ``cells[layer][direction]`` scanned over one sequence x [T, I]
    (the backward cell over reversed time), layer outputs concatenated forward first; state as the module's."""
    lstm = isinstance(cells[0][0], eqx.nn.LSTMCell)
    directions = len(cells[0])
    finals = []
    for layer, row in enumerate(cells):
        outputs = []
        for direction, cell in enumerate(row):
            index = layer * directions + direction
            carry = (state[0][index], state[1][index]) if lstm else state[index]

            def step(carry, x_t, cell=cell):
                carry = cell(x_t, carry)
                return carry, carry[0] if lstm else carry

            final, ys = jax.lax.scan(step, carry, x if direction == 0 else x[::-1])
            outputs.append(ys if direction == 0 else ys[::-1])
            finals.append(final)
        x = jnp.concatenate(outputs, axis=-1)
    if lstm:
        return x, (jnp.stack([f[0] for f in finals]), jnp.stack([f[1] for f in finals]))
    return x, jnp.stack(finals)


def _state(model, key):
    shape = model.config.state_shape(1)[::2]
    h = 0.5 * jax.random.normal(key, shape)
    return (h, 0.5 * jax.random.normal(jax.random.fold_in(key, 1), shape)) if model.config.mode == "lstm" else h


def _close(a, b, atol=1e-5):
    for p, q in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(p), np.asarray(q), atol=atol)


@pytest.mark.parametrize("cls, num_layers, bidirectional", CASES, ids=IDS)
def test_modules_equal_a_scan_over_equinox_cells(cls, num_layers, bidirectional):
    model = cls(I, H, num_layers=num_layers, bidirectional=bidirectional, key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (T, I))
    state = _state(model, jax.random.key(2))
    y, final = _call(model, x, state)
    assert y.shape == (T, (2 if bidirectional else 1) * H)
    _close((y, final), _scan_cells(model.to_cells(), x, state))
    zeros = jax.tree_util.tree_map(jnp.zeros_like, state)
    _close(_call(model, x), _scan_cells(model.to_cells(), x, zeros))  # state=None: zeros

    # Equinox's own cells (Equinox draws its biases too) -> a module, and back.
    cell_class = eqx.nn.LSTMCell if cls is je.LSTM else eqx.nn.GRUCell
    keys = iter(jax.random.split(jax.random.key(3), 4))
    cells = [
        [
            cell_class(I if layer == 0 else (2 if bidirectional else 1) * H, H, key=next(keys))
            for _ in range(2 if bidirectional else 1)
        ]
        for layer in range(num_layers)
    ]
    ported = cls.from_cells(cells)
    assert ported.config.num_layers == num_layers and ported.config.num_directions == (2 if bidirectional else 1)
    _close(_call(ported, x, state), _scan_cells(cells, x, state))
    if cls is je.GRU:  # GRU's biases come back exactly; LSTM's summed (interop's tests)
        _close(ported.to_cells(), cells, atol=0)

    # seq_length: the steps before it alone, zeros after (the backward direction starts at seq_length - 1).
    length = 4
    y_short, final_short = _call(model, x[:length], state)
    y_len, final_len = _call(model, x, state, jnp.int32(length))
    _close((y_len[:length], final_len), (y_short, final_short))
    np.testing.assert_array_equal(np.asarray(y_len[length:]), 0.0)


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_vanilla_rnn_equals_the_oracle(nonlinearity):
    model = je.RNN(I, H, nonlinearity=nonlinearity, num_layers=2, bidirectional=True, key=jax.random.key(4))
    x = jax.random.normal(jax.random.key(5), (T, I))
    state = _state(model, jax.random.key(6))
    y, h = model(x, state)
    want_y, want_h, _ = oracle(model.config, model.params.buffer, x[:, None], state[:, None], None)
    np.testing.assert_allclose(np.asarray(y), want_y[:, 0], atol=1e-5)
    np.testing.assert_allclose(np.asarray(h), want_h[:, 0], atol=1e-5)
    assert not hasattr(je.RNN, "to_cells") and not hasattr(je.RNN, "from_cells")  # Equinox has no vanilla cell


def test_vmap_is_one_fused_call_and_equals_a_loop():
    from jax_cudnn_rnn.backends.onednn import extension as onednn_extension

    model = je.LSTM(I, H, num_layers=2, bidirectional=True, key=jax.random.key(7))
    xs = jax.random.normal(jax.random.key(8), (5, T, I))
    states = jax.vmap(lambda k: _state(model, k))(jax.random.split(jax.random.key(9), 5))
    lengths = jnp.array([6, 1, 3, 0, 5], jnp.int32)
    got = jax.vmap(model)(xs, states, seq_length=lengths)
    for n in range(5):
        one = jax.tree_util.tree_map(operator.itemgetter(n), (xs, states, lengths))
        _close(jax.tree_util.tree_map(operator.itemgetter(n), got), _call(model, *one))

    require_extension(onednn_extension.EXTENSION, REQUIRE_ONEDNN)
    fused = je.LSTM(I, H, num_layers=2, bidirectional=True, implementation="onednn", key=jax.random.key(7))
    jaxpr = jax.make_jaxpr(jax.vmap(fused))(xs, states).jaxpr
    calls = [eqn for eqn in jaxpr_eqns(jaxpr) if eqn.primitive.name == "ffi_call"]
    # One forward over the folded batch, after its weights call (on the params, which are not mapped).
    targets = [eqn.params.get("target_name") for eqn in calls]
    assert targets == [onednn_extension.WEIGHTS_TARGET, onednn_extension.FORWARD_TARGET], targets
    assert calls[1].invars[0].aval.shape[1] == 5  # [T, batch, I]: the five sequences folded into one batch
    _close(jax.vmap(fused)(xs, states), jax.vmap(model)(xs, states))
    # oneDNN takes lengths too (issue 41), under vmap as well.
    _close(jax.vmap(fused)(xs, states, seq_length=lengths), got)


def test_gradients_equal_the_equinox_cells_and_optax_trains_with_filter_jit():
    model = je.GRU(I, H, num_layers=2, key=jax.random.key(10))
    xs = jax.random.normal(jax.random.key(11), (3, T, I))
    target = jax.random.normal(jax.random.key(12), (3, T, H))

    def loss(m, run):
        return jnp.mean((jax.vmap(run, in_axes=(None, 0))(m, xs) - target) ** 2)

    ours = eqx.filter_grad(loss)(model, lambda m, x: m(x)[0])
    cells = model.to_cells()
    theirs = eqx.filter_grad(loss)(cells, lambda c, x: _scan_cells(c, x, jnp.zeros((2, H)))[0])
    # The cells' gradients in canonical form: every matrix's; the bias of r and z (b_W + b_R in a cell) and the
    # input bias of n go to the input biases, n's recurrent bias (bias_n) to its own, the others' come back zero.
    w_theirs, b_theirs = interop.equinox_to_canonical(theirs, model.config)
    w_ours, b_ours = jcr.params_to_canonical(ours.params.buffer, model.config)
    _close(w_ours, w_theirs)
    for slot, got, want in zip(jcr.layout.param_slots(model.config)[1], b_ours, b_theirs, strict=True):
        if slot.group == "b_input" or model.config.gate_names[slot.gate] == "n":
            _close(got, want)

    optimizer = optax.adam(1e-2)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def step(m, opt_state):
        value, grads = eqx.filter_value_and_grad(loss)(m, lambda m, x: m(x)[0])
        with peer_promotion(OPTAX_ADAM):
            updates, opt_state = optimizer.update(grads, opt_state)
        return eqx.apply_updates(m, updates), opt_state, value

    losses = []
    for _ in range(5):
        model, opt_state, value = step(model, opt_state)
        losses.append(float(value))
    assert losses[-1] < losses[0] and isinstance(model.params, jcr.RNNParams)


def test_serialised_leaves_restore_into_a_fresh_module(tmp_path):
    model = je.LSTM(I, H, bidirectional=True, key=jax.random.key(13))
    path = tmp_path / "model.eqx"
    eqx.tree_serialise_leaves(path, model)
    fresh = je.LSTM(I, H, bidirectional=True, key=jax.random.key(14))
    restored = eqx.tree_deserialise_leaves(path, fresh)
    np.testing.assert_array_equal(np.asarray(restored.params.buffer), np.asarray(model.params.buffer))
    x = jax.random.normal(jax.random.key(15), (T, I))
    _close(restored(x), model(x), atol=0)


def test_dropout_between_layers_follows_the_key_and_inference_mode():
    model = je.LSTM(I, H, num_layers=3, dropout=0.5, key=jax.random.key(16))
    x = jax.random.normal(jax.random.key(17), (T, I))
    key = jax.random.key(18)
    y, _ = model(x, key=key)
    want, _, _ = jcr.rnn(
        model.params,
        x[:, None],
        *(jnp.zeros((3, 1, H)),) * 2,
        is_training=True,
        dropout_key=key,
        implementation="reference",
    )
    np.testing.assert_allclose(np.asarray(y), np.asarray(want[:, 0]), atol=1e-5)
    quiet = eqx.nn.inference_mode(model)
    assert quiet.inference and not np.allclose(np.asarray(quiet(x)[0]), np.asarray(y))
    with pytest.raises(ValueError, match=r"key is None; dropout=0.5 between the 3 layers needs a PRNG key"):
        model(x)
    keys = jax.random.split(key, 2)  # one key per sequence under vmap
    ys, _ = jax.vmap(model)(jnp.stack([x, x]), key=keys)
    np.testing.assert_allclose(np.asarray(ys[0]), np.asarray(model(x, key=keys[0])[0]), atol=1e-5)


def test_constructor_errors_name_the_argument():
    key = jax.random.key(0)
    cases = [
        (dict(hidden_size=0), ValueError, r"hidden_size must be >= 1, got 0"),
        (dict(input_size=2.0), TypeError, r"input_size must be an int, got float 2.0"),
        (dict(num_layers="2"), TypeError, r"num_layers must be an int, got str"),
        (dict(bidirectional="yes"), TypeError, r"bidirectional must be a bool, got str 'yes'"),
        (dict(use_bias=1), TypeError, r"use_bias must be a bool, got int 1"),
        (dict(dropout=1.5), ValueError, r"dropout must be a float in \[0, 1\), got 1.5"),
        (dict(key=None), ValueError, r"key is None; pass a JAX PRNG key"),
    ]
    for change, error, message in cases:
        kwargs = dict(input_size=I, hidden_size=H, key=key) | change
        with pytest.raises(error, match=message):
            je.LSTM(kwargs.pop("input_size"), kwargs.pop("hidden_size"), **kwargs)
    with pytest.raises(ValueError, match=r"nonlinearity is 'sigmoid'; expected 'tanh' or 'relu'"):
        je.RNN(I, H, nonlinearity="sigmoid", key=key)
    with pytest.raises(TypeError, match=r"cells must be a non-empty list of lists"):
        je.LSTM.from_cells(eqx.nn.LSTMCell(I, H, key=key))
    with pytest.raises(TypeError, match=r"cells\[0\]\[0\] is a GRUCell; expected eqx.nn.LSTMCell"):
        je.LSTM.from_cells([[eqx.nn.GRUCell(I, H, key=key)]])


def test_call_errors_name_the_argument():
    lstm = je.LSTM(I, H, num_layers=2, key=jax.random.key(0))
    gru = je.GRU(I, H, key=jax.random.key(0))
    x = jnp.zeros((T, I))
    h = jnp.zeros((2, H))
    cases = [
        (
            lstm,
            dict(x=jnp.zeros((2, T, I))),
            ValueError,
            r"x has shape \(2, 6, 3\); expected rank 2 \(time, input_size\) = \(T, 3\) \(unbatched: jax.vmap",
        ),
        (lstm, dict(x=jnp.zeros((T, I + 1))), ValueError, r"x has shape \(6, 4\); expected \(T, 3\)"),
        (lstm, dict(x=jnp.zeros((T, I), jnp.float16)), TypeError, r"x has dtype float16; expected float32"),
        (lstm, dict(x=[[0.0] * I] * T), TypeError, r"x must be an array, got list"),
        (
            lstm,
            dict(state=h),
            TypeError,
            r"state must be a tuple \(h, c\) for an LSTM, each \(2, 4\) = "
            r"\(num_layers\*num_directions, hidden_size\); got a ArrayImpl",
        ),
        (lstm, dict(state=(h,)), TypeError, r"state must be a tuple \(h, c\) .*got a tuple of 1"),
        (lstm, dict(state=(h[:1], h)), ValueError, r"state\[0\] \(h\) has shape \(1, 4\); expected \(2, 4\)"),
        (lstm, dict(state=(h, h[None])), ValueError, r"state\[1\] \(c\) has shape \(1, 2, 4\); expected \(2, 4\)"),
        (lstm, dict(state=(h, h.astype(jnp.float16))), TypeError, r"state\[1\] \(c\) has dtype float16"),
        (gru, dict(state=(h[:1], h[:1])), TypeError, r"state must be an array, got tuple"),
        (gru, dict(state=h), ValueError, r"state has shape \(2, 4\); expected \(1, 4\) = "),
        (gru, dict(seq_length=jnp.array([3], jnp.int32)), ValueError, r"seq_length has shape \(1,\); expected \(\)"),
        (gru, dict(seq_length=jnp.array(3.0)), TypeError, r"seq_length has dtype float32; expected an integer"),
        (gru, dict(seq_length=T + 1), ValueError, r"seq_length is 7; every length must be in \[0, 6\] = \[0, time\]"),
    ]
    for model, change, error, message in cases:
        kwargs = dict(x=x) | change
        with pytest.raises(error, match=message):
            model(kwargs.pop("x"), **kwargs)


def test_importing_the_modules_imports_neither_keras_nor_flax():
    code = (
        "import sys, jax_cudnn_rnn; bad = [m for m in ('keras', 'equinox', 'flax') if m in sys.modules]; "
        "assert not bad, ('jax_cudnn_rnn', bad); import jax_cudnn_rnn.equinox; "
        "bad = [m for m in ('keras', 'flax') if m in sys.modules]; assert not bad, ('equinox', bad)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("module_class", [je.LSTM, je.GRU, je.RNN], ids=["lstm", "gru", "rnn"])
def test_recurrent_dropout_follows_the_key_and_inference_mode(module_class):
    """recurrent_dropout: in training rnn() with the call's key (the masks act; the same key, the same result; one
    layer needs the key too), nothing in inference mode; under vmap one key per sequence."""
    model = module_class(I, H, recurrent_dropout=0.4, key=jax.random.key(3))
    x = jax.random.normal(jax.random.key(4), (T, I))
    key = jax.random.key(5)
    y, _ = model(x, key=key)
    zeros = jnp.zeros((1, 1, H))
    c0 = zeros if model.config.has_cell_state else None
    want, _, _ = jcr.rnn(model.params, x[:, None], zeros, c0, is_training=True, dropout_key=key)
    np.testing.assert_allclose(np.asarray(y), np.asarray(want[:, 0]), atol=1e-6)
    quiet = eqx.nn.inference_mode(model)
    plain, _, _ = jcr.rnn(model.params, x[:, None], zeros, c0)
    np.testing.assert_allclose(np.asarray(quiet(x)[0]), np.asarray(plain[:, 0]), atol=0)
    assert not np.allclose(np.asarray(y), np.asarray(plain[:, 0]), atol=1e-3)
    with pytest.raises(ValueError, match=r"key is None; recurrent_dropout=0.4 needs a PRNG key"):
        model(x)
    keys = jax.random.split(key, 2)
    ys, _ = jax.vmap(model)(jnp.stack([x, x]), key=keys)
    np.testing.assert_allclose(np.asarray(ys[1]), np.asarray(model(x, key=keys[1])[0]), atol=1e-6)
    with pytest.raises(ValueError, match=r"recurrent_dropout must be a float in \[0, 1\), got 1.0"):
        module_class(I, H, recurrent_dropout=1.0, key=key)
