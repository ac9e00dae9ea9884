"""``jax-cudnn-rnn tune`` and the tuned table it writes (jax_cudnn_rnn/tools/tune.py, backends/onednn/tuned.py): one
file per machine and software in the user's cache directory, written atomically, read instead of the shipped
measurements for what it measured, and ignored (with a warning where unreadable) otherwise."""

import json
import warnings

import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.backends import registry, tuned_files
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.onednn import cpu_rule, tuned
from jax_cudnn_rnn.tools import cli


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory for tuned tables (tests/conftest.py points the tests at an empty one already)."""
    monkeypatch.setattr(tuned_files, "cache_dir", lambda: tmp_path)
    tuned.this_machine.cache_clear()
    yield tmp_path
    tuned.this_machine.cache_clear()


def _table(*cells) -> cpu_rule.Measured:
    return cpu_rule.Measured("this CPU", "avx512_core_bf16", 2, None, None, "2026-11-27", "", "", cells)


# A GRU float32 table for this machine, oneDNN 2x slower than xla undifferentiated, 2x faster in training.
GRU = cpu_rule.Cell("gru", "float32", 64, 8, 100, {"onednn": (2.0, 0.5)})


def test_a_saved_table_is_this_machines_until_the_machine_or_software_changes(cache, monkeypatch):
    path = tuned.save(_table(GRU))
    assert path.parent == cache and [p.name for p in cache.iterdir()] == [path.name]  # no temporary file left
    stored = json.loads(path.read_text())
    assert stored["machine"] == tuned.machine_key() and stored["measured"]["cells"][0][:5] == list(GRU[:5])
    assert tuned.this_machine().cells == (GRU,)
    # Another jax (or CPU, or oneDNN): another file, which does not exist; this one is not read.
    key = tuned.machine_key()
    monkeypatch.setattr(tuned, "machine_key", lambda: {**key, "jax": "0.0.1"})
    tuned.this_machine.cache_clear()
    assert tuned.this_machine() is None
    # A file whose key disagrees with its name's (copied from another machine) is ignored too.
    path_for_other = tuned.path_for(tuned.machine_key())
    path_for_other.write_text(json.dumps({**stored, "machine": key}))
    tuned.this_machine.cache_clear()
    assert tuned.this_machine() is None


def test_an_unreadable_table_warns_and_the_rule_decides(cache):
    tuned.path_for(tuned.machine_key()).write_text("{not json")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert tuned.this_machine() is None
    assert any("cannot be read" in str(w.message) and "jax-cudnn-rnn tune" in str(w.message) for w in record)


def test_the_rule_prefers_the_tuned_table_for_what_it_measured():
    """A tuned table's cells replace the shipped measurements for the (mode, dtype) it measured; the rest comes from
    the shipped ones, as without it."""
    table = _table(GRU)
    cfg = jcr.RNNConfig("gru", 1, 64, 64)
    assert cpu_rule.estimate(cfg, 8, "forward", "onednn", isa="avx512_core_bf16", tuned=table) == pytest.approx(
        (2.0, "this machine's tuned table (2026-11-27)")
    )
    # Not measured there: no estimate, though the shipped measurements have the variant for the LSTM.
    assert cpu_rule.estimate(cfg, 8, "training", "onednn:plain", isa="avx512_core_bf16", tuned=table) is None
    lstm = jcr.RNNConfig("lstm", 1, 64, 64)
    shipped = cpu_rule.estimate(lstm, 8, "forward", "onednn", isa="avx512_core_bf16")
    assert cpu_rule.estimate(lstm, 8, "forward", "onednn", isa="avx512_core_bf16", tuned=table) == shipped
    assert "the rule fitted to the shipped measurements" in shipped[1]
    # Another table (a new tune, another machine's in a test) is read anew, not the curves built for the last one.
    retuned = _table(cpu_rule.Cell("gru", "float32", 64, 8, 100, {"onednn": (0.25, 0.5)}))
    for each, ratio in ((retuned, 0.25), (table, 2.0)):
        found = cpu_rule.estimate(cfg, 8, "forward", "onednn", isa="avx512_core_bf16", tuned=each)
        assert found[0] == pytest.approx(ratio)


def test_the_default_follows_this_machines_table(cache):
    """Once tuned, rnn(implementation=None) chooses from this machine's table, and says so."""
    if not onednn.extension_loaded():
        pytest.skip(f"oneDNN not loaded: {onednn.extension_error()}")
    call = Call(jcr.RNNConfig("gru", 1, 64, 64), 100, 8)
    assert onednn.tuned_table() is None
    tuned.save(_table(GRU))
    assert onednn.tuned_table() == str(tuned.path_for(tuned.machine_key()))
    choice = registry.decide("cpu", call)
    assert (choice.forward, choice.training, choice.name) == ("xla", "onednn", "xla+onednn")
    assert choice.sources[1] == "this machine's tuned table (2026-11-27)"
    assert jcr.implementation_for("cpu", call) == "xla+onednn"


