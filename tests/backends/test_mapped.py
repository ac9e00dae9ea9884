"""A call under ``jax.vmap`` (``Call.mapped``: an Equinox module runs one sequence and the batch is a vmap) is
differentiated by JAX itself: the xla implementation's directions carry no custom_vjp there (``xla._mapped_direction``),
nor the hybrid whose training side it is (``hybrid._by_jvp``). JAX runs a custom_vjp's backward batched per mapped
element, each element's weight gradient a product of its own rows, summed after; its own transpose of the vmapped
products takes all the rows in one. Values and gradients, under ``grad(vmap)`` and ``vmap(grad)``, against the
reference implementation."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import loops
from jax_cudnn_rnn.backends.onednn import extension

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import skips
from support import draw_inputs, jaxpr_eqns, make_config, mapped_gradients, require_extension

N = 3  # mapped sequences
CASES = [
    ("lstm", 1, "unidirectional", {}, False),
    ("gru", 2, "bidirectional", {}, True),
    ("rnn_tanh", 1, "unidirectional", {}, True),
    ("lstm", 2, "bidirectional", {"proj_size": 2}, False),
    ("gru", 2, "unidirectional", {"input_mode": "skip_input"}, True),
]


def _mapped_inputs(cfg, lengths: bool):
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(3), batch=1)
    xs = jax.random.normal(jax.random.key(5), (N, *x.shape))
    seq_lengths = jnp.array([[6], [2], [0]], jnp.int32) if lengths else None
    return params, xs, h0, c0, seq_lengths


def _loss(cfg, xs, h0, c0, seq_lengths, implementation):
    def one(params, x, lengths):
        y, h_n, c_n = jcr.rnn(params, x, h0, c0, cfg, seq_lengths=lengths, implementation=implementation)
        return jnp.sum(y**2) + jnp.sum(h_n) + (0.0 if c_n is None else jnp.sum(c_n * 0.5))

    return mapped_gradients(one, xs, seq_lengths)


def _custom_vjps(fn, *args) -> list[str]:
    return [e.primitive.name for e in jaxpr_eqns(jax.make_jaxpr(fn)(*args).jaxpr) if "custom_vjp" in e.primitive.name]


@pytest.mark.parametrize("mode,layers,direction,extra,lengths", CASES, ids=str)
@pytest.mark.parametrize("implementation", ["xla", "reference+xla", "onednn+xla"])
def test_a_mapped_call_is_differentiated_by_jax_itself(mode, layers, direction, extra, lengths, implementation):
    if implementation.startswith("onednn"):
        require_extension(extension.EXTENSION, skips.REQUIRE_ONEDNN)
    cfg = make_config(mode, layers, direction, **extra)
    params, xs, h0, c0, seq_lengths = _mapped_inputs(cfg, lengths)
    got = _loss(cfg, xs, h0, c0, seq_lengths, implementation)
    want = _loss(cfg, xs, h0, c0, seq_lengths, "reference")
    for got_fn, want_fn in zip(got, want, strict=True):
        assert _custom_vjps(got_fn, params) == []
        np.testing.assert_allclose(np.asarray(jax.jit(got_fn)(params)), np.asarray(want_fn(params)), atol=2e-5)
    # Outside vmap the fast path keeps its own backward.
    single = lambda p: jnp.sum(jcr.rnn(p, xs[0], h0, c0, cfg, implementation="xla")[0])  # noqa: E731
    assert _custom_vjps(jax.grad(single), params)


def test_mapped_counts_the_elements_of_every_vmap_that_maps_the_input():
    """``loops.mapped`` (``Call.mapped``): the product of the sizes of the vmaps that map x where the call is traced,
    0 outside vmap, in a vmap that maps other arguments only, and where the vmap encloses a jit that encloses it."""
    seen = []

    def record(x, other=None):
        seen.append(loops.mapped(x))
        return x

    x = jnp.zeros((3, 5, 2))
    record(x)
    jax.jit(record)(x)
    jax.vmap(record)(x)
    jax.vmap(jax.vmap(record))(x)
    jax.jit(jax.vmap(jax.vmap(record)))(x)
    jax.vmap(record, in_axes=(None, 0))(x, jnp.zeros(4))
    jax.vmap(jax.jit(record))(x)
    assert seen == [0, 0, 3, 15, 15, 0, 0]
