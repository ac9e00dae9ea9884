"""The Flax modules in their users' shape: the size first as Flax's cells take it (``LSTM(64)``, NNX's
``LSTM(in_features, hidden)``), a mode that contradicts the class refused, Flax's initializer arguments meaning what
they mean for Flax's own cells (checked against ``nn.LSTMCell``/``GRUCell``/``SimpleCell`` and nnx's with the same
initializers), and the zero carry of a nested module from its parameters, with which a jitted streaming step compiles
once."""

from __future__ import annotations

import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import flax as jcr_flax
from jax_cudnn_rnn import nnx as jcr_nnx

B, T, I, H = 2, 6, 3, 5


def kernel_init(key, shape, dtype=jnp.float32):
    """Independent of the key and not symmetric in its shape, so a transposed or misplaced matrix shows."""
    del key
    return (0.4 * jnp.sin(jnp.arange(math.prod(shape), dtype=jnp.float32) * 0.7 + 0.3).reshape(shape)).astype(dtype)


def recurrent_init(key, shape, dtype=jnp.float32):
    del key
    return (0.3 * jnp.cos(jnp.arange(math.prod(shape), dtype=jnp.float32) * 1.3).reshape(shape)).astype(dtype)


def bias_init(key, shape, dtype=jnp.float32):
    """Nonzero and not constant: a bias counted twice (both sides of a gate) changes the outputs."""
    del key
    return (0.2 + 0.1 * jnp.arange(shape[0], dtype=jnp.float32)).astype(dtype)


FLAX_CELLS = {"lstm": nn.LSTMCell, "gru": nn.GRUCell, "rnn_tanh": nn.SimpleCell}
# nnx.GRUCell is another cell than linen's: one kernel_init draw for the three gates together and no recurrent bias on
# the new-memory gate; the modules follow linen's GRUCell (per gate, with ``hn``), as nnx.LSTMCell and SimpleCell do.
NNX_CELLS = {"lstm": nnx.LSTMCell, "rnn_tanh": nnx.SimpleCell}


# ------------------------------------------------------------------------------------------------ construction
def test_linen_modules_take_the_size_first():
    x = jnp.ones((B, T, I))
    for module, mode in [
        (jcr_flax.LSTM(H), "lstm"),
        (jcr_flax.GRU(H, num_layers=2), "gru"),
        (jcr_flax.RNN(H, mode="rnn_relu"), "rnn_relu"),
        (jcr_flax.LSTM(num_units=H), "lstm"),
        (jcr_flax.LSTM(features=H), "lstm"),
        (jcr_flax.GRU(H, mode="gru"), "gru"),
    ]:
        config = module.packed(module.init(jax.random.key(0), x)).config
        assert (config.mode, config.num_units, config.input_size) == (mode, H, I)


def test_linen_modules_refuse_a_missing_size_a_contradicting_mode_and_the_old_mode_first_call():
    with pytest.raises(TypeError, match=re.escape("LSTM needs its hidden size: LSTM(64), or num_units=64")):
        jcr_flax.LSTM()
    with pytest.raises(ValueError, match=re.escape("mode is 'gru' but LSTM is the 'lstm' module")):
        jcr_flax.LSTM(H, mode="gru")
    with pytest.raises(ValueError, match=re.escape("mode is 'lstm' but GRU is the 'gru' module")):
        jcr_flax.GRU(H, mode="lstm")
    with pytest.raises(
        TypeError, match=re.escape("got 'gru'. The mode is a keyword argument: write RNN(num_units, mode='gru')")
    ):
        jcr_flax.RNN("gru", H)
    with pytest.raises(ValueError, match="num_units is 5 and features is 6; pass one of them"):
        jcr_flax.LSTM(5, features=6)
    with pytest.raises(ValueError, match="num_units must be >= 1, got 0"):
        jcr_flax.LSTM(0).init(jax.random.key(0), jnp.ones((B, T, I)))


