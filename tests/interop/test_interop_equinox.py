"""Canonical <-> Equinox cells (eqx.nn.LSTMCell / GRUCell), run by Equinox itself: outputs equal both ways, round trips
exact, unsupported configs and malformed cells named."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_cudnn_rnn import interop, layout
from jax_cudnn_rnn.config import RNNConfig

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import assert_outputs_close, import_or_skip, run_xla, summed_biases

eqx = import_or_skip("equinox")

T, B, I, H = 5, 3, 4, 6
# Both modes Equinox has (it has no vanilla tanh/relu cell), both directions, one and two layers.
CASES = [
    ("lstm", "unidirectional", 2),
    ("lstm", "bidirectional", 1),
    ("gru", "unidirectional", 1),
    ("gru", "bidirectional", 2),
]


def _inputs(config, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, B, config.input_size)).astype(np.float32)
    h0 = (0.5 * rng.standard_normal(config.state_shape(B))).astype(np.float32)
    c0 = (0.5 * rng.standard_normal(config.cell_shape(B))).astype(np.float32) if config.has_cell_state else None
    return x, h0, c0


def _equinox_run(cells, config, x, h0, c0):
    """What ``rnn`` returns, computed by the Equinox cells ``cells[layer][direction]``: each cell vmapped over the
    batch and scanned over time (the backward one over reversed time), layer outputs concatenated forward first."""
    lstm, directions = config.mode == "lstm", config.num_directions
    inputs, h_n, c_n = jnp.asarray(x), [], []
    for layer, row in enumerate(cells):
        outputs = []
        for direction, cell in enumerate(row):
            index = layer * directions + direction
            state = (jnp.asarray(h0[index]), jnp.asarray(c0[index])) if lstm else jnp.asarray(h0[index])

            def step(state, x_t, cell=cell):
                state = jax.vmap(cell)(x_t, state)
                return state, state[0] if lstm else state

            final, ys = jax.lax.scan(step, state, inputs if direction == 0 else inputs[::-1])
            outputs.append(ys if direction == 0 else ys[::-1])
            h_n.append(final[0] if lstm else final)
            c_n += [final[1]] if lstm else []
        inputs = jnp.concatenate(outputs, axis=-1)
    return np.asarray(inputs), np.asarray(jnp.stack(h_n)), np.asarray(jnp.stack(c_n)) if lstm else None


def _leaves(cells):
    return jax.tree_util.tree_leaves(eqx.filter(cells, eqx.is_array))


@pytest.mark.parametrize("mode,direction,num_layers", CASES)
def test_equinox_both_ways(mode, direction, num_layers):
    config = RNNConfig(mode, num_layers=num_layers, num_units=H, input_size=I, direction=direction)
    x, h0, c0 = _inputs(config, seed=num_layers)

    # ours -> Equinox
    params = layout.init_params(jax.random.key(2), config)
    weights, biases = layout.params_to_canonical(params, config)
    cells = interop.canonical_to_equinox(weights, biases, config)
    assert [[type(c).__name__ for c in row] for row in cells] == [
        [{"lstm": "LSTMCell", "gru": "GRUCell"}[mode]] * config.num_directions
    ] * num_layers
    assert_outputs_close(run_xla(params, config, x, h0, c0), _equinox_run(cells, config, x, h0, c0))
    # and back: one summed bias per gate, but GRU's gate n keeps b_W (in bias) and b_R (bias_n) apart
    w, b = interop.equinox_to_canonical(cells, config)
    want_biases = summed_biases(config, biases, ("n",) if mode == "gru" else ())
    for got, want in zip(w + b, list(weights) + want_biases, strict=True):
        np.testing.assert_array_equal(got, np.asarray(want))

    # Equinox's own initialisation (its biases are random too) -> ours, and back exactly.
    keys = jax.random.split(jax.random.key(7), num_layers * config.num_directions)
    cell_class = eqx.nn.LSTMCell if mode == "lstm" else eqx.nn.GRUCell
    theirs = [
        [
            cell_class(config.layer_input_size(layer), H, key=keys[layer * config.num_directions + d])
            for d in range(config.num_directions)
        ]
        for layer in range(num_layers)
    ]
    w, b = interop.equinox_to_canonical(theirs, config)
    params = layout.canonical_to_params(w, b, config)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _equinox_run(theirs, config, x, h0, c0))
    for got, want in zip(_leaves(interop.canonical_to_equinox(w, b, config)), _leaves(theirs), strict=True):
        np.testing.assert_array_equal(got, want)


def test_equinox_skip_input_bias_modes_and_dtype():
    # skip input: identity weight_ih; no bias: use_bias=False cells.
    config = RNNConfig("gru", num_layers=2, num_units=H, input_size=H, input_mode="skip_input", bias_mode="none")
    x, h0, c0 = _inputs(config, seed=3)
    params = layout.init_params(jax.random.key(3), config)
    cells = interop.canonical_to_equinox(*layout.params_to_canonical(params, config), config)
    np.testing.assert_array_equal(cells[0][0].weight_ih, np.tile(np.eye(H), (3, 1)))
    assert not cells[1][0].use_bias and cells[1][0].bias is None
    assert_outputs_close(run_xla(params, config, x, h0, c0), _equinox_run(cells, config, x, h0, c0))
    back = layout.canonical_to_params(*interop.equinox_to_canonical(cells, config), config)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(params))

    # one bias: LSTM's summed bias is that bias; in bfloat16 the cells hold bfloat16.
    config = RNNConfig(
        "lstm",
        num_layers=1,
        num_units=H,
        input_size=I,
        bias_mode="single_recurrent",
        direction="bidirectional",
        dtype="bfloat16",
    )
    params = layout.init_params(jax.random.key(4), config)
    cells = interop.canonical_to_equinox(*layout.params_to_canonical(params, config), config)
    assert {leaf.dtype for leaf in _leaves(cells)} == {jnp.dtype(jnp.bfloat16)}
    back = layout.canonical_to_params(*interop.equinox_to_canonical(cells, config), config)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(params))
    x, h0, c0 = (a.astype(config.dtype) for a in _inputs(config, seed=4))
    ours = [a.astype(np.float32) for a in run_xla(params, config, x, h0, c0)]
    for a, b in zip(ours, _equinox_run(cells, config, x, h0, c0), strict=True):  # bfloat16 keeps 8 bits
        np.testing.assert_allclose(a, b.astype(np.float32), atol=3e-2)


def test_equinox_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"mode 'rnn_tanh' has no Equinox equivalent.*no vanilla tanh/relu RNN cell"):
        interop.canonical_to_equinox([], [], RNNConfig("rnn_tanh", 1, H, I))
    with pytest.raises(ValueError, match="proj_size=2 has no Equinox equivalent"):
        interop.equinox_to_canonical([], RNNConfig("lstm", 1, H, I, proj_size=2))
    with pytest.raises(ValueError, match=r"cell_clip=1\.0 has no Equinox equivalent"):
        interop.canonical_to_equinox([], [], RNNConfig("lstm", 1, H, I, cell_clip=1.0))

    config = RNNConfig("lstm", num_layers=2, num_units=H, input_size=I, direction="bidirectional")
    cells = interop.canonical_to_equinox(
        *layout.params_to_canonical(layout.init_params(jax.random.key(0), config), config), config
    )
    with pytest.raises(
        ValueError,
        match=r"cells must hold num_layers = 2 lists \[forward, backward\] of "
        r"eqx.nn.LSTMCell, got 1 entries",
    ):
        interop.equinox_to_canonical(cells[:1], config)
    with pytest.raises(ValueError, match=r"cells\[1\] must be \[forward, backward\] \(bidirectional\), got 1 cells"):
        interop.equinox_to_canonical([cells[0], cells[1][:1]], config)
    gru = eqx.nn.GRUCell(I, H, key=jax.random.key(1))
    with pytest.raises(TypeError, match=r"cells\[0\]\[1\] is a GRUCell; expected eqx.nn.LSTMCell for mode 'lstm'"):
        interop.equinox_to_canonical([[cells[0][0], gru], cells[1]], config)
    unbiased = eqx.nn.LSTMCell(I, H, use_bias=False, key=jax.random.key(1))
    with pytest.raises(
        ValueError,
        match=r"cells\[0\]\[0\] has use_bias=False; bias_mode 'double' needs "
        r"use_bias=True",
    ):
        interop.equinox_to_canonical([[unbiased, cells[0][1]], cells[1]], config)
    wide = eqx.nn.LSTMCell(I + 1, H, key=jax.random.key(1))
    with pytest.raises(ValueError, match=r"cells\[0\]\[1\].weight_ih has shape \(24, 5\); expected \(24, 4\)"):
        interop.equinox_to_canonical([[cells[0][0], wide], cells[1]], config)

    skip = RNNConfig("gru", num_layers=1, num_units=H, input_size=H, input_mode="skip_input", bias_mode="single_input")
    theirs = [[eqx.nn.GRUCell(H, H, key=jax.random.key(2))]]
    with pytest.raises(
        ValueError,
        match=r"cells\[0\]\[0\].weight_ih\[0:6\] \(gate r\) is not representable: skip "
        r"input needs an identity input kernel",
    ):
        interop.equinox_to_canonical(theirs, skip)
    theirs = [[eqx.tree_at(lambda c: c.weight_ih, theirs[0][0], jnp.tile(jnp.eye(H), (3, 1)))]]
    with pytest.raises(
        ValueError,
        match=r"cells\[0\]\[0\].bias_n is not representable: bias_mode 'single_input' has "
        r"no b_recurrent",
    ):
        interop.equinox_to_canonical(theirs, skip)
    theirs = [[eqx.tree_at(lambda c: c.bias_n, theirs[0][0], jnp.zeros(H))]]
    w, b = interop.equinox_to_canonical(theirs, skip)  # representable once bias_n is zero
    assert len(w) == 3 and len(b) == 3
