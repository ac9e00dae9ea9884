"""Property-based tests: random configurations, shapes (T and B down to 1), dtypes, sequence lengths (0 included),
resets and options against the independent float64 NumPy oracle — outputs, gradients (directional derivatives of the
oracle), and PyTorch's modules run on the converted weights — plus exact canonical round trips.

Examples are drawn afresh each run (a failure prints the example and a reproduction blob). Compiling each new shape is
what costs on CPU, so CI draws a few per property; JAX_CUDNN_RNN_FUZZ_EXAMPLES sets how many (scripts/gpu_check.sh
runs the GPU property, marked ``gpu``, with more).
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import interop

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skips import import_or_skip
from support import assert_outputs_close, draw_inputs, oracle, torch_module


def _settings(examples: int):
    """``examples`` per property in CI, scaled by JAX_CUDNN_RNN_FUZZ_EXAMPLES (the count for the largest)."""
    wanted = os.environ.get("JAX_CUDNN_RNN_FUZZ_EXAMPLES")
    if wanted is not None:
        examples = max(1, int(wanted) * examples // 12)
    return settings(
        max_examples=examples,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# Against the float64 oracle: float32 is a few dozen float32 operations deep; float16/bfloat16 are computed in float32
# and rounded once, at the end, so a few half-ulps (2^-11, 2^-8) relative.
TOLERANCES = {"float32": 2e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.6e-2}


@st.composite
def configs(draw, dtypes=tuple(DTYPES), torch_expressible=False):
    """An RNNConfig: every mode, 1-3 layers, H and I from 1, both directions; skip input, projection, clipping and
    the single/no bias modes unless ``torch_expressible``."""
    mode = draw(st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]))
    num_units = draw(st.sampled_from([1, 3, 5]))
    input_mode = "linear_input" if torch_expressible else draw(st.sampled_from(["linear_input", "skip_input"]))
    input_size = num_units if input_mode == "skip_input" else draw(st.sampled_from([1, 2, 4]))
    extra = {}
    if mode == "lstm" and num_units > 1:
        extra["proj_size"] = draw(st.sampled_from([0, 0, num_units - 1]))
        if not torch_expressible:
            extra["cell_clip"] = draw(st.sampled_from([None, None, 0.4]))
    bias_modes = ["double", "double", "none"]
    if not torch_expressible:
        bias_modes += ["single_input", "single_recurrent"]
    return jcr.RNNConfig(
        mode=mode,
        num_layers=draw(st.integers(1, 3)),
        num_units=num_units,
        input_size=input_size,
        direction=draw(st.sampled_from(["unidirectional", "bidirectional"])),
        input_mode=input_mode,
        bias_mode=draw(st.sampled_from(bias_modes)),
        dtype=draw(st.sampled_from(dtypes)),
        **extra,
    )


@st.composite
def problems(draw, dtypes=tuple(DTYPES), torch_expressible=False):
    """(config, T, B, seq_lengths or None, seed): T in [1, 6], B in [1, 4], lengths in [0, T] (1 for PyTorch, whose
    packed sequences have no empty one) about half the time."""
    cfg = draw(configs(dtypes, torch_expressible))
    steps, batch = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    lengths = None
    if draw(st.booleans()):
        shortest = 1 if torch_expressible else 0
        lengths = np.asarray(draw(st.lists(st.integers(shortest, steps), min_size=batch, max_size=batch)), np.int32)
    return cfg, steps, batch, lengths, draw(st.integers(0, 2**16))


def _resets(rng, steps, batch, with_resets):
    """bool [T, B] with a reset at about a third of the steps, or None."""
    return (rng.random((steps, batch)) < 0.3) if with_resets else None


def _x64(cfg):
    return jax.enable_x64(cfg.dtype == np.float64)


def _assert_close(got, want, dtype_name, what):
    tol = TOLERANCES[dtype_name]
    assert_outputs_close(got, want, atol=tol, rtol=tol, what=what)


def _run(cfg, params, x, h0, c0, lengths, implementation, resets=None):
    return jcr.rnn(
        jnp.asarray(params),
        jnp.asarray(x),
        jnp.asarray(h0),
        None if c0 is None else jnp.asarray(c0),
        cfg,
        seq_lengths=None if lengths is None else jnp.asarray(lengths),
        implementation=implementation,
        resets=None if resets is None else jnp.asarray(resets),
    )


@_settings(12)
@given(problem=problems(), implementation=st.sampled_from(["xla", "reference"]), with_resets=st.booleans())
def test_outputs_match_the_oracle(problem, implementation, with_resets):
    cfg, steps, batch, lengths, seed = problem
    rng = np.random.default_rng(seed)
    with _x64(cfg):
        params, x, h0, c0 = draw_inputs(cfg, rng, steps, batch)
        resets = _resets(rng, steps, batch, with_resets)
        got = _run(cfg, params, x, h0, c0, lengths, implementation, resets)
        assert got[0].dtype == cfg.dtype and got[0].shape == (steps, batch, cfg.output_size)
        want = oracle(cfg, params, x, h0, c0, seq_lengths=lengths, resets=resets)
        _assert_close(got, want, cfg.dtype.name, implementation)
        if lengths is not None:  # zero past each sequence's end
            for b, n in enumerate(lengths):
                assert np.all(np.asarray(got[0])[n:, b] == 0)


def _oracle_loss(cfg, weights, biases, x, h0, c0, lengths, resets, loss_weights):
    y, h_n, c_n = oracle(
        cfg, jcr.canonical_to_params(weights, biases, cfg), x, h0, c0, seq_lengths=lengths, resets=resets
    )
    total = np.sum(y * loss_weights[0]) + np.sum(h_n * loss_weights[1])
    return total if c_n is None else total + np.sum(c_n * loss_weights[2])


@_settings(6)
@given(
    problem=problems(dtypes=("float64",)),
    implementation=st.sampled_from(["xla", "reference"]),
    with_resets=st.booleans(),
)
def test_gradients_are_the_oracles_directional_derivatives(problem, implementation, with_resets):
    """The gradient of a random weighted sum of (y, h_n, c_n) w.r.t. params, x, h0 and c0, in float64, dotted with a
    random direction equals the oracle's central difference along it (step 1e-6: error ~1e-10)."""
    cfg, steps, batch, lengths, seed = problem
    rng = np.random.default_rng(seed)
    with _x64(cfg):
        params, x, h0, c0 = draw_inputs(cfg, rng, steps, batch)
        resets = _resets(rng, steps, batch, with_resets)
        loss_weights = [
            rng.normal(size=shape)
            for shape in ((steps, batch, cfg.output_size), cfg.state_shape(batch), cfg.cell_shape(batch))
        ]

        def loss(params, x, h0, c0):
            y, h_n, c_n = _run(cfg, params, x, h0, c0, lengths, implementation, resets)
            total = jnp.sum(y * loss_weights[0]) + jnp.sum(h_n * loss_weights[1])
            return total if c_n is None else total + jnp.sum(c_n * loss_weights[2])

        primals = [jnp.asarray(a) for a in (params, x, h0, c0) if a is not None]
        grads = jax.grad(lambda *a: loss(*a, *([None] * (4 - len(a)))), argnums=tuple(range(len(primals))))(*primals)
        direction = [rng.normal(size=np.shape(a)) for a in primals]
        analytic = sum(float(np.vdot(g, d)) for g, d in zip(grads, direction, strict=True))

        def at(step):
            moved = [np.asarray(a) + step * d for a, d in zip(primals, direction, strict=True)]
            weights, biases = jcr.params_to_canonical(jnp.asarray(moved[0]), cfg)
            rest = moved[1:] + [None] * (4 - len(moved))
            return _oracle_loss(
                cfg,
                [np.asarray(w) for w in weights],
                [np.asarray(b) for b in biases],
                *rest[:3],
                lengths,
                resets,
                loss_weights,
            )

        step = 1e-6
        numeric = (at(step) - at(-step)) / (2 * step)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-6)