def test_nnx_modules_take_the_sizes_first_and_refuse_a_contradicting_mode():
    for model, mode in [
        (jcr_nnx.LSTM(I, H, rngs=nnx.Rngs(0)), "lstm"),
        (jcr_nnx.GRU(I, hidden_features=H, rngs=nnx.Rngs(0)), "gru"),
        (jcr_nnx.RNN(I, H, mode="rnn_tanh", rngs=nnx.Rngs(0)), "rnn_tanh"),
        (jcr_nnx.RNN(in_features=I, num_units=H, rngs=nnx.Rngs(0)), "lstm"),
    ]:
        assert (model.config.mode, model.config.num_units, model.config.input_size) == (mode, H, I)
    with pytest.raises(ValueError, match=re.escape("mode is 'gru' but LSTM is the 'lstm' module; use RNN(in_features")):
        jcr_nnx.LSTM(I, H, mode="gru", rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=re.escape("GRU needs its hidden size: GRU(in_features, 64)")):
        jcr_nnx.GRU(I, rngs=nnx.Rngs(0))


# ------------------------------------------------------------------------------------------------ initializers
@pytest.mark.parametrize("mode", sorted(FLAX_CELLS))
def test_linen_initializers_mean_what_they_mean_for_flax_cells(mode):
    """With the same initializers, our module computes what nn.RNN over Flax's own cell computes at init."""
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    ours = jcr_flax.RNN(
        H,
        mode=mode,
        kernel_init=kernel_init,
        recurrent_kernel_init=recurrent_init,
        bias_init=bias_init,
        implementation="reference",
    )
    peer = nn.RNN(
        FLAX_CELLS[mode](H, kernel_init=kernel_init, recurrent_kernel_init=recurrent_init, bias_init=bias_init)
    )
    y = ours.apply(ours.init(jax.random.key(1), x), x)
    want = peer.apply(peer.init(jax.random.key(2), x), x)
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-6)
    assert np.abs(np.asarray(want)).max() > 0.1


@pytest.mark.parametrize("mode", sorted(NNX_CELLS))
def test_nnx_initializers_mean_what_they_mean_for_nnx_cells(mode):
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    ours = jcr_nnx.RNN(
        I,
        H,
        mode=mode,
        kernel_init=kernel_init,
        recurrent_kernel_init=recurrent_init,
        bias_init=bias_init,
        implementation="reference",
        rngs=nnx.Rngs(1),
    )
    cell = NNX_CELLS[mode](
        I, H, kernel_init=kernel_init, recurrent_kernel_init=recurrent_init, bias_init=bias_init, rngs=nnx.Rngs(2)
    )
    np.testing.assert_allclose(ours(x), nnx.RNN(cell)(x), rtol=2e-5, atol=2e-6)


def test_orthogonal_recurrent_kernels_lecun_input_kernels_and_a_forget_bias_of_one():
    """Random initializers: one draw per gate (each recurrent matrix orthogonal, the gates different), the variance
    Flax's lecun_normal gives [in, out] kernels, and a per-gate bias_init that sets the LSTM's forget-gate bias to 1,
    the other gates keeping the default: Flax's zeros for a module with Flax's cells' biases (its one recurrent bias
    per gate), and with bias_mode="double" the default U(-1/sqrt(H), 1/sqrt(H)) draw, the forget gate's 1 on Flax's
    side of the pair (the recurrent bias) and its input bias 0."""
    n_in, n_hidden = 96, 64
    x = jnp.ones((1, 2, n_in))
    inits = dict(
        kernel_init=nn.initializers.lecun_normal(),
        recurrent_kernel_init=nn.initializers.orthogonal(),
        bias_init={"f": nn.initializers.ones},
    )
    for bias_mode in (None, "double"):
        kwargs = dict(num_layers=2, direction="bidirectional", bias_mode=bias_mode)
        module = jcr_flax.LSTM(n_hidden, **kwargs, **inits)
        tree = module.packed(module.init(jax.random.key(0), x)).to_tree()
        default = jcr_flax.LSTM(n_hidden, **kwargs)
        default_tree = default.packed(default.init(jax.random.key(0), x)).to_tree()
        seen = []
        for layer in ("layer_0", "layer_1"):
            for direction in ("forward", "backward"):
                groups, defaults = tree[layer][direction], default_tree[layer][direction]
                for gate in "ifgo":
                    r = np.asarray(groups["w_recurrent"][gate], np.float64)
                    np.testing.assert_allclose(r @ r.T, np.eye(n_hidden), atol=1e-5)
                    w = np.asarray(groups["w_input"][gate])
                    assert abs(w.var() * w.shape[1] - 1.0) < 0.25, (layer, gate, w.var() * w.shape[1])
                    seen += [w[0, 0], r[0, 0]]
                np.testing.assert_array_equal(groups["b_recurrent"]["f"], np.ones(n_hidden))
                for gate in "igo":  # not named by bias_init: the default, unchanged
                    np.testing.assert_array_equal(groups["b_recurrent"][gate], defaults["b_recurrent"][gate])
                if bias_mode is None:  # Flax's LSTM cell has no input-side bias: held at zero in the buffer
                    np.testing.assert_array_equal(groups["b_input"]["f"], np.zeros(n_hidden))
                    np.testing.assert_array_equal(groups["b_recurrent"]["i"], np.zeros(n_hidden))
                else:
                    np.testing.assert_array_equal(groups["b_input"]["f"], np.zeros(n_hidden))
                    for gate in "igo":
                        np.testing.assert_array_equal(groups["b_input"][gate], defaults["b_input"][gate])
                    assert np.abs(defaults["b_input"]["i"]).max() > 0
        assert len(set(seen)) == len(seen)  # every matrix its own draw


