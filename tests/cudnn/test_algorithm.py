"""The cuDNN algorithm choice (jax_cudnn_rnn/backends/cudnn/algorithm.py) without a GPU: PyTorch's heuristic on given
device facts, the documented limits, autotune's selection and cache, argument checking, and the attribute the handlers
receive."""

import os
import sys

os.environ["KERAS_BACKEND"] = "jax"  # Keras reads it once, at its first import (the Keras layer's case below)

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends.cudnn import algorithm
from jax_cudnn_rnn.backends.cudnn import backend as cudnn_backend
from jax_cudnn_rnn.backends.cudnn.algorithm import (
    PERSIST_STATIC,
    PERSIST_STATIC_SMALL_H,
    STANDARD,
    DeviceInfo,
    Problem,
)
from jax_cudnn_rnn.backends.fused.vjp import KernelArrays

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skips import import_or_skip

H100 = DeviceInfo(9, 0, 132)
A40 = DeviceInfo(8, 6, 84)
V100 = DeviceInfo(7, 0, 80)


def _problem(
    mode="lstm", units=128, input_size=64, batch=32, time=1000, dtype="float32", padded=False, training=False, **options
):
    cfg = jcr.RNNConfig(
        mode=mode,
        num_layers=options.pop("num_layers", 1),
        num_units=units,
        input_size=input_size,
        dtype=dtype,
        **options,
    )
    return Problem(cfg, time, batch, padded, training, allow_tf32=False)


@pytest.mark.parametrize(
    "mode, units, training, want",
    [
        ("lstm", 128, True, PERSIST_STATIC_SMALL_H),  # config F: backward limit 128 for LSTM/GRU
        ("lstm", 160, False, PERSIST_STATIC_SMALL_H),  # inference limit 192
        ("lstm", 160, True, STANDARD),  # too big for the backward pass: both passes stay standard
        ("gru", 192, False, PERSIST_STATIC_SMALL_H),
        ("gru", 193, False, STANDARD),
        ("rnn_tanh", 256, True, PERSIST_STATIC_SMALL_H),
        ("rnn_relu", 384, False, PERSIST_STATIC_SMALL_H),
        ("rnn_relu", 385, False, STANDARD),
        ("lstm", 512, False, STANDARD),  # config A in float32
    ],
)
def test_heuristic_small_h_limits(mode, units, training, want):
    assert algorithm.heuristic(_problem(mode, units, training=training), H100) == want


@pytest.mark.parametrize(
    "options, reason",
    [
        (dict(padded=True), "seq_lengths"),
        (dict(proj_size=32), "projection"),
        (dict(cell_clip=1.0), "cell_clip"),
        (dict(dtype="float64"), "float64"),
        (dict(bias_mode="single_recurrent"), "bias_mode='single_recurrent'"),
        (dict(bias_mode="single_input"), "bias_mode='single_input'"),
        (dict(bias_mode="none"), "bias_mode='none'"),
    ],
)
def test_persistent_algorithms_refuse_what_cudnn_does_not_support(options, reason):
    problem = _problem(units=64, **options)
    assert algorithm.heuristic(problem, H100) == STANDARD
    assert algorithm.candidates(problem) == (STANDARD,)
    for algo in (PERSIST_STATIC, PERSIST_STATIC_SMALL_H):
        assert reason in algorithm.unsupported_reason(algo, problem)
        with pytest.raises(ValueError, match=f"algorithm='{algo}' cannot run this call: .*{reason}"):
            algorithm.choose(algo, problem, seconds=None)


@pytest.mark.parametrize(
    "device, batch, want",
    [
        (H100, 64, PERSIST_STATIC),  # config A in float16: PyTorch's sm_80+ rule (LSTM: batch % 8 == 0, <= 128)
        (H100, 60, STANDARD),
        (H100, 256, STANDARD),
        (A40, 64, STANDARD),  # sm_86 and fewer than 98 SMs are excluded
        (V100, 64, PERSIST_STATIC),  # sm_70: batch % 16 == 0 and T >= 40
        (V100, 80, STANDARD),
    ],
)
def test_heuristic_persist_static_for_float16(device, batch, want):
    problem = _problem(units=512, input_size=512, batch=batch, time=100, dtype="float16")
    assert algorithm.heuristic(problem, device) == want
    # bfloat16 and float32 never get PERSIST_STATIC from the heuristic (PyTorch applies it to float16 only)
    for dtype in ("bfloat16", "float32"):
        assert (
            algorithm.heuristic(_problem(units=512, input_size=512, batch=batch, time=100, dtype=dtype), device)
            == STANDARD
        )


