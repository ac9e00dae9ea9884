"""The Flax modules' streaming contract (linen and NNX): a sequence fed window by window, each window's final carry
passed on as the next one's initial_carry, equals one call over the whole sequence — outputs, final carry and the
gradients with respect to the parameters, the inputs and the initial carry — with and without seq_lengths and
resets; the zero carry helpers; resets in the module's layout.

Tolerance 2e-5 (float32): the windows split only the input GEMMs over time, the recurrence is the same arithmetic.
"""

from __future__ import annotations

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import flax as jcr_flax
from jax_cudnn_rnn import nnx as jcr_nnx

B, T, I, H = 3, 9, 2, 4
WINDOW = 4  # windows [0, 4), [4, 8), [8, 9)
LENGTHS = (9, 5, 2)  # in the last window only row 0 has a step: rows 1 and 2 get length 0 there


def make_resets() -> np.ndarray:
    """Batch-major [B, T]: a reset on a window's first step (4), inside windows, at step 0 of a row, and past a
    row's length."""
    resets = np.zeros((B, T), bool)
    resets[0, [4, 6]] = True
    resets[1, [0, 3, 7]] = True
    resets[2, 1] = True
    return resets


RESETS = make_resets()


def stream(call, x, carry, lengths, resets):
    """``call(x_window, lengths_window, carry, resets_window) -> (carry, y_window)`` over consecutive windows."""
    ys = []
    for start in range(0, T, WINDOW):
        stop = min(start + WINDOW, T)
        window_lengths = None if lengths is None else jnp.clip(lengths - start, 0, stop - start)
        window_resets = None if resets is None else resets[:, start:stop]
        carry, y = call(x[:, start:stop], window_lengths, carry, window_resets)
        ys.append(y)
    return carry, jnp.concatenate(ys, axis=1)


def loss_of(carry, y):
    return jnp.sum(jnp.sin(y)) + sum(jnp.sum(leaf**2) for leaf in jax.tree_util.tree_leaves(carry))


def assert_stream_equals_one_call(call, params, x, carry0, lengths, resets):
    """``call(params, x, lengths, carry, resets) -> (carry, y)``; values and gradients w.r.t. (params, x, carry0)."""

    def one(params, x, carry0):
        carry, y = call(params, x, lengths, carry0, resets)
        return loss_of(carry, y), (carry, y)

    def windows(params, x, carry0):
        carry, y = stream(lambda *a: call(params, *a), x, carry0, lengths, resets)
        return loss_of(carry, y), (carry, y)

    both = jax.jit(lambda *a: [jax.value_and_grad(f, argnums=(0, 1, 2), has_aux=True)(*a) for f in (windows, one)])
    ((_, got), got_grads), ((_, want), want_grads) = both(params, x, carry0)
    for name, a, b in [("carry, y", got, want), ("d(params, x, carry0)", got_grads, want_grads)]:
        for leaf_a, leaf_b in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
            np.testing.assert_allclose(leaf_a, leaf_b, rtol=2e-5, atol=2e-5, err_msg=name)
            assert np.abs(np.asarray(leaf_b)).max() > 1e-3, name
    return want


COMBINATIONS = list(itertools.product((False, True), (False, True)))
IDS = [f"lengths={a}-resets={b}" for a, b in COMBINATIONS]


def _arguments(with_lengths, with_resets):
    lengths = jnp.array(LENGTHS, jnp.int32) if with_lengths else None
    resets = jnp.asarray(RESETS) if with_resets else None
    return lengths, resets