def test_tune_measures_every_implementation_in_processes_of_their_own(cache, tmp_path, capsys):
    """The command times the xla implementation and each of oneDNN's runs per shape (--quick: two), writes the cells
    as the shipped measurements' form, and stores them as this machine's table."""
    if not onednn.extension_loaded():
        pytest.skip(f"oneDNN not loaded: {onednn.extension_error()}")
    out = tmp_path / "tuned.json"
    argv = ["tune", "--quick", "--modes", "gru", "--dtypes", "float32", "--repeats", "1", "--json", str(out)]
    assert cli.main(argv) == 0
    entry = json.loads(out.read_text())
    assert entry["isa"] == onednn.effective_cpu_isa() and entry["cores"] >= 1
    measured = cpu_rule.measured_from(entry)
    assert [cell[:5] for cell in measured.cells] == [("gru", "float32", 64, 8, 100), ("gru", "float32", 256, 32, 100)]
    for cell in measured.cells:
        # Every variant the registry lists: "onednn:plain" on the training side alone, "onednn:gemm" on both.
        assert set(cell.ratios) == {"onednn", "onednn:plain", "onednn:gemm"}
        assert all(r > 0 for r in cell.ratios["onednn"]) and cell.ratios["onednn:plain"][0] is None
        assert all(r > 0 for r in cell.ratios["onednn:gemm"])
    assert tuned.this_machine().cells == measured.cells
    assert "written" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ the GPU's tune

KIND = "NVIDIA H200 (stand-in: cuDNN's kernels are the CPU's reference implementation here)"


@pytest.fixture
def gpu_cache(tmp_path, monkeypatch):
    """An empty cache directory for the GPU's tuned tables, and a GPU of kind ``KIND`` to tune."""
    from jax_cudnn_rnn.backends.cudnn import tuned as gpu_tuned
    from jax_cudnn_rnn.tools import tune_gpu

    monkeypatch.setattr(tuned_files, "cache_dir", lambda: tmp_path / "gpu-cache")
    monkeypatch.setattr(tune_gpu, "device_facts", lambda: (KIND, "9.0"))
    gpu_tuned._read.cache_clear()
    yield gpu_tuned
    gpu_tuned._read.cache_clear()


