"""A frontend's named tensors on oneDNN: the weights and backward handlers read them and write their gradients in
place (``_buffer.Pieces``), so that no concatenation packs them into the buffer and no slice unpacks its gradient;
values and gradients exactly those of the packed buffer (itself checked against PyTorch and NumPy in test_onednn.py),
and against the float64 NumPy oracle; the held slots (Flax's GRU: r's and z's recurrent biases) zero and without a
gradient; lengths, dropout and ``jax.vmap`` through the same pieces; and a piece that is not one of the network's
tensors refused by the handler.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import _buffer, _flax_core, ops
from jax_cudnn_rnn import flax as jcr_flax
from jax_cudnn_rnn.backends.onednn import extension, kernels

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import skips
from support import oracle, require_bfloat16_kernels, require_extension

T, B, I, H = 6, 3, 5, 4


@pytest.fixture(autouse=True)
def native():
    require_extension(extension.EXTENSION, skips.REQUIRE_ONEDNN)


def _case(library, mode, num_layers=1, direction="unidirectional", dtype="float32"):
    """(parameterization, named tree, x, h0, c0) with nonzero biases everywhere the module has them."""
    parameters = _flax_core.parameterization(library, mode, H, num_layers, I, None, direction=direction, dtype=dtype)
    config = parameters.config
    tree = parameters.from_buffer(jcr.RNNParams.init(jax.random.key(0), config).buffer)
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(T, B, I)), dtype)
    h0 = jnp.asarray(rng.normal(size=config.state_shape(B)), dtype)
    c0 = jnp.asarray(rng.normal(size=config.cell_shape(B)), dtype) if config.has_cell_state else None
    return parameters, tree, x, h0, c0


def _loss(config, implementation, **options):
    """A scalar of ``rnn``'s outputs as a function of (params, x, h0, c0), params the buffer or its pieces."""

    def loss(params, x, h0, c0):
        y, h_n, c_n = ops.rnn(params, x, h0, c0, config, implementation=implementation, **options)
        total = jnp.sum(jnp.sin(y.astype(jnp.float32))) + jnp.sum(h_n.astype(jnp.float32) ** 2)
        return total if c_n is None else total + jnp.sum(c_n.astype(jnp.float32))

    return loss


def _of_tree(parameters, packed, implementation, **options):
    """``_loss`` as a function of the named tree: packed into the buffer, or as the pieces the frontends pass."""
    loss = _loss(parameters.config, implementation, **options)
    to_params = parameters.pack if packed else parameters.pieces
    return lambda tree, x, h0, c0: loss(to_params(tree), x, h0, c0)


@pytest.mark.parametrize("implementation", ["onednn", "onednn:plain"])
@pytest.mark.parametrize(
    "library, mode, num_layers, direction",
    [
        ("flax", "gru", 1, "unidirectional"),  # held slots
        ("flax", "lstm", 2, "bidirectional"),
        ("nnx", "gru", 1, "bidirectional"),
        ("equinox", "lstm", 1, "unidirectional"),
        ("flax", "rnn_tanh", 2, "unidirectional"),
    ],
)
def test_values_and_gradients_are_the_packed_buffers(implementation, library, mode, num_layers, direction):
    parameters, tree, x, h0, c0 = _case(library, mode, num_layers, direction)
    arguments = (tree, x, h0, c0)
    argnums = (0, 1, 2, 3) if c0 is not None else (0, 1, 2)
    packed = jax.jit(jax.value_and_grad(_of_tree(parameters, True, implementation), argnums))(*arguments)
    pieces = jax.jit(jax.value_and_grad(_of_tree(parameters, False, implementation), argnums))(*arguments)
    for got, want in zip(jax.tree.leaves(pieces), jax.tree.leaves(packed), strict=True):
        np.testing.assert_array_equal(got, want)
    # and the values against the float64 oracle
    y, *_ = ops.rnn(parameters.pieces(tree), x, h0, c0, parameters.config, implementation=implementation)
    want_y, *_ = oracle(parameters.config, parameters.pack(tree), x, h0, c0)
    np.testing.assert_allclose(y, want_y, atol=2e-5, rtol=2e-5)


