"""The GPU rule (jax_cudnn_rnn/backends/cudnn/gpu_rule.py) and the registry's choice from it, without a GPU: which
measured cell speaks for a call (its shape class), what the cuDNN backend declares as its cost, the algorithm
``algorithm=None`` then runs, and that the registry's picks agree with every cell of a table.

No GPU ran any of this. The table the picks are judged against here, ``SYNTHETIC``, is invented for the test (its
device kind says so); it is not a measurement and is never shipped. The same judgement runs over every entry of the
shipped table (gpu_measurements.json), empty until a device measures one."""

from __future__ import annotations

import contextlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cudnn_stand_in import CudnnStandIn

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import registry, tuned_files
from jax_cudnn_rnn.backends.call import Call, CudnnOptions
from jax_cudnn_rnn.backends.cudnn import algorithm, gpu_rule, plan, tuned
from jax_cudnn_rnn.backends.cudnn import backend as cudnn_backend
from jax_cudnn_rnn.backends.cudnn.algorithm import PERSIST_STATIC, PERSIST_STATIC_SMALL_H, STANDARD, DeviceInfo

KIND = "SYNTHETIC H200 (invented numbers for tests, not a measurement)"
FACTS = DeviceInfo(9, 0, 132, KIND)


def _cell(config, mode, dtype, layers, direction, hidden, input_size, batch, time, ratios):
    return gpu_rule.Cell(config, mode, dtype, layers, direction, hidden, input_size, batch, time, (1.0, 2.0), ratios)


UNI, BI = "unidirectional", "bidirectional"
# Shaped like the bench's GPU configs (A-G, G's one-step calls), with invented ratios over the xla implementation's
# time: each [forward, training step]; None where not measured (B and G are inference only).
SYNTHETIC = gpu_rule.Measured(
    KIND,
    "9.0",
    "2026-01-01",
    "none: synthetic",
    "float32",
    "invented for tests/cudnn/test_gpu_rule.py",
    (
        _cell("A", "lstm", "float32", 1, UNI, 512, 512, 64, 100, {STANDARD: (0.4, 0.5), PERSIST_STATIC: (0.45, 0.55)}),
        _cell("B", "lstm", "float32", 2, UNI, 512, 512, 1, 100, {STANDARD: (1.6, None), PERSIST_STATIC: (1.3, None)}),
        _cell("D", "lstm", "float32", 4, BI, 1024, 512, 64, 200, {STANDARD: (0.7, 0.8), PERSIST_STATIC: (0.9, 1.1)}),
        _cell(
            "E", "gru", "float32", 1, UNI, 2048, 2048, 32, 750, {STANDARD: (0.98, 1.03), PERSIST_STATIC: (1.1, None)}
        ),
        _cell(
            "F",
            "lstm",
            "float32",
            1,
            UNI,
            128,
            64,
            32,
            1000,
            {STANDARD: (6.0, 3.0), PERSIST_STATIC: (2.0, 1.5), PERSIST_STATIC_SMALL_H: (0.3, 0.45)},
        ),
        _cell(
            "F",
            "lstm",
            "bfloat16",
            1,
            UNI,
            128,
            64,
            32,
            1000,
            {STANDARD: (3.0, 2.0), PERSIST_STATIC_SMALL_H: (0.5, 0.6)},
        ),
        _cell("G-b1", "lstm", "float32", 2, UNI, 512, 512, 1, 1, {STANDARD: (1.8, None), PERSIST_STATIC: (1.5, None)}),
        # Tiny networks the CPU runs quickly with cuDNN's kernels stood in for: the GRU's sides run different
        # algorithms, the LSTM's training step the xla implementation.
        _cell(
            "tiny",
            "gru",
            "float32",
            1,
            UNI,
            16,
            8,
            4,
            6,
            {STANDARD: (0.8, 1.2), PERSIST_STATIC: (0.5, 0.9), PERSIST_STATIC_SMALL_H: (0.6, 0.7)},
        ),
        _cell(
            "tiny",
            "lstm",
            "float32",
            1,
            UNI,
            16,
            8,
            4,
            6,
            {STANDARD: (0.9, 2.0), PERSIST_STATIC: (0.7, 1.8), PERSIST_STATIC_SMALL_H: (0.5, 1.5)},
        ),
    ),
)