def test_initializers_on_a_projected_lstm_with_one_bias_and_nnx_equals_linen():
    """A projected LSTM: the recurrent matrices are [H, P] (Flax shape (P, H)), the projection takes kernel_init; with
    bias_mode single_input the input bias stands in for Flax's recurrent one. NNX and linen give the same tensors."""
    kwargs = dict(num_layers=2, proj_size=2, bias_mode="single_input")
    inits = dict(kernel_init=kernel_init, recurrent_kernel_init=recurrent_init, bias_init=bias_init)
    module = jcr_flax.LSTM(H, **kwargs, **inits)
    linen = module.packed(module.init(jax.random.key(0), jnp.ones((B, T, I))))
    tree = linen.to_tree()
    np.testing.assert_allclose(tree["layer_1"]["forward"]["w_input"]["g"], kernel_init(None, (2, H)).T)
    np.testing.assert_allclose(tree["layer_0"]["forward"]["w_recurrent"]["o"], recurrent_init(None, (2, H)).T)
    np.testing.assert_allclose(tree["layer_0"]["forward"]["w_projection"], kernel_init(None, (H, 2)).T)
    np.testing.assert_allclose(tree["layer_0"]["forward"]["b_input"]["f"], bias_init(None, (H,)))
    model = jcr_nnx.LSTM(I, H, **kwargs, **inits, rngs=nnx.Rngs(3))
    np.testing.assert_array_equal(model.params.buffer, linen.buffer)


def test_without_initializers_the_buffer_is_the_default_one():
    """With one of cuDNN's bias modes and no initializers, PyTorch's U(-1/sqrt(H), 1/sqrt(H)) buffer, exactly
    ``init_params``' for NNX's key; by default, Flax's initializers (zero biases, orthogonal recurrent kernels)."""
    x = jnp.ones((B, T, I))
    module = jcr_flax.GRU(H, num_layers=2, bias_mode="double")
    params = module.packed(module.init(jax.random.key(0), x))
    buffer = np.asarray(params.buffer)
    assert np.abs(buffer).max() <= 1 / math.sqrt(H) and buffer.std() > 0.5 / math.sqrt(3 * H)
    model = jcr_nnx.GRU(I, H, num_layers=2, bias_mode="double", rngs=nnx.Rngs(7))
    np.testing.assert_array_equal(model.params.buffer, jcr.init_params(nnx.Rngs(7).params(), params.config))
    flax_module = jcr_flax.GRU(H, num_layers=2)
    tree = flax_module.packed(flax_module.init(jax.random.key(0), x)).to_tree()["layer_1"]["forward"]
    for group in ("b_input", "b_recurrent"):
        for gate in "rzn":
            np.testing.assert_array_equal(tree[group][gate], np.zeros(H))
    r = np.asarray(tree["w_recurrent"]["z"], np.float64)
    np.testing.assert_allclose(r @ r.T, np.eye(H), atol=1e-5)


