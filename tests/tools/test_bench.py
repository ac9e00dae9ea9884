"""``jax-cudnn-rnn bench --quick`` through the CLI entry point: JSON records, ratios, PNG and Markdown outputs."""

import importlib.util
import json
import math

import pytest

from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.tools import bench, cli

HAS_TORCH = importlib.util.find_spec("torch") is not None
CPU_CONFIGS = {"cpu-lstm", "cpu-gru"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    paths = {"json": out / "bench.json", "plot": out / "bench.png", "markdown": out / "bench.md"}
    code = cli.main(["bench", "--quick", "--json", str(paths["json"]), "--plot", str(paths["plot"]),
                     "--markdown", str(paths["markdown"])])
    return code, paths


def test_quick_exits_zero(quick_run):
    code, _ = quick_run
    assert code == 0


def test_json_records(quick_run):
    _, paths = quick_run
    data = json.loads(paths["json"].read_text())
    assert data["machine"]["jax_backend"] and data["machine"]["cpu_count"] >= 1
    assert data["machine"]["versions"]["jax"]
    assert data["settings"]["quick"] and data["settings"]["repeats"] == bench.QUICK_TIMING.repeats
    assert data["settings"]["warmup_seconds"] == bench.QUICK_TIMING.warmup_seconds
    assert data["settings"]["precision"] == "float32"
    assert all(c["time"] <= 10 and c["hidden"] <= 32 for c in data["settings"]["configs"])
    expected = {"jcr-xla", "jcr-default", "flax"} | ({"torch"} if HAS_TORCH else set())
    if onednn.extension_loaded():
        expected.add("jcr-onednn")
    measured = {(r["config"], r["contender"], r["measurement"]) for r in data["records"]}
    for config in CPU_CONFIGS:
        for contender in expected:
            for measurement in bench.MEASUREMENTS:
                assert (config, contender, measurement) in measured
    for record in data["records"]:
        assert math.isfinite(record["ms"]) and record["ms"] > 0, record
        assert record["dtype"] == "float32"
    if HAS_TORCH:
        for record in data["records"]:
            assert record["ratio_to_torch"] is not None and record["ratio_to_torch"] > 0
            if record["contender"] == "torch":
                assert record["ratio_to_torch"] == 1.0
    assert not data["errors"]


def test_unavailable_contenders_are_skipped_with_reasons(quick_run):
    _, paths = quick_run
    data = json.loads(paths["json"].read_text())
    if data["machine"]["jax_backend"] != "gpu":
        skipped = {s["contender"]: s["reason"] for s in data["skipped"]}
        assert skipped["jcr-cudnn"] in ("implementation='cudnn' needs the arrays on a CUDA device, but this call runs on "
                                        "CPU", f"implementation='cudnn' needs the cuDNN extension, which is not loaded: "
                                               f"{bench.jcr.extension_error()}")
    assert all(s["reason"] for s in data["skipped"])


def test_plot_and_markdown(quick_run):
    _, paths = quick_run
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = paths["markdown"].read_text().splitlines()
    header = lines.index("| " + " | ".join(bench.TABLE_COLUMNS) + " |")
    assert set(lines[header + 1].replace("|", "").split()) == {"---"}
    assert any(line.startswith("| cpu-lstm | float32 | jcr-xla |") for line in lines)


def test_unknown_config_is_an_error_naming_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "--configs", "cpu-lstm,nope"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "'nope'" in err
    assert all(name in err for name in ("cpu-lstm", "cpu-gru", "A", "F"))


@pytest.mark.parametrize("option, value, message", [
    ("--warmup-seconds", "-0.5", "must be >= 0.0, got -0.5"),
    ("--warmup-seconds", "nan", "must be >= 0.0, got nan"),
    ("--warmup-seconds", "soon", "'soon' is not a number"),
    ("--repeats", "0", "must be >= 1, got 0"),
    ("--warmup", "1.5", "'1.5' is not an integer"),
])
def test_bad_timing_options_are_errors_naming_the_option(capsys, option, value, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", option, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert option in err and message in err


def test_ratios():
    records = [{"config": "c", "dtype": "float32", "contender": name, "measurement": "fwd", "ms": ms}
               for name, ms in (("torch", 2.0), ("flax", 4.0), ("jcr-xla", 1.0))]
    records.append({"config": "c", "dtype": "bfloat16", "contender": "jcr-xla", "measurement": "fwd", "ms": 1.0})
    bench.add_ratios(records)
    assert [r["ratio_to_torch"] for r in records] == [1.0, 2.0, 0.5, None]
    assert [r["ratio_to_flax"] for r in records] == [0.5, 1.0, 0.25, None]


def test_op_bytes(quick_run):
    """What a step needs beyond its inputs: XLA's analysis for the JAX contenders (known on the CPU too), PyTorch's
    allocator peak over its allocation at reset on CUDA only."""
    _, paths = quick_run
    data = json.loads(paths["json"].read_text())
    for record in data["records"]:
        if record["contender"] in ("jcr-xla", "flax"):
            assert 0 < record["op_bytes"] < record["compiled_bytes"], record  # the arguments are not counted
        if record["contender"] == "torch" and data["machine"]["torch_cuda_device"] is None:
            assert record["op_bytes"] is None


def test_measure_counts_the_peak_above_the_allocation_at_reset():
    state = {"allocated": 100, "peak": 100}

    def step():
        state["peak"] = max(state["peak"], state["allocated"] + 250)

    runner = bench.Runner(forward=step, train=None, reset_peak=lambda: state.update(peak=state["allocated"]),
                          peak_bytes=lambda: state["peak"], allocated_bytes=lambda: state["allocated"])
    measured = bench._measure(runner, bench.FWD, bench.Timing(repeats=2, warmup=1))
    assert measured["op_bytes"] == 250 and measured["peak_bytes"] == 350 and measured["ms"] >= 0
    analysed = bench._measure(bench.Runner(forward=step, train=None, op_bytes={bench.FWD: 7}), bench.FWD,
                              bench.Timing(1, 0))
    assert analysed["op_bytes"] == 7  # no allocator to ask: the analysis' figure


def test_cudnn_workspace_is_unknown_rather_than_wrong_without_a_gpu(monkeypatch):
    from jax_cudnn_rnn.backends.cudnn import plan

    bc = bench.CONFIGS["F"]
    cfg = bc.rnn_config("float32")

    def no_gpu(problem, algo):
        raise RuntimeError("temp_space_sizes needs a CUDA GPU")

    monkeypatch.setattr(plan, "temp_space_sizes", no_gpu)
    assert bench._cudnn_workspace(bc, cfg, training=True) is None
    asked = []
    monkeypatch.setattr(plan, "temp_space_sizes", lambda problem, algo: asked.append((problem, algo)) or (4096, 0))
    assert bench._cudnn_workspace(bc, cfg, training=False) == 4096
    problem, algo = asked[0]
    assert (problem.max_time, problem.batch, problem.training, problem.allow_tf32) == (bc.time, bc.batch, False, False)


def _widest_rows():
    """Rows with the longest names and numbers the table can hold."""
    return [["cpu-lstm", "bfloat16", "jax-exp-rnn", "12345.67", "435", "0.01", "12345.67", "12.3", "0.42", "12345"]]


def test_table_fits_100_columns_and_every_column_has_a_legend_line():
    from rich.console import Console

    console = Console(width=200, record=True)
    bench.print_table(console, _widest_rows(), "title")
    lines = console.export_text().splitlines()
    header = next(line for line in lines if line.startswith("config"))
    table = lines[lines.index(header) - 1:lines.index(header) + 3]  # title, header, rule, row
    assert max(len(line.rstrip()) for line in table) <= 100
    assert "12345.67" in "\n".join(lines) and "…" not in "\n".join(lines)  # nothing cut
    legend = " ".join(bench.LEGEND)
    for column in bench.TABLE_COLUMNS:
        assert f"{column}:" in legend or f"{column}," in legend, column


@pytest.mark.parametrize("value, text", [(0.4213, "0.42"), (1.0, "1.00"), (12.34, "12.3"), (435.2, "435"),
                                         (0.000359, "0.00"), (None, "-")])
def test_ratios_never_in_scientific_notation(value, text):
    assert bench._ratio(value) == text


def test_timing_header_reads_as_a_sentence():
    assert bench.describe_timing(bench.Timing(repeats=20, warmup=3, warmup_seconds=0.25)) == (
        "median of 20 timed runs, after 3 warm-up runs lasting at least 0.25 s")
    assert bench.describe_timing(bench.Timing(repeats=3, warmup=1)) == "median of 3 timed runs, after 1 warm-up run"


def test_skip_reasons_are_plain_sentences():
    if bench._on_gpu():
        pytest.skip("checks the CPU skip reasons")
    assert bench._jax_exp_unavailable() == "jax.experimental.rnn runs only on a GPU, and JAX's backend here is 'cpu'"
    assert bench._implementation_unavailable("cudnn")() in (
        "implementation='cudnn' needs the arrays on a CUDA device, but this call runs on CPU",
        f"implementation='cudnn' needs the cuDNN extension, which is not loaded: {bench.jcr.extension_error()}")


def test_plot_panel_is_linear_from_zero_with_the_line_at_one_and_values_on_bars():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [{"config": "A", "dtype": "float32", "contender": "jcr-xla", "measurement": bench.FWD,
                "ratio_to_torch": 0.65},
               {"config": "A", "dtype": "float32", "contender": "flax", "measurement": bench.FWD,
                "ratio_to_torch": 1.05}]
    fig, ax = plt.subplots()
    bench._plot_panel(ax, records, bench.FWD)
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0 and ax.get_ylim()[1] > 1.05
    assert [line.get_ydata()[0] for line in ax.get_lines()] == [1.0]
    assert sorted(t.get_text() for t in ax.texts) == ["0.65", "1.05"]
    plt.close(fig)