def test_no_gpu_means_standard():
    assert algorithm.heuristic(_problem(), DeviceInfo()) == STANDARD


@pytest.mark.parametrize(
    "warmup, warmup_seconds, untimed",
    [
        (2, 0.0, 2),  # a count alone
        (1, 0.35, 5),  # the first call (which may compile) starts the clock: 1 + 4 calls of 0.1 s reach 0.35 s
        (6, 0.35, 6),  # the count dominates
        (0, 0.0, 0),
    ],
)
def test_median_seconds_warms_up_by_count_and_by_time(monkeypatch, warmup, warmup_seconds, untimed):
    clock = {"now": 0.0}
    durations = iter([0.1] * untimed + [0.3, 0.1, 0.2])  # untimed runs, then the timed ones

    def run():
        clock["now"] += next(durations)

    monkeypatch.setattr(algorithm.time, "perf_counter", lambda: clock["now"])
    median = algorithm.median_seconds(run, repeats=3, warmup=warmup, warmup_seconds=warmup_seconds)
    assert median == pytest.approx(0.2)  # the median of the three timed runs: every untimed run was consumed
    assert next(durations, None) is None  # and no more runs than that


def test_autotune_keeps_the_fastest_measures_once_and_skips_refusals(monkeypatch):
    monkeypatch.setattr(algorithm, "_TUNED", {})
    problem = _problem(units=64, training=True)
    assert algorithm.candidates(problem) == (STANDARD, PERSIST_STATIC, PERSIST_STATIC_SMALL_H)
    measured = []

    def seconds(algo):
        measured.append(algo)
        if algo == PERSIST_STATIC:
            raise RuntimeError("CUDNN_STATUS_NOT_SUPPORTED")
        return {STANDARD: 3.0, PERSIST_STATIC_SMALL_H: 1.0}[algo]

    assert algorithm.choose("autotune", problem, seconds) == PERSIST_STATIC_SMALL_H
    assert algorithm.choose("autotune", problem, seconds) == PERSIST_STATIC_SMALL_H
    assert measured == [STANDARD, PERSIST_STATIC, PERSIST_STATIC_SMALL_H]  # once per problem
    assert algorithm.tuned() == {problem: PERSIST_STATIC_SMALL_H}


def test_autotune_reports_a_failing_standard_run(monkeypatch):
    monkeypatch.setattr(algorithm, "_TUNED", {})

    def seconds(algo):
        raise RuntimeError(f"{algo} failed")

    with pytest.raises(RuntimeError, match="standard failed"):
        algorithm.choose("autotune", _problem(units=64), seconds)


@pytest.mark.parametrize("bad", ["fast", "STANDARD", 3])
def test_rnn_rejects_an_unknown_algorithm(bad):
    cfg = jcr.RNNConfig(mode="gru", num_layers=1, num_units=4, input_size=3)
    params = jcr.init_params(jax.random.key(0), cfg)
    x, h0 = jnp.zeros((5, 2, 3)), jnp.zeros((1, 2, 4))
    with pytest.raises(
        ValueError, match=r"algorithm is .*; expected None or one of measured, heuristic, autotune, standard"
    ):
        jcr.rnn(params, x, h0, None, cfg, algorithm=bad)


