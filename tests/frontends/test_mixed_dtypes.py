"""Parameters kept in another dtype than the module computes in (issue 59): a mixed-precision step's
``jax.tree.map(lambda a: a.astype(jnp.bfloat16), variables)`` applied to float32 inputs. Every frontend whose
parameters are named tensors casts them to the module's dtype, as the packed buffer is cast, so that every
implementation computes the same thing: the module with those (rounded) values in its own dtype. Before, the oneDNN
handlers took the first piece's dtype for the network's and read a bfloat16 network from a float32-sized buffer,
beside bytes nobody wrote: different outputs on every run, no error (or, where oneDNN has no bfloat16 kernels, a
oneDNN failure). ``rnn()`` itself refuses what no frontend casts: a buffer, or pieces, of another dtype."""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import _buffer, layout
from jax_cudnn_rnn import flax as jcr_flax
from jax_cudnn_rnn import nnx as jcr_nnx
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import import_or_skip

T, B, I, H = 5, 3, 4, 6
BF16 = jnp.bfloat16


def _cpu_implementations() -> list[str]:
    """Every single name the registry runs on the CPU (the oneDNN ones where the extension is loaded)."""
    return list(registry.implementations("cpu"))


def _runnable(implementation: str, config: jcr.RNNConfig) -> None:
    reason = registry.why_not(implementation, "cpu", Call(config, T, B))
    if reason is not None:
        pytest.skip(f"{implementation} cannot run {config.mode} here: it needs {reason}")


def _rounded(tree):
    """Each array rounded to bfloat16 and back: the values the module computes with."""
    return jax.tree.map(lambda a: a.astype(BF16).astype(a.dtype), tree)


def _as_bf16(tree):
    return jax.tree.map(lambda a: a.astype(BF16), tree)


def _x():
    return jax.random.normal(jax.random.key(7), (B, T, I), jnp.float32)


@pytest.mark.parametrize("implementation", _cpu_implementations())
@pytest.mark.parametrize("module", [jcr_flax.LSTM, jcr_flax.GRU])
def test_linen_parameters_in_bfloat16_compute_in_the_modules_dtype(module, implementation):
    model = module(H, implementation=implementation)
    variables = model.init(jax.random.key(0), _x())
    _runnable(implementation, model.packed(variables).config)
    want = module(H, implementation="xla").apply(_rounded(variables), _x())
    got = model.apply(_as_bf16(variables), _x())
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)
    again = jax.jit(model.apply)(_as_bf16(variables), _x())  # the same under jit, every time
    np.testing.assert_allclose(np.asarray(again), np.asarray(want), rtol=2e-5, atol=2e-5)

    grads = jax.grad(lambda v: jnp.sum(model.apply(v, _x()) ** 2))(_as_bf16(variables))
    want_grads = jax.grad(lambda v: jnp.sum(module(H, implementation="xla").apply(v, _x()) ** 2))(_rounded(variables))
    for got_leaf, want_leaf in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True):
        assert got_leaf.dtype == BF16  # the gradient of a parameter comes back in its own dtype
        np.testing.assert_allclose(
            np.asarray(got_leaf, np.float32), np.asarray(want_leaf.astype(BF16), np.float32), rtol=2e-2, atol=2e-3
        )


@pytest.mark.parametrize("implementation", _cpu_implementations())
def test_nnx_parameters_in_bfloat16_compute_in_the_modules_dtype(implementation):
    model = jcr_nnx.GRU(I, H, implementation=implementation, rngs=nnx.Rngs(0))
    _runnable(implementation, model.config)
    reference = jcr_nnx.GRU(I, H, implementation="xla", rngs=nnx.Rngs(0))
    graph, state = nnx.split(model)
    ref_graph, ref_state = nnx.split(reference)
    want = nnx.merge(ref_graph, _rounded(ref_state))(_x())
    got = nnx.merge(graph, _as_bf16(state))(_x())
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("implementation", _cpu_implementations())
def test_equinox_parameters_in_bfloat16_compute_in_the_modules_dtype(implementation):
    eqx = import_or_skip("equinox")
    from jax_cudnn_rnn import equinox as je

    model = je.LSTM(I, H, implementation=implementation, key=jax.random.key(0))
    _runnable(implementation, model.config)
    reference = je.LSTM(I, H, implementation="xla", key=jax.random.key(0))
    cast = lambda tree, f: jax.tree.map(lambda a: f(a) if eqx.is_inexact_array(a) else a, tree)  # noqa: E731
    x = _x()[0]
    want_y, want_state = cast(reference, lambda a: a.astype(BF16).astype(a.dtype))(x)
    got_y, got_state = cast(model, lambda a: a.astype(BF16))(x)
    assert got_y.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got_y), np.asarray(want_y), rtol=2e-5, atol=2e-5)
    for got, want in zip(got_state, want_state, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_rnn_refuses_pieces_and_buffers_of_another_dtype():
    """What no frontend casts is checked where rnn() reads it: a buffer or pieces of another dtype than config's is a
    TypeError naming the tensor, never a call that reads a network of one dtype from memory sized for another."""
    config = jcr.RNNConfig("lstm", 1, H, I)
    buffer = jcr.init_params(jax.random.key(0), config)
    x = jnp.ones((T, B, I))
    h0 = jnp.zeros(config.state_shape(B))
    with pytest.raises(TypeError, match=r"params has dtype bfloat16; expected float32 \(config.dtype\)"):
        jcr.rnn(buffer.astype(BF16), x, h0, h0, config)
    weights, biases = layout.param_slots(config)
    arrays = [buffer[s.offset : s.offset + s.size].reshape(s.shape) for s in weights + biases]
    pieces = _buffer.Pieces([a.astype(BF16) for a in arrays], weights + biases, config)
    with pytest.raises(TypeError, match=r"params\['layer_0/forward/w_input/i'\] has dtype bfloat16; expected float32"):
        jcr.rnn(pieces, x, h0, h0, config)
    short = _buffer.Pieces([arrays[0][:-1], *arrays[1:]], weights + biases, config)
    with pytest.raises(ValueError, match=r"params\['layer_0/forward/w_input/i'\] has shape \(5, 4\); expected 24"):
        jcr.rnn(short, x, h0, h0, config)
