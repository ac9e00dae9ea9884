"""A differential fuzz across implementations (issue 59): random configurations, shapes (T and B down to 1), dtypes
(float32, bfloat16, and parameters kept in another dtype than the network computes in), sequence lengths (0 and T
included), resets, and parameters as the opaque buffer or as a frontend's named tensors (``_buffer.Pieces``, the held
biases of Flax's and Equinox's parameterizations included), run on every implementation this machine has for the
call and compared with the "reference" implementation (a naive scan that JAX differentiates): the outputs and the
gradients of a random weighted sum of them with respect to the parameters, x, h0 and c0.

Each failure it found became a test of its own (tests/backends/test_padding_values.py, tests/frontends/
test_mixed_dtypes.py). Examples are drawn afresh each run; a failure prints the example and a reproduction blob.
JAX_CUDNN_RNN_FUZZ_EXAMPLES scales how many (each compiles every implementation's forward and training step: about
ten seconds an example on a 2-core CPU).
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn._parameterization import Parameterization, library_biases
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import draw_inputs

EXAMPLES = int(os.environ.get("JAX_CUDNN_RNN_FUZZ_EXAMPLES", "12")) // 2 or 1
BF16 = np.dtype(ml_dtypes.bfloat16)


@st.composite
def cases(draw):
    mode = draw(st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]))
    units = draw(st.sampled_from([1, 3, 5]))
    skip = draw(st.sampled_from([False, False, True]))
    extra = {}
    if mode == "lstm" and units > 1 and not skip:
        extra["proj_size"] = draw(st.sampled_from([0, 0, units - 1]))
    named = draw(st.sampled_from([None, "flax", "equinox"]))  # None: the packed buffer
    space, held = library_biases(named, mode, None) if named else (draw(st.sampled_from(["double", "none"])), ())
    config = jcr.RNNConfig(
        mode,
        draw(st.integers(1, 2)),
        units,
        units if skip else draw(st.sampled_from([1, 2, 4])),
        direction=draw(st.sampled_from(["unidirectional", "bidirectional"])),
        input_mode="skip_input" if skip else "linear_input",
        bias_mode=space,
        dtype=draw(st.sampled_from(["float32", "float32", "bfloat16"])),
        **extra,
    )
    steps, batch = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    lengths = None
    if draw(st.booleans()):
        lengths = np.asarray(draw(st.lists(st.integers(0, steps), min_size=batch, max_size=batch)), np.int32)
    resets = draw(st.sampled_from([False, False, True]))
    # Named parameters kept in bfloat16 for a float32 network: the frontends cast them (Parameterization.pieces).
    mixed = named is not None and config.dtype == np.float32 and draw(st.booleans())
    return Parameterization(config, held), named is not None, mixed, steps, batch, lengths, resets, draw(st.integers())


def _params(parameterization, named, mixed, buffer):
    """The parameters as a caller hands them: the buffer, or a frontend's named tree (in bfloat16 where mixed)."""
    if not named:
        return buffer
    tree = parameterization.from_buffer(jnp.asarray(buffer))
    return jax.tree.map(lambda a: a.astype(jnp.bfloat16), tree) if mixed else tree


def _loss_and_grads(parameterization, named, implementation, params, x, h0, c0, lengths, resets, weights):
    config = parameterization.config

    def loss(params, x, h0, c0):
        pieces = parameterization.pieces(params) if named else params
        y, h_n, c_n = jcr.rnn(
            pieces, x, h0, c0, config, seq_lengths=lengths, resets=resets, implementation=implementation
        )
        total = jnp.sum(y.astype(jnp.float32) * weights[0]) + jnp.sum(h_n.astype(jnp.float32) * weights[1])
        outputs = (y, h_n) if c_n is None else (y, h_n, c_n)
        return (total if c_n is None else total + jnp.sum(c_n.astype(jnp.float32) * weights[2])), outputs

    argnums = (0, 1, 2) if c0 is None else (0, 1, 2, 3)
    (_, outputs), grads = jax.jit(jax.value_and_grad(loss, argnums, has_aux=True))(params, x, h0, c0)
    return outputs, grads


def _assert_close(got, want, tolerance, what):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        assert g.shape == w.shape, what
        assert np.all(np.isfinite(g)), what
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        assert float(np.abs(g - w).max(initial=0.0)) <= tolerance * scale, (what, float(np.abs(g - w).max()))


@settings(max_examples=EXAMPLES, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_every_implementation_agrees_with_the_reference(case):
    parameterization, named, mixed, steps, batch, lengths, with_resets, seed = case
    config = parameterization.config
    rng = np.random.default_rng(seed % 2**32)
    buffer, x, h0, c0 = draw_inputs(config, rng, steps, batch)
    resets = (rng.random((steps, batch)) < 0.3) if with_resets else None
    weights = [
        rng.normal(size=shape).astype(np.float32)
        for shape in ((steps, batch, config.output_size), config.state_shape(batch), config.cell_shape(batch))
    ]
    params = _params(parameterization, named, mixed, buffer)
    arrays = [jnp.asarray(a) for a in (x, h0)] + [None if c0 is None else jnp.asarray(c0)]
    lengths = None if lengths is None else jnp.asarray(lengths)
    resets = None if resets is None else jnp.asarray(resets)
    run = (parameterization, named)
    want = _loss_and_grads(*run, "reference", params, *arrays, lengths, resets, weights)
    call = Call(config, steps, batch, lengths is not None, resets=resets is not None)
    tolerance = 3e-2 if config.dtype == BF16 else 1e-4  # bfloat16: 8 mantissa bits, computed in another order
    ran = []
    for implementation in registry.implementations("cpu"):
        if implementation == "reference" or registry.why_not(implementation, "cpu", call) is not None:
            continue
        got = _loss_and_grads(*run, implementation, params, *arrays, lengths, resets, weights)
        _assert_close(got, want, tolerance, f"{implementation} on {config}, named={named}, mixed={mixed}")
        if lengths is not None:  # zero past each sequence's end, on every implementation
            y = np.asarray(got[0][0], np.float32)
            assert all(np.all(y[n:, b] == 0) for b, n in enumerate(np.asarray(lengths)))
        ran.append(implementation)
    assert "xla" in ran  # the xla implementation runs every call
