"""A frontend's parameters on the kernels' weight space (jax_cudnn_rnn/_parameterization.py): which biases each
library's cells train, packing with the held slots at zero and no gradient there, and errors that name the path."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import layout
from jax_cudnn_rnn._parameterization import Parameterization, library_biases

I, H = 3, 4


@pytest.mark.parametrize(
    "library, mode, expected",
    [
        ("flax", "lstm", ("double", ("b_input/i", "b_input/f", "b_input/g", "b_input/o"))),
        ("flax", "gru", ("double", ("b_recurrent/r", "b_recurrent/z"))),
        ("flax", "rnn_tanh", ("double", ("b_recurrent/h",))),
        ("nnx", "lstm", ("double", ("b_input/i", "b_input/f", "b_input/g", "b_input/o"))),
        ("nnx", "gru", ("double", ("b_recurrent/r", "b_recurrent/z", "b_recurrent/n"))),
        ("equinox", "lstm", ("double", ("b_recurrent/i", "b_recurrent/f", "b_recurrent/g", "b_recurrent/o"))),
        ("equinox", "gru", ("double", ("b_recurrent/r", "b_recurrent/z"))),
        ("equinox", "rnn_relu", ("double", ("b_recurrent/h",))),
        ("equinox", "gru_reset_before", ("single_input", ())),
    ],
)
def test_each_library_s_cells_train_their_own_biases(library, mode, expected):
    assert library_biases(library, mode, None) == expected
    assert library_biases(library, mode, "double") == ("double", ())
    assert library_biases(library, mode, None, use_bias=False) == ("none", ())


def test_packing_holds_the_held_slots_at_zero_and_gives_them_no_gradient():
    config = jcr.RNNConfig("gru", 2, H, I, direction="bidirectional")
    parameters = Parameterization(config, ("b_recurrent/r", "b_recurrent/z"))
    buffer = jcr.init_params(jax.random.key(0), config)
    tree = parameters.from_buffer(buffer)
    flat = layout.flatten_tree(tree)
    assert "layer_1/backward/b_recurrent/n" in flat and "layer_1/backward/b_recurrent/r" not in flat
    assert len(flat) == len(layout.param_slots(config)[0]) + len(layout.param_slots(config)[1]) - 2 * 4
    packed = parameters.pack(tree)
    for slot in layout.param_slots(config)[1]:
        piece = packed[slot.offset : slot.offset + slot.size]
        if parameters.held(slot):
            np.testing.assert_array_equal(piece, np.zeros(slot.size))
        else:
            np.testing.assert_array_equal(piece, buffer[slot.offset : slot.offset + slot.size])
    grads = jax.grad(lambda t: jnp.sum(parameters.pack(t) ** 2))(tree)
    assert layout.flatten_tree(grads).keys() == flat.keys()  # a gradient for every parameter, none for held slots
    weights, biases = parameters.to_canonical(tree)
    np.testing.assert_array_equal(layout.canonical_to_params(weights, biases, config), packed)


def test_errors_name_the_argument_and_the_path():
    config = jcr.RNNConfig("lstm", 1, H, I, bias_mode="single_recurrent")
    parameters = Parameterization(config)
    tree = parameters.from_buffer(jcr.init_params(jax.random.key(0), config))
    with pytest.raises(TypeError, match=r"rnn_params is a list; expected the named tree"):
        parameters.pack([1, 2], "rnn_params")
    broken = layout.unflatten_tree({**layout.flatten_tree(tree), "layer_0/forward/b_input/i": jnp.zeros(H)})
    with pytest.raises(ValueError, match=re.escape("unexpected ['layer_0/forward/b_input/i']")):
        parameters.pack(broken, "rnn_params")
    flat = layout.flatten_tree(tree)
    flat["layer_0/forward/w_recurrent/g"] = jnp.zeros((H, H + 1))
    with pytest.raises(ValueError, match=re.escape("rnn_params['layer_0/forward/w_recurrent/g'] has shape (4, 5)")):
        parameters.pack(layout.unflatten_tree(flat), "rnn_params")
    with pytest.raises(ValueError, match=re.escape("held_biases names ['b_recurrent/x']; expected 'b_input/<gate>'")):
        Parameterization(config, ("b_recurrent/x",))
    with pytest.raises(ValueError, match=re.escape("held_biases names ['b_input/i']; expected")):
        Parameterization(config, ("b_input/i",))  # a bias single_recurrent does not have
    gru = Parameterization(jcr.RNNConfig("gru", 1, H, I), ("b_recurrent/r", "b_recurrent/z"))
    weights, biases = jcr.params_to_canonical(jcr.init_params(jax.random.key(1), gru.config), gru.config)
    with pytest.raises(ValueError, match=r"layer_0/forward/b_recurrent/r is .* at most, but this module holds"):
        gru.from_canonical(weights, biases)
    lstm = Parameterization(jcr.RNNConfig("lstm", 1, H, I), library_biases("flax", "lstm", None)[1])
    weights, biases = jcr.params_to_canonical(jcr.init_params(jax.random.key(1), lstm.config), lstm.config)
    with pytest.raises(ValueError, match=r"b_input/i is .* at most, .* fold it into the recurrent bias"):
        lstm.from_canonical(weights, biases)
    with pytest.raises(ValueError, match=r"bias_mode is 'twice'; expected None \(the equinox cells' own\)"):
        library_biases("equinox", "lstm", "twice")