def test_xla_accepts_and_ignores_the_algorithm():
    cfg = jcr.RNNConfig(mode="lstm", num_layers=1, num_units=4, input_size=3)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.random.normal(jax.random.key(1), (5, 2, 3))
    h0, c0 = jnp.zeros((1, 2, 4)), jnp.zeros((1, 2, 4))
    want = jcr.rnn(params, x, h0, c0, cfg, implementation="xla")
    for requested in algorithm.CHOICES:
        got = jcr.rnn(params, x, h0, c0, cfg, implementation="xla", algorithm=requested)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_explicit_algorithm_reaches_the_handler_attributes():
    cfg = jcr.RNNConfig(mode="lstm", num_layers=1, num_units=16, input_size=8)
    params = jcr.init_params(jax.random.key(0), cfg)
    x, h0 = jnp.zeros((5, 2, 8)), jnp.zeros((1, 2, 16))
    static = cudnn_backend.Static(cfg, False, PERSIST_STATIC_SMALL_H)
    text = (
        jax.jit(lambda p: cudnn_backend._rnn(KernelArrays(p, x, h0, h0), None, static))
        .trace(params)
        .lower(lowering_platforms=("cuda",))
        .as_text()
    )
    assert 'algorithm = "persist_static_small_h"' in text
    lengths = jnp.full((2,), 5, jnp.int32)
    with pytest.raises(ValueError, match="cannot run this call: the call has seq_lengths"):
        jax.jit(lambda p: cudnn_backend._rnn(KernelArrays(p, x, h0, h0), lengths, static)).trace(params)


@pytest.mark.parametrize("training", [False, True])
def test_autotune_measures_eagerly_while_jit_traces(cudnn_stand_in, training):
    """Autotune times real runs at trace time: inside jax.jit tracing they must still execute (here cuDNN's kernels
    are stood in for)."""
    problem = _problem(units=8, input_size=4, batch=3, time=5, training=training)
    measured = []

    @jax.jit
    def traced(v):
        measured.append(cudnn_backend._time_algorithm(problem, STANDARD))
        return v + 1

    traced(jnp.zeros(()))
    assert len(measured) == 1 and isinstance(measured[0], float) and measured[0] > 0
    assert {algo for _, _, algo in cudnn_stand_in.calls} == {STANDARD}


# H200: compute capability 9.0 as the H100, 132 SMs (SXM); the heuristic reads only these facts.
H200 = DeviceInfo(9, 0, 132)


def _frontend_configs(mode):
    """The default module (layer) of each frontend for config F's network (H=128, I=64), as it reaches the kernels."""
    from flax import nnx

    from jax_cudnn_rnn import equinox as je
    from jax_cudnn_rnn import flax as jcr_flax
    from jax_cudnn_rnn import nnx as jcr_nnx

    linen = {"lstm": jcr_flax.LSTM, "gru": jcr_flax.GRU}[mode](128)
    x = jnp.zeros((32, 5, 64))
    yield "linen", linen.packed(linen.init(jax.random.key(0), x)).config
    yield "nnx", {"lstm": jcr_nnx.LSTM, "gru": jcr_nnx.GRU}[mode](64, 128, rngs=nnx.Rngs(0)).config
    yield "equinox", {"lstm": je.LSTM, "gru": je.GRU}[mode](64, 128, key=jax.random.key(0)).config
    import_or_skip("keras")
    from jax_cudnn_rnn import keras as jk

    layer = {"lstm": jk.LSTM, "gru": jk.GRU}[mode](128)
    yield "keras", layer._rnn_config(64, "float32")


@pytest.mark.parametrize("device", [H100, H200], ids=["H100", "H200"])
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_every_frontends_default_module_gets_the_algorithm_double_bias_gets(mode, training, device):
    """Issue 62: cuDNN refuses the persistent algorithms for a single-bias weight space, and the Flax, NNX and
    Equinox modules and the Keras LSTM trained one bias per gate on one (Flax's LSTM: 'single_recurrent'): the
    standard algorithm, 16-21 ms where PyTorch's persistent kernel took 2.6 ms at config F. Their parameterizations
    now lie on the double-bias space with the biases their cells lack held at zero, so that cuDNN's heuristic picks
    what rnn() with bias_mode='double' gets: the small-H persistent kernel at config F."""
    double = _problem(mode, 128, 64, 32, 1000, training=training)
    want = algorithm.heuristic(double, device)
    assert want == PERSIST_STATIC_SMALL_H
    for frontend, config in _frontend_configs(mode):
        assert config.bias_mode == "double", frontend
        problem = Problem(config, 1000, 32, False, training, allow_tf32=False)
        assert algorithm.heuristic(problem, device) == want, frontend
        assert algorithm.candidates(problem) == algorithm.candidates(double), frontend  # autotune's too