@_settings(8)
@given(problem=problems(dtypes=("float32",), torch_expressible=True))
def test_torch_modules_match_the_oracle_both_ways(problem):
    """Our weights loaded into PyTorch's module (canonical_to_torch) give the oracle's outputs, and PyTorch's own
    initialisation read back (torch_to_canonical) gives the oracle's outputs under rnn(): each direction of the
    conversion against an independent computation, not against the other direction."""
    torch = import_or_skip("torch")
    cfg, steps, batch, lengths, seed = problem
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(seed), steps, batch)
    weights, biases = jcr.params_to_canonical(jnp.asarray(params), cfg)
    ours_to_torch = torch_module(
        cfg, interop.canonical_to_torch([np.asarray(w) for w in weights], [np.asarray(b) for b in biases], cfg)
    )
    torch_own = torch_module(cfg, seed=seed)
    own_params = jcr.canonical_to_params(*interop.torch_to_canonical(torch_own.state_dict(), cfg), cfg)
    for module, buffer, what in (
        (ours_to_torch, params, "canonical_to_torch"),
        (torch_own, own_params, "torch_to_canonical"),
    ):
        want = oracle(cfg, buffer, x, h0, c0, seq_lengths=lengths)
        state = torch.from_numpy(h0) if c0 is None else (torch.from_numpy(h0), torch.from_numpy(c0))
        with torch.no_grad():
            inputs = torch.from_numpy(x)
            if lengths is not None:
                inputs = torch.nn.utils.rnn.pack_padded_sequence(
                    inputs, torch.as_tensor(lengths, dtype=torch.int64), enforce_sorted=False
                )
            y, final = module(inputs, state)
            if lengths is not None:
                y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=steps)
        h_n, c_n = final if c0 is not None else (final, None)
        got = (y.numpy(), h_n.numpy(), None if c_n is None else c_n.numpy())
        _assert_close(got, want, "float32", what)
        if what == "torch_to_canonical":
            _assert_close(_run(cfg, buffer, x, h0, c0, lengths, "xla"), want, "float32", "rnn on torch's weights")