@pytest.mark.parametrize("with_lengths, with_resets", COMBINATIONS, ids=IDS)
def test_linen_lstm_streams_across_calls(with_lengths, with_resets):
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    module = jcr_flax.LSTM(num_units=H, num_layers=2, implementation="xla")
    variables = module.init(jax.random.key(1), x)
    carry0 = jax.tree_util.tree_map(lambda a: a + 0.3, module.initialize_carry(jax.random.key(2), x.shape))
    lengths, resets = _arguments(with_lengths, with_resets)

    def call(params, x, lengths, carry, resets):
        return module.apply({"params": params}, x, lengths, carry, return_carry=True, resets=resets)

    (c_n, h_n), y = assert_stream_equals_one_call(call, variables["params"], x, carry0, lengths, resets)
    # The one long call is rnn() itself, resets transposed to time-major; the carry is Flax's (c, h).
    params = module.packed(variables)
    want = jcr.rnn(
        params.buffer,
        jnp.swapaxes(x, 0, 1),
        carry0[1],
        carry0[0],
        params.config,
        seq_lengths=lengths,
        resets=None if resets is None else resets.T,
        implementation="reference",
    )
    for a, b in zip((jnp.swapaxes(y, 0, 1), h_n, c_n), want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_lengths, with_resets", COMBINATIONS, ids=IDS)
def test_nnx_gru_streams_across_calls(with_lengths, with_resets):
    x = jax.random.normal(jax.random.key(0), (B, T, I))
    model = jcr_nnx.GRU(I, H, num_layers=2, implementation="xla", rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    carry0 = model.initialize_carry((B, I)) + 0.3
    lengths, resets = _arguments(with_lengths, with_resets)

    def call(state, x, lengths, carry, resets):
        return nnx.merge(graphdef, state)(x, lengths, carry, return_carry=True, resets=resets)

    assert_stream_equals_one_call(call, state, x, carry0, lengths, resets)


def test_time_major_module_takes_time_major_resets():
    x = jax.random.normal(jax.random.key(0), (T, B, I))
    module = jcr_flax.RNN(mode="rnn_tanh", num_units=H, time_major=True)
    variables = module.init(jax.random.key(1), x)
    params = module.packed(variables)
    carry, y = module.apply(variables, x, return_carry=True, resets=jnp.asarray(RESETS.T))
    want = jcr.rnn(
        params.buffer,
        x,
        jnp.zeros((1, B, H)),
        None,
        params.config,
        resets=jnp.asarray(RESETS.T),
        implementation="reference",
    )
    np.testing.assert_allclose(y, want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(carry, want[1][0], rtol=1e-5, atol=1e-5)  # one layer: the cell's carry [B, H]
    with pytest.raises(
        ValueError,
        match=re.escape(f"resets has shape ({B}, {T}); expected ({T}, {B}) = (time, batch), the first two axes of x"),
    ):
        module.apply(variables, x, resets=jnp.asarray(RESETS))


def test_resets_in_the_wrong_layout_or_dtype_name_the_argument():
    x = jnp.ones((B, T, I))
    module = jcr_flax.GRU(num_units=H)
    variables = module.init(jax.random.key(1), x)
    with pytest.raises(
        ValueError, match=re.escape(f"resets has shape ({T}, {B}); expected ({B}, {T}) = (batch, time)")
    ):
        module.apply(variables, x, resets=jnp.asarray(RESETS.T))
    with pytest.raises(ValueError, match=re.escape("resets[0, 0] is 2; expected a flag, 0 or 1 (or bool)")):
        module.apply(variables, x, resets=jnp.asarray(RESETS, jnp.int32) + 2)
    want = module.apply(variables, x, resets=jnp.asarray(RESETS))  # what jnp.where takes: bool, or 0/1 numbers
    for flags in (jnp.asarray(RESETS, jnp.int32), jnp.asarray(RESETS, jnp.float32), RESETS.astype(np.int8)):
        np.testing.assert_array_equal(module.apply(variables, x, resets=flags), want)
        np.testing.assert_array_equal(jax.jit(module.apply)(variables, x, resets=flags), want)
    model = jcr_nnx.GRU(I, H, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=re.escape(f"resets has shape ({T}, {B}); expected ({B}, {T})")):
        model(x, resets=jnp.asarray(RESETS.T))


@pytest.mark.parametrize("time_major", [False, True])
def test_initialize_carry_shapes_and_dtypes(time_major):
    """A stack's zero carries are shaped as rnn()'s states: [L*D, B, hidden] (hidden = proj_size when projected), c
    [L*D, B, H]; one layer in one direction's, as its cell's: [*batch, hidden]."""
    shape = (T, B, I) if time_major else (B, T, I)
    linen = jcr_flax.LSTM(
        num_units=5, num_layers=2, direction="bidirectional", proj_size=3, dtype=jnp.bfloat16, time_major=time_major
    )
    model = jcr_nnx.LSTM(
        I,
        5,
        num_layers=2,
        direction="bidirectional",
        proj_size=3,
        dtype=jnp.bfloat16,
        time_major=time_major,
        rngs=nnx.Rngs(0),
    )
    for c, h in (  # Flax's order
        linen.initialize_carry(jax.random.key(0), shape),
        linen.initialize_carry(None, (B, I)),
        model.initialize_carry(shape),
        model.initialize_carry((B, I)),
    ):
        assert h.shape == (4, B, 3) and c.shape == (4, B, 5)
        assert h.dtype == c.dtype == jnp.bfloat16
        assert not np.any(np.asarray(h, np.float32)) and not np.any(np.asarray(c, np.float32))
    gru = jcr_flax.GRU(num_units=5).initialize_carry(None, (B, I))  # one layer, one direction: the cell's
    assert gru.shape == (B, 5) and gru.dtype == jnp.float32
    assert jcr_flax.GRU(num_units=5).initialize_carry(None, (3,)).shape == (5,)  # one unbatched step, as a cell's
    assert jcr_flax.GRU(num_units=5).initialize_carry(None, (4, B, T, I)).shape == (4, B, 5)  # x with two batch axes
    with pytest.raises(ValueError, match=re.escape("input_shape is (); expected one step's input shape")):
        linen.initialize_carry(None, ())
