"""A model ported onto this library trains as it did (issue 48): each peer's model and ours, from the same weights,
take 5 optimizer steps on the same data with our modules' default arguments, and their outputs and parameters stay
equal (float32, 1e-5). The peers: Flax linen's ``nn.RNN`` over ``OptimizedLSTMCell``/``LSTMCell``/``GRUCell``/
``SimpleCell`` and a 2-layer bidirectional stack, NNX's ``nnx.RNN`` over its cells, Equinox's cells, and PyTorch's
``nn.LSTM`` (a state_dict under a prefix, trained with ``torch.optim.Adam``). Before, our modules trained cuDNN's two
biases per gate where these cells have one, and the ported models drifted apart (0.16 after 5 Adam steps)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from strict_promotion import OPTAX_ADAM, peer_promotion
from support import import_or_skip

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import equinox as je
from jax_cudnn_rnn import flax as jcr_flax
from jax_cudnn_rnn import interop
from jax_cudnn_rnn import nnx as jcr_nnx
from jax_cudnn_rnn.interop.flax_cells import FlaxCellStack

B, T, I, H = 4, 7, 3, 5
STEPS = 5
ATOL = 1e-5


@pytest.fixture(autouse=True)
def strict_float32():
    """Both sides in strict float32: on a GPU, JAX's own default lets the peers' cells (plain jnp.dot) use TF32
    while our modules run strict float32 unless asked (an H200 put them 1e-4 apart after 5 steps), which would
    compare matmul precisions, not parameterizations."""
    with jax.default_matmul_precision("float32"):
        yield


def data():
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    return x, jnp.sin(jnp.cumsum(x, axis=1))[..., :2]


def adam_steps(loss, params):
    """``STEPS`` steps of optax's Adam from ``params``; the params after them."""
    optimizer = optax.adam(2e-2)
    state = optimizer.init(params)
    for _ in range(STEPS):
        grads = jax.grad(loss)(params)
        with peer_promotion(OPTAX_ADAM):
            updates, state = optimizer.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params


def close(ours, theirs):
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=0, atol=ATOL)


# ------------------------------------------------------------------------------------------------------- Flax linen
LINEN = {
    "OptimizedLSTMCell": (nn.OptimizedLSTMCell, jcr_flax.LSTM, {}),
    "LSTMCell": (nn.LSTMCell, jcr_flax.LSTM, {}),
    "GRUCell": (nn.GRUCell, jcr_flax.GRU, {}),
    "SimpleCell": (nn.SimpleCell, jcr_flax.RNN, {"mode": "rnn_tanh"}),
}


@pytest.mark.parametrize(
    "cell, implementation",
    [(cell, None) for cell in sorted(LINEN)] + [("GRUCell", "xla")],  # None: oneDNN's kernels on the CPU
)
def test_a_flax_linen_model_trains_as_it_did(cell, implementation):
    cell_class, ours_class, kwargs = LINEN[cell]
    x, target = data()
    peer = nn.RNN(cell_class(H))
    peer_params = peer.init(jax.random.key(1), x)["params"]
    ours = ours_class(H, implementation=implementation, **kwargs)
    config = ours.rnn_config(I)
    rnn_params = jcr.RNNParams.from_canonical(*interop.flax_to_canonical(peer_params, config), config)
    params = ours.unpacked(rnn_params)
    assert sum(a.size for a in jax.tree.leaves(params)) == sum(a.size for a in jax.tree.leaves(peer_params))
    close(ours.apply({"params": params}, x), peer.apply({"params": peer_params}, x))

    def loss(model):
        return lambda p: jnp.mean((model.apply({"params": p}, x)[..., :2] - target) ** 2)

    trained_peer = adam_steps(loss(peer), peer_params)
    trained = adam_steps(loss(ours), params)
    close(ours.apply({"params": trained}, x), peer.apply({"params": trained_peer}, x))
    got_w, got_b = ours.packed(trained).to_canonical()
    want_w, want_b = interop.flax_to_canonical(trained_peer, config)
    for got, expected in zip(got_w + got_b, want_w + want_b, strict=True):
        close(got, expected)


def test_a_two_layer_bidirectional_flax_stack_trains_as_it_did():
    x, target = data()
    peer = FlaxCellStack("lstm", H, num_layers=2, bidirectional=True)
    peer_params = peer.init(jax.random.key(1), x)["params"]
    ours = jcr_flax.LSTM(H, num_layers=2, direction="bidirectional")
    config = ours.rnn_config(I)
    params = ours.unpacked(jcr.RNNParams.from_canonical(*interop.flax_to_canonical(peer_params, config), config))

    def loss(model):
        return lambda p: jnp.mean((model.apply({"params": p}, x)[..., :2] - target) ** 2)

    trained_peer, trained = adam_steps(loss(peer), peer_params), adam_steps(loss(ours), params)
    close(ours.apply({"params": trained}, x), peer.apply({"params": trained_peer}, x))


