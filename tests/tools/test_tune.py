"""``jax-cudnn-rnn tune`` and the tuned table it writes (jax_cudnn_rnn/tools/tune.py, backends/onednn/tuned.py): one
file per machine and software in the user's cache directory, written atomically, read instead of the shipped
measurements for what it measured, and ignored (with a warning where unreadable) otherwise."""

import json
import warnings

import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.onednn import cpu_rule, tuned
from jax_cudnn_rnn.tools import cli


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory for tuned tables (tests/conftest.py points the tests at an empty one already)."""
    monkeypatch.setattr(tuned, "cache_dir", lambda: tmp_path)
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