@pytest.fixture
def synthetic(monkeypatch):
    """The synthetic table shipped for ``KIND``, a GPU of that kind: cuDNN available (its kernels stood in for, on
    every platform), every device's facts ``FACTS``."""
    monkeypatch.setattr(gpu_rule, "MEASUREMENTS", (*gpu_rule.MEASUREMENTS, SYNTHETIC))
    monkeypatch.setattr(algorithm, "device_info", lambda device=None: FACTS)
    with CudnnStandIn() as stand_in:
        yield stand_in


def _problem(cell, side, **changes):
    config = cell.network()
    fields = {"time": cell.time, "batch": cell.batch, "padded": False, "allow_tf32": False, **changes}
    overrides = {k: fields.pop(k) for k in list(fields) if k in ("num_units", "input_size", "num_layers", "dtype")}
    if overrides:
        config = jcr.RNNConfig(
            config.mode,
            overrides.get("num_layers", config.num_layers),
            overrides.get("num_units", config.num_units),
            overrides.get("input_size", config.input_size),
            direction=config.direction,
            dtype=overrides.get("dtype", config.dtype),
        )
    return algorithm.Problem(
        config, fields["time"], fields["batch"], fields["padded"], side == "training", fields["allow_tf32"]
    )


def _named(config, dtype="float32"):
    return next(c for c in SYNTHETIC.cells if c.config == config and c.dtype == dtype)


def test_the_shipped_table_reads_back_and_names_what_runs():
    """gpu_measurements.json loads, one entry per GPU kind, every cell a network cuDNN runs with its algorithms' ratios
    positive; an entry survives its JSON form unchanged (the synthetic one stands in while none is shipped)."""
    kinds = [entry.device_kind for entry in gpu_rule.MEASUREMENTS]
    assert len(kinds) == len(set(kinds))
    for entry in (*gpu_rule.MEASUREMENTS, SYNTHETIC):
        assert entry.device_kind and entry.date and entry.precision in ("float32", "tensorfloat32"), entry
        for cell in entry.cells:
            assert cell.mode in cudnn_backend.MODES and cell.dtype in ("float32", "bfloat16", "float16"), cell
            assert cell.ratios and set(cell.ratios) <= set(algorithm.ALGORITHMS), cell
            for sides in cell.ratios.values():
                assert len(sides) == 2 and any(r is not None for r in sides), cell
                assert all(r is None or 0 < r < 100 for r in sides), cell
        assert gpu_rule.measured_from(gpu_rule.as_json(entry)) == entry
    with pytest.raises(ValueError, match=r"a GPU measurement cell needs mode, .*, ratios; it has config"):
        gpu_rule.measured_from({"device_kind": KIND, "cells": [{"config": "A"}]})


def test_a_cell_speaks_for_its_shape_class_only():
    f = _named("F")
    near = _problem(f, "training", time=400, batch=64, num_units=96)  # each within 4x: F's class
    assert gpu_rule.distance(near, f) == pytest.approx(
        math.log(400 / 1000) ** 2 + math.log(64 / 32) ** 2 + math.log(96 / 128) ** 2
    )
    assert gpu_rule.distance(_problem(f, "training"), f) == 0
    # Outside by a factor above 4 in one dimension, another mode, dtype or direction, lengths (only the standard
    # algorithm), a hidden size past SMALL_H's training limit (other algorithms), or TF32 where it was strict float32.
    for outside in (
        _problem(f, "training", time=200),
        _problem(f, "training", batch=4),
        _problem(f, "training", dtype="bfloat16"),
        _problem(f, "training", padded=True),
        _problem(f, "training", num_units=160),
        _problem(f, "forward", allow_tf32=True),
    ):
        assert gpu_rule.distance(outside, f) is None, outside
    assert gpu_rule.distance(_problem(f, "forward", num_units=160), f) is not None  # SMALL_H's inference limit: 192
    # bfloat16 data is not affected by the float32 precision.
    assert (
        gpu_rule.distance(_problem(_named("F", "bfloat16"), "forward", allow_tf32=True), _named("F", "bfloat16")) == 0
    )
    gru = _problem(_named("E"), "forward")
    assert gpu_rule.distance(gru, f) is None and gpu_rule.distance(gru, _named("E")) == 0