def test_the_double_bias_module_is_one_argument_away_and_trains_cudnn_s_parameters():
    """``bias_mode="double"``: both biases of every gate trained (PyTorch's, cuDNN's), initialised as PyTorch does."""
    x, target = data()
    ours = jcr_flax.LSTM(H, bias_mode="double", implementation="xla")
    params = ours.init(jax.random.key(1), x)["params"]
    tree = params["rnn_params"]["layer_0"]["forward"]
    assert set(tree) == {"w_input", "w_recurrent", "b_input", "b_recurrent"}
    buffer = ours.packed(params).buffer
    assert float(jnp.max(jnp.abs(buffer))) <= 1 / np.sqrt(H)

    def loss(p):
        y, _, _ = jcr.rnn(p, jnp.swapaxes(x, 0, 1), jnp.zeros((1, B, H)), jnp.zeros((1, B, H)), implementation="xla")
        return jnp.mean((jnp.swapaxes(y, 0, 1)[..., :2] - target) ** 2)

    trained = adam_steps(lambda p: jnp.mean((ours.apply({"params": p}, x)[..., :2] - target) ** 2), params)
    trained_buffer = adam_steps(loss, ours.packed(params))
    close(ours.packed(trained).buffer, trained_buffer.buffer)


# ------------------------------------------------------------------------------------------------------- NNX
NNX = {
    "LSTMCell": (nnx.LSTMCell, jcr_nnx.LSTM),
    "OptimizedLSTMCell": (nnx.OptimizedLSTMCell, jcr_nnx.LSTM),
    "GRUCell": (nnx.GRUCell, jcr_nnx.GRU),
    "SimpleCell": (nnx.SimpleCell, jcr_nnx.RNN),
}


def nnx_adam_steps(model, loss):
    optimizer = nnx.Optimizer(model, optax.adam(2e-2), wrt=nnx.Param)
    for _ in range(STEPS):
        grads = nnx.grad(loss)(model)
        with peer_promotion(OPTAX_ADAM):
            optimizer.update(model, grads)
    return model


@pytest.mark.parametrize("cell", sorted(NNX))
def test_an_nnx_model_trains_as_it_did(cell):
    cell_class, ours_class = NNX[cell]
    x, target = data()
    peer = nnx.RNN(cell_class(I, H, rngs=nnx.Rngs(1)))
    ours = ours_class.from_cells([[peer.cell]])
    count = lambda m: sum(a.size for a in jax.tree.leaves(nnx.state(m, nnx.Param)))  # noqa: E731
    assert count(ours) == count(peer)
    close(ours(x), peer(x))

    def loss(model):
        return jnp.mean((model(x)[..., :2] - target) ** 2)

    close(nnx_adam_steps(ours, loss)(x), nnx_adam_steps(peer, loss)(x))


def test_nnx_default_initialisation_is_nnx_s():
    """``nnx.GRUCell`` draws its three gates' kernels at once: (in, 3H) lecun_normal and an orthogonal (H, 3H)."""
    model = jcr_nnx.GRU(64, 96, rngs=nnx.Rngs(0))
    forward = model.rnn_params["layer_0"]["forward"]
    assert set(forward) == {"w_input", "w_recurrent", "b_input"}  # nnx.GRUCell's dense_h has no bias
    kernel = np.concatenate([np.asarray(forward["w_recurrent"][g][...]).T for g in "rzn"], axis=1)  # (H, 3H)
    np.testing.assert_allclose(kernel @ kernel.T, np.eye(96), atol=1e-5)
    inputs = np.concatenate([np.asarray(forward["w_input"][g][...]).T for g in "rzn"], axis=1)
    assert abs(inputs.var() * 64 - 1.0) < 0.15  # lecun_normal: variance 1/fan_in
    np.testing.assert_array_equal(np.concatenate([forward["b_input"][g][...] for g in "rzn"]), np.zeros(3 * 96))


def test_nnx_dropout_follows_nnx_dropout_and_train_eval():
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    model = jcr_nnx.LSTM(I, H, num_layers=2, dropout=0.5, rngs=nnx.Rngs(params=0, dropout=1))
    assert model.deterministic is False  # nnx.Dropout's default: dropout is on until model.eval()
    first, second = model(x), model(x)
    assert not np.allclose(first, second)  # each call draws new masks
    model.eval()
    quiet = model(x)
    np.testing.assert_allclose(quiet, model(x))
    np.testing.assert_allclose(quiet, jcr_nnx.LSTM(I, H, num_layers=2, rngs=nnx.Rngs(params=0))(x), atol=1e-6)
    model.train()
    assert not np.allclose(model(x), quiet)


# ------------------------------------------------------------------------------------------------------- Equinox
def _scan_cell(cell, x, state):
    def step(carry, x_t):
        carry = cell(x_t, carry)
        return carry, carry[0] if isinstance(carry, tuple) else carry

    return jax.lax.scan(step, state, x)[1]