@_settings(24)
@given(cfg=configs(dtypes=("float32", "float16", "bfloat16")), seed=st.integers(0, 2**16))
def test_canonical_round_trips_are_exact(cfg, seed):
    rng = np.random.default_rng(seed)
    params = jnp.asarray(rng.normal(size=jcr.params_size(cfg)).astype(cfg.dtype))
    weights, biases = jcr.params_to_canonical(params, cfg)
    assert [w.shape for w in weights] == [s.shape for s in jcr.layout.param_slots(cfg)[0]]
    assert all(a.dtype == cfg.dtype for a in weights + biases)
    np.testing.assert_array_equal(jcr.canonical_to_params(weights, biases, cfg), params)
    np.testing.assert_array_equal(jcr.tree_to_params(jcr.params_to_tree(params, cfg), cfg), params)
    # Every element of the buffer belongs to exactly one canonical tensor.
    assert sum(w.size for w in weights) + sum(b.size for b in biases) == params.size
    np.testing.assert_array_equal(
        np.sort(np.concatenate([np.ravel(a) for a in weights + biases]).astype(np.float32)),
        np.sort(np.asarray(params).astype(np.float32)),
    )


@pytest.mark.gpu
@_settings(12)
@given(problem=problems(dtypes=("float32", "float64")))
def test_cudnn_matches_the_oracle_and_the_xla_gradients(problem):
    """The GPU fuzz job: cuDNN's outputs against the oracle, its gradients against the xla implementation's (float32:
    dparams with the atol of test_cudnn_gpu.py, whose persistent algorithms sum in another order)."""
    cfg, steps, batch, lengths, seed = problem
    with _x64(cfg):
        params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(seed), steps, batch)
        got = _run(cfg, params, x, h0, c0, lengths, "cudnn")
        tolerance = {"float32": 2e-5, "float64": 1e-11}[cfg.dtype.name]
        want = oracle(cfg, params, x, h0, c0, seq_lengths=lengths)
        for name, a, b in zip(("y", "h_n", "c_n"), got, want, strict=True):
            if b is not None:
                np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=tolerance, atol=tolerance, err_msg=name)

        def grads(implementation):
            def loss(*args):
                y, h_n, c_n = _run(cfg, *args, lengths, implementation)
                return jnp.sum(jnp.sin(y)) + jnp.sum(h_n**2) + (0 if c_n is None else jnp.sum(c_n))

            arrays = [jnp.asarray(a) for a in (params, x, h0, c0) if a is not None]
            return jax.grad(lambda *a: loss(*a, *([None] * (4 - len(a)))), argnums=tuple(range(len(arrays))))(*arrays)

        for name, a, b in zip(("dparams", "dx", "dh0", "dc0"), grads("cudnn"), grads("xla"), strict=False):
            atol = 2.4e-4 if name == "dparams" and cfg.dtype == np.float32 else tolerance
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tolerance, atol=atol, err_msg=name)