# ------------------------------------------------------------------------------------------------ carries
class Parent(nn.Module):
    """A model with our LSTM nested inside it, streamed window by window."""

    dtype: object = None

    @nn.compact
    def __call__(self, x, carry=None):
        carry, y = jcr_flax.LSTM(H, num_layers=2, dtype=self.dtype, implementation="xla")(
            x, initial_carry=carry, return_carry=True
        )
        return carry, nn.Dense(2, dtype=self.dtype)(y)


@pytest.mark.parametrize("dtype", [None, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_zero_carry_of_a_nested_module_streams_with_one_compilation(dtype):
    x = jax.random.normal(jax.random.key(0), (B, 3 * T, I))
    parent = Parent(dtype=dtype)
    variables = parent.init(jax.random.key(1), x[:, :T])
    carry = jcr_flax.zero_carry(variables, B, dtype)  # no LSTM built for it: the one RNNParams in the tree says
    c, h = carry  # Flax's order
    assert h.shape == (2, B, H) and c.shape == (2, B, H) and h.dtype == (dtype or jnp.float32)
    assert not np.any(np.asarray(h, np.float32)) and not np.any(np.asarray(c, np.float32))

    step = jax.jit(parent.apply)
    ys = []
    for start in range(0, 3 * T, T):
        carry, y = step(variables, x[:, start : start + T], carry)
        ys.append(y)
    assert step._cache_size() == 1  # the carry passed in has the type of the one that comes out
    _, y_once = parent.apply(variables, x)
    np.testing.assert_allclose(
        np.asarray(jnp.concatenate(ys, axis=1), np.float32),
        np.asarray(y_once, np.float32),
        atol=2e-2 if dtype else 1e-5,
    )

    restarted = jax.jit(parent.apply)
    carry = None  # what zero_carry saves: None then arrays are two signatures, so two compilations
    for start in range(0, 2 * T, T):
        carry, _ = restarted(variables, x[:, start : start + T], carry)
    assert restarted._cache_size() == 2


def test_zero_carry_sources_and_errors():
    config = jcr.RNNConfig("gru", 3, H, I, direction="bidirectional")
    params = jcr.RNNParams.init(jax.random.key(0), config)
    module = jcr_flax.GRU(H, num_layers=3, direction="bidirectional")
    named = module.init(jax.random.key(0), jnp.ones((B, T, I)))["params"]
    for source in (config, params, {"params": {"encoder": {"rnn_params": params}, "head": jnp.ones(2)}}, named):
        h = jcr_flax.zero_carry(source, 4)
        assert h.shape == (6, 4, H) and h.dtype == jnp.float32
    c, h = jcr_flax.zero_carry({"params": {"lstm": jcr_flax.LSTM(H).init(jax.random.key(0), jnp.ones((B, T, I)))}}, 2)
    assert c.shape == h.shape == (2, H)  # one layer, one direction: the cell's carry
    (c_f, h_f), (c_b, h_b) = jcr_flax.zero_carry(jcr.RNNConfig("lstm", 1, H, I, direction="bidirectional"), (3, 2))
    assert c_f.shape == h_f.shape == c_b.shape == h_b.shape == (3, 2, H)  # nn.Bidirectional's, two batch axes
    assert jcr_flax.zero_carry(config, ()).shape == (6, H)  # one unbatched sequence
    with pytest.raises(ValueError, match=re.escape("source holds 2 RNN modules' parameters (at ['a'], ['b']); exp")):
        jcr_flax.zero_carry({"a": params, "b": params}, 4)
    with pytest.raises(ValueError, match="source holds 0 RNN modules' parameters; expected"):
        jcr_flax.zero_carry({"a": jnp.ones(3)}, 4)
    with pytest.raises(TypeError, match=re.escape("batch must be an int, got float 4.0")):
        jcr_flax.zero_carry(config, 4.0)
