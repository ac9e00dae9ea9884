"""``jax-cudnn-rnn bench --quick`` through the CLI entry point: each contender in a worker process of its own, JSON
records with the machine's and each process's facts, ratios, the roofline, the neighbour ratio, PNG and Markdown
outputs; and ``--same-process``."""

import dataclasses
import importlib.util
import json
import math

import jax
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.tools import bench, cli
from jax_cudnn_rnn.tools.bench import contenders, measure, report

HAS_TORCH = importlib.util.find_spec("torch") is not None
CPU_CONFIGS = {"cpu-lstm", "cpu-gru"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    paths = {"json": out / "bench.json", "plot": out / "bench.png", "markdown": out / "bench.md"}
    code = cli.main(
        [
            "bench",
            "--quick",
            "--json",
            str(paths["json"]),
            "--plot",
            str(paths["plot"]),
            "--markdown",
            str(paths["markdown"]),
        ]
    )
    return code, paths


def test_quick_exits_zero(quick_run):
    code, _ = quick_run
    assert code == 0


def test_json_records(quick_run):
    _, paths = quick_run
    data = json.loads(paths["json"].read_text())
    machine = data["machine"]
    assert machine["jax_backend"] and machine["cpu_count"] >= 1
    assert machine["versions"]["jax"] and machine["processor"] and len(machine["loadavg_start"]) == 3
    assert machine["isolation"] == data["settings"]["isolation"] == "process per contender"
    assert machine["onednn_cpu_runtime"] == onednn.cpu_runtime()
    assert data["settings"]["quick"] and data["settings"]["repeats"] == bench.QUICK_TIMING.repeats
    assert data["settings"]["warmup_seconds"] == bench.QUICK_TIMING.warmup_seconds
    assert data["settings"]["precision"] == "float32"
    assert all(c["time"] <= 10 and c["hidden"] <= 32 for c in data["settings"]["configs"])
    expected = {"jcr-xla", "jcr-default", "jcr-flax", "flax"} | ({"torch"} if HAS_TORCH else set())
    if onednn.extension_loaded():
        expected.add("jcr-onednn")
    measured = {(r["config"], r["contender"], r["measurement"]) for r in data["records"]}
    for config in CPU_CONFIGS:
        for contender in expected:
            for measurement in contenders.MEASUREMENTS:
                assert (config, contender, measurement) in measured
    for record in data["records"]:
        assert math.isfinite(record["ms"]) and record["ms"] > 0, record
        assert record["dtype"] == "float32"
        assert record["loadavg_1min"] is not None
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
        assert skipped["jcr-cudnn"] in (
            "implementation='cudnn' needs the arrays on a CUDA device, but this call runs on CPU",
            f"implementation='cudnn' needs the cuDNN extension, which is not loaded: {jcr.extension_error()}",
        )
    assert all(s["reason"] for s in data["skipped"])


def test_plot_and_markdown(quick_run):
    _, paths = quick_run
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = paths["markdown"].read_text().splitlines()
    header = lines.index("| " + " | ".join(report.TABLE_COLUMNS) + " |")
    assert set(lines[header + 1].replace("|", "").split()) == {"---"}
    assert any(line.startswith("| cpu-lstm | float32 | jcr-xla |") for line in lines)


def test_unknown_config_is_an_error_naming_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "--configs", "cpu-lstm,nope"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "'nope'" in err
    assert all(name in err for name in ("cpu-lstm", "cpu-gru", "A", "F"))


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--warmup-seconds", "-0.5", "must be >= 0.0, got -0.5"),
        ("--warmup-seconds", "nan", "must be >= 0.0, got nan"),
        ("--warmup-seconds", "soon", "'soon' is not a number"),
        ("--repeats", "0", "must be >= 1, got 0"),
        ("--warmup", "1.5", "'1.5' is not an integer"),
    ],
)
def test_bad_timing_options_are_errors_naming_the_option(capsys, option, value, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", option, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert option in err and message in err


def test_ratios():
    records = [
        {"config": "c", "dtype": "float32", "contender": name, "measurement": "fwd", "ms": ms}
        for name, ms in (("torch", 2.0), ("flax", 4.0), ("jcr-xla", 1.0))
    ]
    records.append({"config": "c", "dtype": "bfloat16", "contender": "jcr-xla", "measurement": "fwd", "ms": 1.0})
    measure.add_ratios(records)
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
        if record["contender"] == "torch" and not record["process"].get("torch_cuda_device"):
            assert record["op_bytes"] is None


def test_measure_counts_the_peak_above_the_allocation_at_reset():
    state = {"allocated": 100, "peak": 100}

    def step():
        state["peak"] = max(state["peak"], state["allocated"] + 250)

    runner = contenders.Runner(
        forward=step,
        train=None,
        reset_peak=lambda: state.update(peak=state["allocated"]),
        peak_bytes=lambda: state["peak"],
        allocated_bytes=lambda: state["allocated"],
    )
    measured = measure.measure(runner, contenders.FWD, measure.Timing(repeats=2, warmup=1))
    assert measured["op_bytes"] == 250 and measured["peak_bytes"] == 350 and measured["ms"] >= 0
    analysed = measure.measure(
        contenders.Runner(forward=step, train=None, op_bytes={contenders.FWD: 7}), contenders.FWD, measure.Timing(1, 0)
    )
    assert analysed["op_bytes"] == 7  # no allocator to ask: the analysis' figure


def test_cudnn_workspace_is_unknown_rather_than_wrong_without_a_gpu(monkeypatch):
    """The bench's memory column asks the registry what a run takes outside XLA's buffers: cuDNN's workspace, None
    where cuDNN cannot be asked (no GPU), never a wrong number."""
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.backends.call import Call
    from jax_cudnn_rnn.backends.cudnn import plan

    bc = bench.CONFIGS["F"]
    call = Call(bc.rnn_config("float32"), bc.time, bc.batch)

    def no_gpu(problem, algo):
        raise RuntimeError("temp_space_sizes needs a CUDA GPU")

    monkeypatch.setattr(plan, "temp_space_sizes", no_gpu)
    assert registry.scratch_bytes("cudnn", call, registry.TRAINING) is None
    asked = []
    monkeypatch.setattr(plan, "temp_space_sizes", lambda problem, algo: asked.append((problem, algo)) or (4096, 0))
    assert registry.scratch_bytes("cudnn", call, registry.FORWARD) == 4096
    assert registry.scratch_bytes("xla", call, registry.FORWARD) == 0  # nothing outside XLA's buffers
    problem, _ = asked[0]
    assert (problem.max_time, problem.batch, problem.training, problem.allow_tf32) == (bc.time, bc.batch, False, False)


def _widest_rows():
    """Rows with the longest names and numbers the table can hold."""
    return [["cpu-lstm", "bfloat16", "jax-exp-rnn", "12345.67", "435", "0.01", "12345.67", "12.3", "0.42", "12345"]]


def test_table_fits_100_columns_and_every_column_has_a_legend_line():
    from rich.console import Console

    console = Console(width=200, record=True)
    report.print_table(console, _widest_rows(), "title")
    lines = console.export_text().splitlines()
    header = next(line for line in lines if line.startswith("config"))
    table = lines[lines.index(header) - 1 : lines.index(header) + 3]  # title, header, rule, row
    assert max(len(line.rstrip()) for line in table) <= 100
    assert "12345.67" in "\n".join(lines) and "…" not in "\n".join(lines)  # nothing cut
    legend = " ".join(report.LEGEND)
    for column in report.TABLE_COLUMNS:
        assert f"{column}:" in legend or f"{column}," in legend, column


@pytest.mark.parametrize(
    "value, text", [(0.4213, "0.42"), (1.0, "1.00"), (12.34, "12.3"), (435.2, "435"), (0.000359, "0.00"), (None, "-")]
)
def test_ratios_never_in_scientific_notation(value, text):
    assert report.ratio_text(value) == text


def test_timing_header_reads_as_a_sentence():
    assert measure.describe_timing(measure.Timing(repeats=20, warmup=3, warmup_seconds=0.25)) == (
        "median of 20 timed runs, after 3 warm-up runs lasting at least 0.25 s"
    )
    assert measure.describe_timing(measure.Timing(repeats=3, warmup=1)) == "median of 3 timed runs, after 1 warm-up run"


def test_skip_reasons_are_plain_sentences():
    if contenders.on_gpu():
        pytest.skip("checks the CPU skip reasons")
    assert contenders.jax_exp_unavailable() == (
        "jax.experimental.rnn runs only on a GPU, and JAX's backend here is 'cpu'"
    )
    assert contenders.implementation_unavailable("cudnn")() in (
        "implementation='cudnn' needs the arrays on a CUDA device, but this call runs on CPU",
        f"implementation='cudnn' needs the cuDNN extension, which is not loaded: {jcr.extension_error()}",
    )


def test_plot_panel_is_linear_from_zero_with_the_line_at_one_and_values_on_bars():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [
        {
            "config": "A",
            "dtype": "float32",
            "contender": "jcr-xla",
            "measurement": contenders.FWD,
            "ratio_to_torch": 0.65,
        },
        {"config": "A", "dtype": "float32", "contender": "flax", "measurement": contenders.FWD, "ratio_to_torch": 1.05},
    ]
    fig, ax = plt.subplots()
    report.plot_panel(ax, records, contenders.FWD)
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0 and ax.get_ylim()[1] > 1.05
    assert [line.get_ydata()[0] for line in ax.get_lines()] == [1.0]
    assert sorted(t.get_text() for t in ax.texts) == ["0.65", "1.05"]
    plt.close(fig)


def test_each_contender_ran_in_a_process_of_its_own(quick_run):
    """A fresh worker per (config, dtype, contender): PyTorch's and Flax's never imported this package."""
    _, paths = quick_run
    data = json.loads(paths["json"].read_text())
    pids = {}
    for record in data["records"]:
        process = record["process"]
        pids.setdefault((record["config"], record["dtype"], record["contender"]), set()).add(process["pid"])
        assert process["package_imported"] == record["contender"].startswith("jcr-"), record
        assert process["threads"] >= 1
        if record["contender"] == "torch":
            assert process["torch_num_threads"] >= 1
    assert all(len(p) == 1 for p in pids.values())  # both measurements of a contender in one process
    all_pids = [next(iter(p)) for p in pids.values()]
    assert len(set(all_pids)) == len(all_pids)
    default = [r for r in data["records"] if r["contender"] == "jcr-default"]
    # What the default ran, on each side: names of the CPU's implementations ("onednn+xla": oneDNN undifferentiated).
    cpu_names = {"xla", "onednn", "onednn:plain"}
    assert default and all(set(r["implementation"].split("+")) <= cpu_names for r in default)


def test_workers_run_under_pythonsafepath(monkeypatch):
    """A worker inherits PYTHONSAFEPATH=1 (Python then leaves the script's folder off sys.path): it still finds
    contenders.py beside it (the GPU runbook's bench ran no contender at all before this)."""
    monkeypatch.setenv("PYTHONSAFEPATH", "1")
    bc = dataclasses.replace(contenders.CPU_CONFIGS[0], hidden=4, input_size=4, batch=2, time=3)
    job = measure._contender_job(contenders.contender("jcr-xla"), bc, "float32", measure.QUICK_TIMING, "float32")
    outcome = measure._in_worker(job)
    assert "error" not in outcome, outcome
    assert outcome["process"]["package_imported"] is True


@pytest.mark.skipif(not HAS_TORCH, reason="the neighbour ratio times PyTorch")
def test_neighbour_ratio_is_recorded(quick_run):
    """PyTorch's forward alone and after this package ran every implementation that runs here, each in fresh
    processes; only its recording is checked here (the 1.15 target needs full sizes and a quiet machine)."""
    _, paths = quick_run
    data = json.loads(paths["json"].read_text())
    (neighbour,) = data["neighbour"]
    assert neighbour["config"] == "cpu-lstm" and neighbour["dtype"] == "float32"
    assert {"default", "xla", "reference"} <= set(neighbour["package_ran"])
    if onednn.extension_loaded():
        assert "onednn" in neighbour["package_ran"]
    ratio = neighbour["ratio"]
    alone, after = neighbour["torch_fwd_ms_alone"], neighbour["torch_fwd_ms_after_package"]
    assert ratio == pytest.approx(sorted(after)[len(after) // 2] / sorted(alone)[len(alone) // 2])
    assert any(line.startswith("* neighbour cpu-lstm float32") for line in paths["markdown"].read_text().splitlines())


def test_roofline_fractions(quick_run):
    """Each record's GEMM flops over its time, as a fraction of the machine's GEMM peak: the fastest square product
    measured in the run, oneDNN's matmul among the candidates where the extension is loaded, recorded with what
    reached it and named in the Markdown beside the CPU."""
    _, paths = quick_run
    data = json.loads(paths["json"].read_text())
    peak = data["machine"]["gemm_gflops"]["float32"]
    assert peak > 0
    reached = data["machine"]["gemm_peak"]["float32"]
    assert reached["gflops"] == peak and reached["size"] == bench.QUICK_GEMM_SIZES[0]
    assert reached["framework"] in (["onednn-matmul"] if onednn.extension_loaded() else []) + ["jax", "torch"]
    markdown = paths["markdown"].read_text()
    assert f"Roofline: the GEMM peak on {data['machine']['processor']}" in markdown
    assert f"float32 {peak:.0f} GFLOP/s ({reached['framework']} [{reached['size']}]^3)" in markdown
    bc = bench.CONFIGS["cpu-lstm"].shrunk()
    for record in data["records"]:
        if record["config"] == "cpu-lstm":
            # T=10 B=4 I=H=32 LSTM: 2 * 10 * 4 * 128 * 64 flops forward, three times that in training
            expected = 2 * 10 * 4 * 128 * 64 * (1 if record["measurement"] == contenders.FWD else 3)
            assert record["gflop"] * 1e9 == pytest.approx(expected) == bc.gemm_flops(record["measurement"])
            rate = record["gflop"] / (record["ms"] / 1e3)
            assert record["roofline_fraction"] == pytest.approx(rate / peak)


def test_gemm_peak_is_the_fastest_product_of_any_framework_and_size(monkeypatch):
    """The peak per dtype is the highest rate over the frameworks and sizes (each framework's worker reports its
    fastest run per size), with what reached it; a framework that lacks a dtype or fails is skipped with its reason."""
    outcomes = {
        "onednn-matmul": {"gflops": {"float32": {"2048": 190.0, "4096": 210.0}}, "skipped": {"float16": "no float16"}},
        "jax": {"gflops": {"float32": {"2048": 170.0, "4096": 120.0}, "float16": {"2048": 30.0, "4096": 35.5}}},
        "torch": {"error": "torch failed"},
    }
    monkeypatch.setattr(measure, "_in_worker", lambda job: {"skipped": {}, **outcomes[job["framework"]]})
    logged = []
    peak = measure.gemm_peak(
        ["float32", "float16"], (2048, 4096), bench.GEMM_TIMING, list(outcomes), lambda *line: logged.append(line)
    )
    assert peak == {
        "float32": {"gflops": 210.0, "framework": "onednn-matmul", "size": 4096},
        "float16": {"gflops": 35.5, "framework": "jax", "size": 4096},
    }
    assert ("skip", "GEMM peak in onednn-matmul float16: no float16") in logged
    assert ("skip", "GEMM peak in torch: torch failed") in logged


def test_same_process_runs_every_contender_here(tmp_path):
    path = tmp_path / "same.json"
    assert (
        cli.main(
            [
                "bench",
                "--quick",
                "--same-process",
                "--configs",
                "cpu-gru",
                "--contenders",
                "jcr-xla,flax",
                "--json",
                str(path),
            ]
        )
        == 0
    )
    data = json.loads(path.read_text())
    assert data["machine"]["isolation"] == "one process" and data["neighbour"] == []
    assert {r["contender"] for r in data["records"]} == {"jcr-xla", "flax"}
    assert all(r["process"] is None for r in data["records"])


def test_rounds_keep_the_middle_round_for_everyone():
    records = [
        {"config": "c", "dtype": "float32", "contender": name, "measurement": "fwd", "ms": ms, "round": i}
        for name, times in (("torch", (3.0, 1.0, 2.0)), ("jcr-xla", (5.0, 4.0)))
        for i, ms in enumerate(times)
    ]
    combined = {r["contender"]: r for r in measure.combine_rounds(records)}
    assert combined["torch"]["ms"] == 2.0 and combined["torch"]["round"] == 2
    assert combined["torch"]["ms_rounds"] == [3.0, 1.0, 2.0]
    assert combined["jcr-xla"]["ms"] == 4.0  # the lower middle of two


def test_padded_configs_time_every_contender_with_the_same_lengths(tmp_path):
    """The padded problems (issue 41): the CPU shapes with lengths in [T/2, T], the longest T, the same for every
    contender; this library takes them as seq_lengths, PyTorch as a PackedSequence, the Flax stack is skipped."""
    for name, plain in zip(
        ("lstm-pad", "gru-pad", "lstmb1p", "grub1p", "lstmbigp", "grubigp"), contenders.CPU_CONFIGS, strict=True
    ):
        padded = bench.CONFIGS[name]
        assert padded.padded and (padded.mode, padded.batch, padded.time) == (plain.mode, plain.batch, plain.time)
        lengths = padded.lengths()
        assert lengths.dtype == np.int32 and lengths.shape == (padded.batch,) and lengths[0] == padded.time
        assert lengths.min() >= padded.time // 2 and lengths.max() == padded.time
        np.testing.assert_array_equal(lengths, padded.lengths())
        assert plain.lengths() is None
    path = tmp_path / "padded.json"
    names = "jcr-default,jcr-xla,flax" + (",torch" if HAS_TORCH else "")
    if onednn.extension_loaded():
        names += ",jcr-onednn"
    argv = ["bench", "--quick", "--same-process", "--configs", "lstm-pad", "--contenders", names, "--json", str(path)]
    assert cli.main(argv) == 0
    data = json.loads(path.read_text())
    assert not data["errors"]
    timed = {r["contender"] for r in data["records"]}
    assert timed == set(names.split(",")) - {"flax"}
    assert {s["contender"]: s["reason"] for s in data["skipped"]}["flax"].startswith("a padded batch")


@pytest.mark.parametrize(
    "pair,name",
    [
        (("onednn", "onednn"), "onednn"),
        (("onednn", "onednn:plain"), "onednn:plain"),
        (("onednn", "xla"), "onednn+xla"),
        (("xla", "onednn"), "xla+onednn"),
        (("xla", "onednn:plain"), "xla+onednn:plain"),
    ],
)
def test_default_records_the_pair_it_runs(monkeypatch, pair, name):
    """The default's record names what ran on each side, as the registry chose it: oneDNN throughout, its
    plain-weights variant, or a hybrid (it once named only "onednn", so the report's "picked" column hid the xla
    training steps of the B=1 GRUs). The estimates are made up so that the registry chooses ``pair``."""
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.backends.onednn import backend

    if backend.unavailable() is not None:
        pytest.skip(backend.unavailable())
    wanted = dict(zip(registry.SIDES, pair, strict=True))

    def cost(call, side, variant):
        chosen = wanted[side]
        if variant:  # the plain-weights variant, training side only
            return registry.Cost(0.5, "test") if chosen == "onednn:plain" else None
        return registry.Cost({"onednn": 0.5, "onednn:plain": 1.0}.get(chosen, 2.0), "test")

    monkeypatch.setattr(backend, "cost", cost)
    runner = contenders._build_jcr(contenders.CONFIGS["cpu-lstm"].shrunk(), "float32", None)
    assert runner.notes["implementation"] == name
    assert jcr.implementation_for("cpu", jcr.backends.call.Call(jcr.RNNConfig("lstm", 1, 32, 32), 10, 4)) == name


def test_decoding_configs_carry_the_states_through_one_step_calls(tmp_path):
    """ "G-b1"/"G-b64" (issue 39's decoding benchmark): T one-step calls that carry the states, forward only: a JAX
    contender's outputs are those of one call over all T steps (the xla implementation and the default, which on the
    CPU is oneDNN's, within float32 rounding) and PyTorch's loop gives its module's outputs over all T steps; the bench
    runs them (the neighbour ratio too, which used to call an inference-only problem's missing training step) and
    skips Flax with the reason."""
    bc = contenders.CONFIGS["G-b1"].shrunk()
    assert bc.decode and bc.inference_only and bc.batch == 1 and bc.num_layers == 2
    cfg = bc.rnn_config("float32")
    x = contenders.inputs(bc)
    params = jcr.init_params(jax.random.key(0), cfg)
    h0 = np.zeros(cfg.state_shape(bc.batch), np.float32)
    want = np.asarray(jcr.rnn(params, x, h0, h0, cfg, implementation="xla")[0])
    for implementation in ("xla", None):
        got = contenders._build_jcr(bc, "float32", implementation).forward()
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    if HAS_TORCH:
        assert contenders.build_torch(bc, "float32").train is None
    path = tmp_path / "decode.json"
    names = "jcr-default,flax" + (",torch" if HAS_TORCH else "")
    assert cli.main(["bench", "--quick", "--configs", "G-b1", "--contenders", names, "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert not data["errors"], data["errors"]
    assert {(r["contender"], r["measurement"]) for r in data["records"]} == {
        (name, contenders.FWD) for name in names.split(",") if name != "flax"
    }
    assert {s["contender"]: s["reason"] for s in data["skipped"]}["flax"].startswith("decoding")


@pytest.mark.parametrize("name", ["cpu-gru", "G-b1", "lstm-pad", "D"])
def test_jcr_flax_is_the_linen_module_with_its_default_arguments(name):
    """Issue 62: "jcr-flax" times this library's linen module (jax_cudnn_rnn/flax.py) as a Flax user's model has it,
    only the shape and dtype given: its values are the module's own (batch-major; a decoding problem's one-step calls
    carry the module's carry; a padded one passes seq_lengths), on the double-bias weight space, and the record names
    what the default ran."""
    from jax_cudnn_rnn import flax as jcr_flax
    from jax_cudnn_rnn.backends.call import Call

    bc = contenders.CONFIGS[name].shrunk()
    runner = contenders.contender("jcr-flax").build(bc, "float32")
    kind = {"lstm": jcr_flax.LSTM, "gru": jcr_flax.GRU}[bc.mode]
    model = kind(bc.hidden, num_layers=bc.num_layers, direction=bc.direction, dtype="float32")
    x = np.swapaxes(contenders.inputs(bc), 0, 1)
    variables = model.init(jax.random.key(0), x[:, :1])
    lengths = () if bc.lengths() is None else (bc.lengths(),)
    want = model.apply(variables, x, *lengths)  # one call over all T steps, decoding or not
    np.testing.assert_allclose(np.asarray(runner.forward()), np.asarray(want), rtol=2e-5, atol=2e-5)
    assert (runner.train is None) == bc.inference_only
    if runner.train is not None:
        runner.train()
    config = model.rnn_config(bc.input_size)
    assert runner.notes["bias_mode"] == config.bias_mode == "double"
    one_call = Call(config, 1 if bc.decode else bc.time, bc.batch, seq_lengths=bc.padded)
    assert runner.notes["implementation"] == jcr.implementation_for(jax.numpy.asarray(x), one_call)
    bfloat16 = contenders.contender("jcr-flax").build(bc, "bfloat16")
    assert np.asarray(bfloat16.forward()).dtype == jax.numpy.bfloat16


def test_an_algorithm_contender_runs_cudnn_with_that_algorithm(cudnn_stand_in):
    """ "jcr-cudnn@<algorithm>" (what the GPU's tune times) asks rnn() for that algorithm; every kernel call's plan
    runs it (cuDNN's kernels stood in for on the CPU)."""
    bc = contenders.CONFIGS["F"].shrunk()
    contender = contenders.contender("jcr-cudnn@persist_static")
    assert contender.ours and not contender.by_default
    runner = contender.build(bc, "float32")
    runner.forward()
    runner.train()
    assert runner.notes["algorithm"] == "persist_static"
    assert {algo for _, _, algo in cudnn_stand_in.calls} == {"persist_static"}
    assert {kind for _, kind, _ in cudnn_stand_in.calls} == {"forward", "backward"}
    with pytest.raises(KeyError, match="jcr-<implementation>@<algorithm>"):
        contenders.contender("nope")


def test_a_worker_past_its_time_is_stopped_and_reported():
    results = measure.Results()
    logged = []
    bc = contenders.CONFIGS["cpu-lstm"].shrunk()
    measure.run_guarded(
        results,
        lambda kind, text: logged.append(kind),
        contenders.contender("jcr-xla"),
        bc,
        "float32",
        measure.Timing(1, 0),
        True,
        "float32",
        timeout=0.01,
    )
    assert results.records == [] and logged == ["error"]
    assert results.errors[0]["error"] == "the worker process was stopped after 0 s"


def test_a_budget_stops_the_bench_and_says_what_did_not_run():
    """--budget-seconds (issue 62's device command, within its 8 minutes): no contender starts after it, each one not
    run is skipped with the reason, and what ran is kept."""
    ticks = iter([0.0, 0.0] + [100.0] * 10)  # the start, the first contender's check, then past the budget
    logged = []
    results = measure.run_all(
        [contenders.CONFIGS["cpu-lstm"].shrunk()],
        ["float32", "bfloat16"],
        [contenders.contender("jcr-xla")],
        measure.Timing(1, 0),
        lambda kind, text: logged.append((kind, text)),
        isolated=False,
        rounds=2,
        budget_seconds=50.0,
        clock=lambda: next(ticks),
    )
    assert {(r["dtype"], r["measurement"]) for r in results.records} == {
        ("float32", m) for m in contenders.MEASUREMENTS
    }
    reason = "the bench's budget of 50 s was spent"
    assert sorted((s["dtype"], s["reason"]) for s in results.skipped) == [
        ("bfloat16", f"{reason} (round 1)"),
        ("bfloat16", f"{reason} (round 2)"),
        ("float32", f"{reason} (round 2)"),
    ]
    assert [text for kind, text in logged if kind == "skip"] == [
        f"{reason} (round 1): cpu-lstm bfloat16 jcr-xla and what follows did not run"
    ]