def test_the_nearest_cell_decides_and_each_request_reads_its_algorithm():
    f = _named("F")
    forward = _problem(f, "forward", time=900)
    found = gpu_rule.estimate(forward, algorithm.MEASURED, FACTS, SYNTHETIC)
    assert found is not None and (found.algorithm, found.relative) == (PERSIST_STATIC_SMALL_H, 0.3)
    assert "config F's class" in found.source and "this machine's tuned table" in found.source
    assert gpu_rule.estimate(forward, algorithm.AUTOTUNE, FACTS, SYNTHETIC).relative == 0.3
    assert gpu_rule.estimate(forward, algorithm.HEURISTIC, FACTS, SYNTHETIC).algorithm == PERSIST_STATIC_SMALL_H
    assert gpu_rule.estimate(forward, STANDARD, FACTS, SYNTHETIC).relative == 6.0
    # A (1 layer, B=64, T=100) and B (2 layers, B=1) are both LSTMs of H=512; a call with B=8 lies 8x from A's batch
    # and 8x from B's: no class. With B=16 (4x from A's): A's class.
    a = _named("A")
    assert gpu_rule.estimate(_problem(a, "forward", batch=8), algorithm.MEASURED, FACTS, SYNTHETIC) is None
    assert gpu_rule.estimate(_problem(a, "forward", batch=16), algorithm.MEASURED, FACTS, SYNTHETIC).relative == 0.4
    # An inference-only cell says nothing of the training side.
    assert gpu_rule.estimate(_problem(_named("B"), "training"), algorithm.MEASURED, FACTS, SYNTHETIC) is None
    # Another GPU kind: nothing measured there.
    other = DeviceInfo(9, 0, 132, "NVIDIA H100 80GB HBM3")
    assert gpu_rule.estimate(forward, algorithm.MEASURED, other, SYNTHETIC) is None


def test_a_tuned_table_replaces_the_shipped_cells_of_what_it_measured(monkeypatch):
    monkeypatch.setattr(gpu_rule, "MEASUREMENTS", (SYNTHETIC,))
    retuned = gpu_rule.Measured(
        KIND,
        "9.0",
        "2026-02-02",
        "",
        "float32",
        "",
        (_cell("F", "lstm", "float32", 1, UNI, 128, 64, 32, 1000, {STANDARD: (0.9, 0.8)}),),
    )
    f = _problem(_named("F"), "forward")
    shipped = gpu_rule.estimate(f, algorithm.MEASURED, FACTS)
    assert shipped.relative == 0.3 and "shipped with this package (2026-01-01)" in shipped.source
    tuned_estimate = gpu_rule.estimate(f, algorithm.MEASURED, FACTS, retuned)
    assert (tuned_estimate.algorithm, tuned_estimate.relative) == (STANDARD, 0.9)
    assert "tuned table" in tuned_estimate.source
    # Other (mode, dtype) pairs keep the shipped cells.
    bf16 = _problem(_named("F", "bfloat16"), "forward")
    assert gpu_rule.estimate(bf16, algorithm.MEASURED, FACTS, retuned) == gpu_rule.estimate(
        bf16, algorithm.MEASURED, FACTS
    )


def _measured_time(cell, side, implementation, call):
    """What ``implementation`` (a single name the registry chose for ``side``) measured in ``cell``: 1 for the xla
    implementation, else the ratio of the algorithm cuDNN's plan runs for ``rnn(algorithm=None)``."""
    if implementation == registry.BASELINE:
        return 1.0
    problem = gpu_rule.measured_problem(call, side)
    chosen = algorithm.choose(algorithm.MEASURED, problem, None, FACTS, plan.measured)
    return cell.ratios[chosen][gpu_rule.SIDES.index(side)]


def _judge(entry, facts):
    """Per cell and side of ``entry`` measured there: (the registry's pick, its measured time over the fastest's)."""
    verdicts = {}
    for cell in entry.cells:
        call = Call(cell.network(), cell.time, cell.batch)
        choice = registry.decide("cuda", call)
        for side, picked in zip(gpu_rule.SIDES, (choice.forward, choice.training), strict=True):
            index = gpu_rule.SIDES.index(side)
            measured = [1.0, *(sides[index] for sides in cell.ratios.values() if sides[index] is not None)]
            if len(measured) == 1:
                continue  # nothing measured on this side
            got = _measured_time(cell, side, picked, call)
            verdicts[(cell.config, cell.mode, cell.dtype, side)] = (picked, got / min(measured))
    return verdicts