@pytest.mark.parametrize("cell", ["LSTMCell", "GRUCell"])
def test_an_equinox_model_trains_as_it_did(cell):
    eqx = import_or_skip("equinox")
    x, target = data()
    peer = getattr(eqx.nn, cell)(I, H, key=jax.random.key(1))
    ours = (je.LSTM if cell == "LSTMCell" else je.GRU).from_cells([[peer]])
    zero = jnp.zeros(H)
    state = (zero, zero) if cell == "LSTMCell" else zero
    runs = {"peer": lambda m, x: _scan_cell(m, x, state), "ours": lambda m, x: m(x)[0]}
    count = lambda m: sum(a.size for a in jax.tree.leaves(eqx.filter(m, eqx.is_array)))  # noqa: E731
    assert count(ours) == count(peer)

    def trained(model, run):
        optimizer = optax.adam(2e-2)
        state = optimizer.init(eqx.filter(model, eqx.is_array))

        def loss(m):
            return jnp.mean((jax.vmap(run, in_axes=(None, 0))(m, x)[..., :2] - target) ** 2)

        for _ in range(STEPS):
            grads = eqx.filter_grad(loss)(model)
            with peer_promotion(OPTAX_ADAM):
                updates, state = optimizer.update(grads, state)
            model = eqx.apply_updates(model, updates)
        return jax.vmap(run, in_axes=(None, 0))(model, x)

    close(trained(ours, runs["ours"]), trained(peer, runs["peer"]))


# ------------------------------------------------------------------------------------------------------- PyTorch
def test_a_pytorch_lstm_state_dict_trains_as_it_did():
    torch = import_or_skip("torch")
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(I, H, num_layers=2, bidirectional=True)

    model = Model()
    x, target = data()
    xs, targets = np.array(jnp.swapaxes(x, 0, 1)), np.array(jnp.swapaxes(target, 0, 1))  # writable, for torch
    config = interop.torch_config(model.rnn)
    params = jcr.RNNParams.from_canonical(
        *interop.torch_to_canonical(model.state_dict(), config, prefix="rnn."), config
    )
    zeros = jnp.zeros(config.state_shape(B))

    def loss(p):
        y, _, _ = jcr.rnn(p, jnp.asarray(xs), zeros, zeros)
        return jnp.mean((y[..., :2] - jnp.asarray(targets)) ** 2)

    trained = adam_steps(loss, params)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(STEPS):
        optimizer.zero_grad()
        y, _ = model.rnn(torch.from_numpy(xs))
        torch.mean((y[..., :2] - torch.from_numpy(targets)) ** 2).backward()
        optimizer.step()
    got_w, got_b = trained.to_canonical()
    want_w, want_b = interop.torch_to_canonical(model.rnn)
    for got, expected in zip(got_w + got_b, want_w + want_b, strict=True):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=0, atol=1e-4)


def test_each_frontend_s_bias_argument_and_its_errors():
    """The parameters each frontend holds by default and with cuDNN's ``bias_mode="double"``; contradictions named."""
    eqx = import_or_skip("equinox")
    groups = lambda tree: set(tree["layer_0"]["forward"])  # noqa: E731
    assert groups(je.GRU(I, H, key=jax.random.key(0)).rnn_params) == {
        "w_input",
        "w_recurrent",
        "b_input",
        "b_recurrent",
    }
    assert set(je.GRU(I, H, key=jax.random.key(0)).rnn_params["layer_0"]["forward"]["b_recurrent"]) == {"n"}
    assert groups(je.LSTM(I, H, key=jax.random.key(0)).rnn_params) == {"w_input", "w_recurrent", "b_input"}
    assert groups(je.LSTM(I, H, use_bias=False, key=jax.random.key(0)).rnn_params) == {"w_input", "w_recurrent"}
    double = je.LSTM(I, H, bias_mode="double", key=jax.random.key(0))
    assert groups(double.rnn_params) == {"w_input", "w_recurrent", "b_input", "b_recurrent"}
    assert sum(a.size for a in jax.tree.leaves(eqx.filter(double, eqx.is_array))) == jcr.params_size(double.config)
    with pytest.raises(ValueError, match=r"use_bias=False and bias_mode='double' contradict each other"):
        je.GRU(I, H, use_bias=False, bias_mode="double", key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"bias_mode is 'both'; expected None \(the flax cells' own\) or one of"):
        jcr_flax.LSTM(H, bias_mode="both").init(jax.random.key(0), jnp.ones((B, T, I)))
    nnx_double = jcr_nnx.GRU(I, H, bias_mode="double", rngs=nnx.Rngs(0))
    assert set(nnx_double.rnn_params["layer_0"]["forward"]["b_recurrent"]) == {"r", "z", "n"}
    with pytest.raises(TypeError, match=r"cells\[0\]\[0\] is a LSTMCell, which GRU does not take"):
        jcr_nnx.GRU.from_cells([[nnx.LSTMCell(I, H, rngs=nnx.Rngs(0))]])
    cells = [[nnx.GRUCell(I, H, rngs=nnx.Rngs(0))], [nnx.GRUCell(H, H, rngs=nnx.Rngs(1))] * 2]
    with pytest.raises(ValueError, match=r"cells\[1\] has 2 cells; expected 1, as cells\[0\]"):
        jcr_nnx.GRU.from_cells(cells)
    with pytest.raises(ValueError, match=r"cells\[0\] has 3 cells; expected 1 \(forward\) or 2 \(forward, backward\)"):
        jcr_nnx.GRU.from_cells([cells[0] * 3])