def test_the_gpu_tune_times_each_algorithm_and_the_default_decides_from_it(
    cudnn_stand_in, gpu_cache, tmp_path, monkeypatch
):
    """``tune --platform gpu`` (its measurements in this process, cuDNN's kernels stood in for): per config and dtype
    the xla implementation and every algorithm cuDNN may run, each reaching cuDNN's kernels as asked; the cells in the
    shipped table's form, saved as this GPU kind's table, which the registry's choice then rests on. What the stand-in
    times says nothing of a GPU."""
    from jax_cudnn_rnn.backends.cudnn import algorithm, gpu_rule
    from jax_cudnn_rnn.tools import tune_gpu

    out = tmp_path / "gpu.json"
    argv = ["tune", "--platform", "gpu", "--quick", "--same-process", "--dtypes", "float32", "--repeats", "1"]
    assert cli.main([*argv, "--gpu-json", str(out)]) == 0
    measured = gpu_rule.measured_from(json.loads(out.read_text()))
    assert (
        measured.device_kind == KIND and measured.precision == "float32" and "0 measurements left out" in measured.how
    )
    assert [(cell.config, cell.dtype) for cell in measured.cells] == [("B", "float32"), ("F", "float32")]
    b, f = measured.cells
    assert (b.time, b.batch, b.num_layers, f.time, f.hidden) == (10, 1, 2, 10, 32)  # the quick (shrunk) problems
    for cell in measured.cells:
        assert (
            set(cell.ratios)
            == set(algorithm.ALGORITHMS)
            == set(tune_gpu.algorithms_for(tune_gpu.select(cell.config, True)[0], "float32"))
        )
        assert cell.xla_ms[0] > 0 and all(sides[0] > 0 for sides in cell.ratios.values())
    assert b.xla_ms[1] is None and all(sides[1] is None for sides in b.ratios.values())  # B: inference only
    assert f.xla_ms[1] > 0 and all(sides[1] > 0 for sides in f.ratios.values())
    assert {algo for _, _, algo in cudnn_stand_in.calls} == set(algorithm.ALGORITHMS)
    assert gpu_cache.for_kind(KIND) == measured
    # The default on a GPU of that kind decides from it: per side the lowest of the xla implementation (1) and the
    # fastest algorithm measured, as the registry picks.
    monkeypatch.setattr(algorithm, "device_info", lambda device=None: algorithm.DeviceInfo(9, 0, 132, KIND))
    call = Call(f.network(), f.time, f.batch)
    fastest = {side: min(sides[i] for sides in f.ratios.values()) for i, side in enumerate(registry.SIDES)}
    want = registry.pick({side: {"xla": registry.UNIT, "cudnn": registry.Cost(r, "")} for side, r in fastest.items()})
    choice = registry.decide("cuda", call)
    assert (choice.forward, choice.training) == want
    for side, picked, source in zip(registry.SIDES, (choice.forward, choice.training), choice.sources, strict=True):
        if picked == "cudnn":
            assert f"this machine's tuned table of the {KIND}" in source and f"{fastest[side]:.2f}x" in source


def test_the_gpu_tune_stops_at_its_budget(cudnn_stand_in):
    """No measurement starts once the budget is spent; the cells are what ran, and the log says how many did not."""
    from jax_cudnn_rnn.tools import tune_gpu
    from jax_cudnn_rnn.tools.bench import measure

    logged = []
    cells, left_out = tune_gpu.measure_cells(
        tune_gpu.select("F", True),
        ["float32"],
        timing=measure.Timing(1, 0),
        rounds=2,
        budget_seconds=0.0,
        isolated=False,
        progress=lambda text: None,
        log=lambda kind, text: logged.append((kind, text)),
    )
    assert (cells, left_out) == ([], 8) and cudnn_stand_in.calls == []
    assert logged == [("skip", "the budget of 0 s is spent: 8 measurements not run")]


def test_the_gpu_tune_times_what_cudnn_may_run_on_each_bench_problem():
    """At the bench's sizes: SMALL_H only where the hidden size allows it on every side measured (config F's 128 for
    the training step; B, inference only, 512: too large), PERSIST_STATIC everywhere without lengths."""
    from jax_cudnn_rnn.backends.cudnn.algorithm import PERSIST_STATIC, PERSIST_STATIC_SMALL_H, STANDARD
    from jax_cudnn_rnn.tools import tune_gpu

    got = {bc.name: tune_gpu.algorithms_for(bc, "bfloat16") for bc in tune_gpu.select(None, False)}
    assert got == {
        **dict.fromkeys(("A", "B", "C", "D", "E", "G-b1", "G-b64"), (STANDARD, PERSIST_STATIC)),
        "F": (STANDARD, PERSIST_STATIC, PERSIST_STATIC_SMALL_H),
    }
    with pytest.raises(SystemExit, match="unknown GPU config 'Z'; known: A, B, C"):
        tune_gpu.select("A,Z", False)


def test_tune_names_what_a_platform_lacks(capsys):
    """Asked for the GPU on a machine where cuDNN cannot run, the command says why and writes nothing."""
    from jax_cudnn_rnn.tools import tune_gpu

    if tune_gpu.unavailable() is None:
        pytest.skip("cuDNN runs here")
    assert cli.main(["tune", "--platform", "gpu"]) == 1
    assert "nothing to tune on the gpu: cuDNN cannot run here: it needs" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="unknown platform 'tpu'"):
        cli.main(["tune", "--platform", "tpu"])