def test_the_registrys_picks_are_within_5_percent_of_the_fastest_in_every_synthetic_cell(synthetic):
    """For every cell of the synthetic table and each side measured there, the implementation the registry picks for
    the cell's own call (and, for cuDNN, the algorithm its plan runs) measured within ``registry.TIE`` of the fastest
    one measured there (the xla implementation counts 1)."""
    verdicts = _judge(SYNTHETIC, FACTS)
    assert len(verdicts) == 16
    assert all(ratio <= registry.TIE for _, ratio in verdicts.values()), verdicts
    assert verdicts[("F", "lstm", "float32", "forward")] == ("cudnn", 1.0)
    assert verdicts[("B", "lstm", "float32", "forward")] == ("xla", 1.0)  # cuDNN measured slower at one sequence
    assert verdicts[("G-b1", "lstm", "float32", "forward")] == ("xla", 1.0)
    # E: cuDNN's forward 2 % faster, its training step 3 % slower: one implementation on both sides, within the tie.
    e_forward, e_training = (verdicts[("E", "gru", "float32", side)] for side in gpu_rule.SIDES)
    assert e_forward[0] == e_training[0] == "xla" and e_forward[1] == pytest.approx(1 / 0.98)


@pytest.mark.parametrize("entry", gpu_rule.MEASUREMENTS, ids=lambda entry: entry.device_kind)
def test_the_registrys_picks_are_within_5_percent_of_the_fastest_in_every_shipped_cell(entry, monkeypatch):
    """The same judgement over each GPU kind's shipped measurements (none until a device measures them)."""
    facts = DeviceInfo(*map(int, entry.compute_capability.split(".")), 132, entry.device_kind)
    monkeypatch.setattr(algorithm, "device_info", lambda device=None: facts)
    with CudnnStandIn():
        verdicts = _judge(entry, facts)
    assert verdicts and all(ratio <= registry.TIE for _, ratio in verdicts.values()), verdicts


def test_where_nothing_covers_the_call_cudnn_runs_it_as_before(synthetic, monkeypatch):
    """No table for the GPU's kind, or a call outside every class (resets, dropout between layers, lengths, TF32): the
    cost is ``PREFERRED``, the platform's own library, and the heuristic's algorithm runs."""
    f = _named("F")
    call = Call(f.network(), f.time, f.batch)
    assert cudnn_backend.cost(call, registry.FORWARD, "").relative == 0.3
    config = jcr.RNNConfig("lstm", 2, 128, 64, dropout=0.5)
    for outside in (
        Call(f.network(), f.time, f.batch, resets=True),
        Call(f.network(), f.time, f.batch, seq_lengths=True),
        Call(f.network(), f.time, f.batch, precision="tensorfloat32"),
        Call(config, f.time, f.batch, is_training=True),
        Call(f.network()),
    ):
        assert cudnn_backend.cost(outside, registry.TRAINING, "") is registry.PREFERRED, outside
    assert registry.decide("cuda", Call(f.network(), f.time, f.batch, resets=True)).name == "cudnn"
    # An explicit algorithm is estimated by its own measurement: the standard algorithm at F, 6x the xla time.
    explicit = Call(f.network(), f.time, f.batch, cudnn=CudnnOptions(algorithm=STANDARD))
    assert cudnn_backend.cost(explicit, registry.FORWARD, "").relative == 6.0
    assert registry.decide("cuda", explicit).forward == "xla"
    monkeypatch.setattr(algorithm, "device_info", lambda device=None: DeviceInfo(9, 0, 132, "NVIDIA H100 80GB HBM3"))
    choice = registry.decide("cuda", call)
    assert (choice.name, choice.sources[0]) == ("cudnn", registry.PREFERRED.source)
    assert algorithm.choose(algorithm.MEASURED, gpu_rule.measured_problem(call, "forward"), None, FACTS, None) == (
        algorithm.heuristic(gpu_rule.measured_problem(call, "forward"), FACTS)
    )


@contextlib.contextmanager
def _without(name):
    """The registry without backend ``name`` (oneDNN's CPU estimates would otherwise compete with the stand-in cuDNN's
    on the CPU these calls run on)."""
    saved = registry._BACKENDS
    registry._BACKENDS = {k: v for k, v in saved.items() if k != name}
    try:
        yield
    finally:
        registry._BACKENDS = saved