def test_the_held_slots_read_zero_and_get_no_gradient():
    """Flax's GRU holds r's and z's recurrent biases at zero: the handler reads zeros there (no piece holds them) and
    writes their gradient nowhere; every trained tensor's gradient is the buffer's gradient at its slot."""
    parameters, tree, x, h0, _ = _case("flax", "gru")
    assert parameters.held_biases == ("b_recurrent/r", "b_recurrent/z")
    grads = jax.grad(_of_tree(parameters, False, "onednn"))(tree, x, h0, None)
    assert set(grads["layer_0"]["forward"]["b_recurrent"]) == {"n"}
    buffer = parameters.pack(tree)
    assert not np.any(np.asarray(jcr.params_to_canonical(buffer, parameters.config)[1][3:5]))  # b_hr, b_hz zero
    want = parameters.from_buffer(jax.grad(_loss(parameters.config, "onednn"))(buffer, x, h0, None))
    for got, expected in zip(jax.tree.leaves(grads), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(got, expected)


def test_bfloat16_pieces():
    require_bfloat16_kernels("onednn")
    parameters, tree, x, h0, c0 = _case("flax", "lstm", dtype="bfloat16")
    assert tree["layer_0"]["forward"]["w_input"]["i"].dtype == np.dtype(ml_dtypes.bfloat16)
    packed = jax.grad(_of_tree(parameters, True, "onednn"), (0, 1))(tree, x, h0, c0)
    pieces = jax.grad(_of_tree(parameters, False, "onednn"), (0, 1))(tree, x, h0, c0)
    for got, want in zip(jax.tree.leaves(pieces), jax.tree.leaves(packed), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("what", ["lengths", "dropout", "vmap"])
def test_lengths_dropout_and_vmap_through_the_pieces(what):
    """Lengths (the padding channel widens the packed buffer), dropout (layer by layer: each layer's pieces) and
    ``jax.vmap`` of the gradient (the pieces shared by the mapped batches) give the packed buffer's gradients."""
    dropout = 0.5 if what == "dropout" else 0.0
    parameters = _flax_core.parameterization("flax", "gru", H, 2, I, None, direction="bidirectional", dropout=dropout)
    _, tree, x, h0, c0 = _case("flax", "gru", 2, "bidirectional")
    options = {}
    if what == "lengths":
        options = dict(seq_lengths=jnp.array([6, 2, 0], jnp.int32))
    if what == "dropout":
        options = dict(is_training=True, dropout_key=jax.random.key(3))

    def grads(packed):
        loss = _of_tree(parameters, packed, "onednn", **options)
        if what != "vmap":
            return jax.grad(loss, (0, 1))(tree, x, h0, c0)
        xs = jnp.stack([x, 2 * x])  # two batches, the parameters shared: one gradient per batch
        return jax.vmap(jax.grad(loss, (0, 1)), in_axes=(None, 0, None, None))(tree, xs, h0, c0)

    for got, want in zip(jax.tree.leaves(grads(False)), jax.tree.leaves(grads(True)), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6)


def test_a_flax_module_sends_its_tensors_unpacked():
    """The linen GRU's training step on oneDNN: the weights call takes the module's tensors (one operand each) and
    the compiled step concatenates nothing."""
    module = jcr_flax.GRU(H, implementation="onednn")
    x = jnp.ones((B, T, I))
    params = module.init(jax.random.key(0), x)
    step = jax.jit(jax.grad(lambda p: jnp.sum(module.apply(p, x) ** 2)))
    text = step.lower(params).compile().as_text()
    assert "concatenate" not in text, text
    calls = [line for line in text.splitlines() if f'custom_call_target="{extension.WEIGHTS_TARGET}"' in line]
    operands = [
        line.split("operand_layout_constraints={")[1].split("}, api_version")[0].count("f32[") for line in calls
    ]
    assert operands == [len(jax.tree.leaves(params))], calls


def test_a_piece_that_is_not_a_tensor_is_refused():
    """Pieces come from a Parameterization; one that holds part of a tensor (a bug) fails the call, naming it."""
    parameters, tree, x, h0, _ = _case("flax", "gru")
    pieces = parameters.pieces(tree)
    first = pieces.arrays[0]  # r's input matrix [H, I]: give it one row less
    broken = _buffer.Pieces([first[1:], *pieces.arrays[1:]], pieces.slots, pieces.config)
    with pytest.raises(Exception, match="holds part of the tensor"):
        jax.block_until_ready(kernels.forward(x, h0, broken, config=parameters.config, training=False))