def _inputs(cell):
    cfg = cell.network()
    rng = np.random.default_rng(0)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jnp.asarray(rng.normal(size=(cell.time, cell.batch, cell.input_size)), jnp.float32)
    h0 = jnp.zeros(cfg.state_shape(cell.batch))
    c0 = jnp.zeros(cfg.cell_shape(cell.batch)) if cfg.has_cell_state else None
    return cfg, params, x, h0, c0


def _algorithms(stand_in) -> dict[str, set[str]]:
    """The algorithms the stand-in's kernel calls ran: the inference forwards', and the training forwards' with their
    backward passes' (a call may be traced more than once)."""
    forwards = iter(stand_in.forwards)  # each forward's training flag, in call order
    found = {"inference": set(), "training": set()}
    for _, kind, algo in stand_in.calls:
        training = kind == "backward" or next(forwards)
        found["training" if training else "inference"].add(algo)
    return found


def test_the_default_runs_what_the_table_found_fastest_on_each_side(synthetic):
    """rnn(implementation=None) end to end (cuDNN's kernels stood in for): the tiny GRU's forward runs cuDNN's
    persist_static and its training step persist_static_small_h, as the table measured; the tiny LSTM's training step
    runs the xla implementation (no cuDNN kernel under jax.grad), its forward cuDNN's small-H kernel."""
    gru, lstm = (next(c for c in SYNTHETIC.cells if c.config == "tiny" and c.mode == m) for m in ("gru", "lstm"))
    with _without("onednn"):
        cfg, params, x, h0, c0 = _inputs(gru)
        assert jcr.implementation_for("cpu", Call(cfg, gru.time, gru.batch)) == "cudnn"
        jax.block_until_ready(jcr.rnn(params, x, h0, c0, cfg))
        jax.grad(lambda p: jnp.sum(jcr.rnn(p, x, h0, c0, cfg)[0]))(params)
        assert _algorithms(synthetic) == {"inference": {PERSIST_STATIC}, "training": {PERSIST_STATIC_SMALL_H}}
        synthetic.calls.clear()
        synthetic.forwards.clear()
        cfg, params, x, h0, c0 = _inputs(lstm)
        assert jcr.implementation_for("cpu", Call(cfg, lstm.time, lstm.batch)) == "cudnn+xla"
        want = jcr.rnn(params, x, h0, c0, cfg, implementation="xla")
        got = jcr.rnn(params, x, h0, c0, cfg)
        grads = jax.grad(lambda p: jnp.sum(jcr.rnn(p, x, h0, c0, cfg)[0]))(params)
        want_grads = jax.grad(lambda p: jnp.sum(jcr.rnn(p, x, h0, c0, cfg, implementation="xla")[0]))(params)
        assert _algorithms(synthetic) == {"inference": {PERSIST_STATIC_SMALL_H}, "training": set()}
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grads, want_grads, rtol=1e-5, atol=1e-6)


def test_a_tuned_table_of_this_gpu_decides_once_saved(synthetic, tmp_path, monkeypatch):
    """``tuned.save`` writes this GPU kind's table in the cache directory (atomically, keyed by the kind and the
    software); from then on the cost and the algorithm come from it, and another kind reads none."""
    monkeypatch.setattr(tuned_files, "cache_dir", lambda: tmp_path)
    tuned._read.cache_clear()
    try:
        f = _named("F")
        call = Call(f.network(), f.time, f.batch)
        retuned = gpu_rule.Measured(
            KIND,
            "9.0",
            "2026-03-03",
            "",
            "float32",
            "",
            (_cell("F", "lstm", "float32", 1, UNI, 128, 64, 32, 1000, {STANDARD: (0.9, 1.2)}),),
        )
        path = tuned.save(retuned)
        assert [p.name for p in tmp_path.iterdir()] == [path.name] and tuned.path_of(KIND) == path
        assert tuned.for_kind(KIND) == retuned and tuned.for_kind("NVIDIA H100 80GB HBM3") is None
        choice = registry.decide("cuda", call)
        assert (choice.forward, choice.training) == ("cudnn", "xla")
        assert "tuned table of the " + KIND in choice.sources[0]
        problem = gpu_rule.measured_problem(call, "forward")
        assert algorithm.choose(algorithm.MEASURED, problem, None, FACTS, plan.measured) == STANDARD
        path.write_text("{not json")
        tuned._read.cache_clear()
        with pytest.warns(RuntimeWarning, match="cannot be read"):
            assert tuned.for_kind(KIND) is None
    finally:
        tuned._read.cache_clear()
