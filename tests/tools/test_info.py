"""``jax-cudnn-rnn info``: versions, the extension's status and why, devices, and the implementation rnn() picks."""

import dataclasses
import itertools
import json
import os
import sys
import types

import jax
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.backends import registry, tuned_files
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.cudnn import extension as _extension
from jax_cudnn_rnn.backends.onednn import extension as onednn_extension
from jax_cudnn_rnn.tools import cli, info

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
from skips import REQUIRE_ONEDNN, skip_or_fail


def _report(capsys, *flags):
    assert cli.main(["info", *flags]) == 0
    return capsys.readouterr().out


def test_json_report_matches_this_process(capsys):
    report = json.loads(_report(capsys, "--json"))
    assert report["versions"]["jax"] == jax.__version__
    assert report["versions"]["jax-cudnn-rnn"] == jcr.__version__
    assert report["extension"]["loaded"] == jcr.extension_loaded()
    assert report["extension"]["error"] == jcr.extension_error()
    assert report["onednn_extension"]["loaded"] == onednn.extension_loaded()
    cpu = [d for d in report["devices"] if d["platform"] == "cpu"]
    # cuDNN never runs on a CPU device; oneDNN runs there where it is loaded and estimated faster for the mode on a
    # side (the CPU rule); the report names the pair, as implementation= takes it ("onednn+xla": oneDNN
    # undifferentiated, xla under jax.grad), and what decided it.
    assert cpu
    for d in cpu:
        for mode, picked in d["rnn_implementation"].items():
            forward, training = onednn.cpu_choice(jcr.RNNConfig(mode, 1, 128, 128), 32)
            assert {forward, training.partition(":")[0]} <= (
                {"xla", "onednn"} if onednn.extension_loaded() else {"xla"}
            )
            # the name the report gives runs these two (one name where it alone does: "onednn:plain" runs oneDNN's
            # forward; "onednn:gemm" its own, so oneDNN's forward with its training step is "onednn+onednn:gemm")
            assert tuple(run.name for run in registry._parse(picked)) == (forward, training), (mode, picked)
        assert d["decided_by"] and all(isinstance(source, str) for source in d["decided_by"])
        if onednn.extension_loaded() and any(p != "xla" for p in d["rnn_implementation"].values()):
            assert any("the rule fitted to the shipped measurements" in source for source in d["decided_by"])
    if jcr.extension_loaded():
        build = _extension.build_versions(_extension.module())
        assert report["extension"]["built_against"]["jaxlib"] == build["jaxlib"]
        assert report["extension"]["cudnn_runtime"] == _extension.format_cudnn_version(
            _extension.module().cudnn_version()
        )


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_the_picked_implementation_is_what_rnn_runs(mode):
    """Cross-check with what rnn() really does on the CPU for the call the report asks about (its probe's shape: the
    pick depends on the shape on every CPU class), the named implementation's result, bit for bit."""
    device = jax.devices("cpu")[0]
    picked_name = info.implementation_on(device, mode)
    units, steps, batch = info._PROBE_UNITS, info._PROBE_STEPS, info._PROBE_BATCH
    cfg = jcr.RNNConfig(mode=mode, num_layers=1, num_units=units, input_size=units)
    assert registry.why_not(picked_name, "cpu", Call(cfg, steps, batch)) is None, picked_name
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.device_put(np.random.default_rng(0).normal(size=(steps, batch, units)).astype(np.float32), device)
    h0 = np.zeros(cfg.state_shape(batch), np.float32)
    c0 = h0 if mode == "lstm" else None
    picked = jcr.rnn(params, x, h0, c0, cfg)[0]
    named = jcr.rnn(params, x, h0, c0, cfg, implementation=picked_name)[0]
    np.testing.assert_array_equal(np.asarray(picked), np.asarray(named))


def test_text_report_says_why_the_extension_is_not_loaded(capsys, monkeypatch):
    monkeypatch.setattr(_extension.EXTENSION, "_module", None)
    monkeypatch.setattr(_extension.EXTENSION, "_error", "the cuDNN extension was not built: no C++ compiler was found")
    for gpu in (True, False):
        monkeypatch.setattr(info, "nvidia_gpu", lambda gpu=gpu: gpu)
        out = _report(capsys, "--verbose")
        assert "cuDNN extension: not loaded" in out
        assert "why: the cuDNN extension was not built: no C++ compiler was found" in out
        assert "cpu:0" in out and "xla" in out
    # Without an NVIDIA GPU the reason is no advice: only --verbose shows it.
    out = _report(capsys)
    assert "cuDNN extension: not loaded (not needed here: no NVIDIA GPU)" in out and "no C++ compiler" not in out


def test_text_report_shows_a_version_mismatch(capsys, monkeypatch):
    note = "the cuDNN extension is loaded, but it was compiled against jaxlib 0"
    monkeypatch.setattr(_extension.EXTENSION, "_warning", note)
    monkeypatch.setattr(_extension.EXTENSION, "_error", note)
    out = _report(capsys, "--verbose")
    assert ("note: " if jcr.extension_loaded() else "why: ") + "the cuDNN extension is loaded, but" in out


def test_report_says_what_only_the_xla_implementation_runs(capsys):
    """Issue 40's configurations: each fused backend's reason, the registry's own words, in both reports."""
    report = json.loads(_report(capsys, "--json"))["pure_jax_only"]
    assert len(report) == 3
    for label, declined in report.items():
        assert set(declined) == {"cudnn", "onednn"}, label
    assert "do not run 'gru_reset_before'" in report["mode 'gru_reset_before'"]["cudnn"]
    text = _report(capsys, "--verbose")
    assert "run by the xla implementation only" in text
    assert "onednn: needs no recurrent dropout in training" in text
    short = _report(capsys)
    assert "xla only: other activations than the cell's own, mode 'gru_reset_before', recurrent dropout" in short
    assert "needs no recurrent dropout" not in short


LONG_ERROR = "the oneDNN extension failed: " + " ".join(["/a/very/long/path/to/libdnnl.so.3"] * 12) + " Fix: reinstall"


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("loaded", [True, False])
def test_every_line_fits_in_100_columns(capsys, monkeypatch, gpu, loaded):
    """Issue 51: the report was one line of about 1,400 characters (the CPU table's provenance)."""
    monkeypatch.setattr(info, "nvidia_gpu", lambda: gpu)
    if not loaded:
        for extension in (_extension.EXTENSION, onednn_extension.EXTENSION):
            monkeypatch.setattr(extension, "_module", None)
            monkeypatch.setattr(extension, "_error", LONG_ERROR)
    for flags in ((), ("--verbose",)):
        out = _report(capsys, *flags)
        # a word longer than a line (a path in a deep venv) is kept whole on a line of its own
        assert not [line for line in out.splitlines() if len(line) > 100 and len(line.split()) > 1]
        assert out.count("\n") >= 8


def test_the_rules_measurements_are_behind_verbose(capsys):
    if not onednn.extension_loaded():
        skip_or_fail(f"the oneDNN extension is not loaded: {onednn.extension_error()}", REQUIRE_ONEDNN)
    cpus = [m.describe() for m in onednn.MEASUREMENTS]
    assert len(cpus) >= 2 and all(len(cpu) > 30 for cpu in cpus)
    flat = lambda text: " ".join(text.split())  # noqa: E731 - joins the wrapped lines back
    plain, verbose = flat(_report(capsys)), flat(_report(capsys, "--verbose"))
    assert not any(cpu in plain for cpu in cpus)
    assert all(cpu in verbose for cpu in cpus)


def test_the_peers_versions_are_reported(capsys):
    lines = _report(capsys).splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("peers: "))
    rest = itertools.takewhile(lambda line: line.startswith("  "), lines[first + 1 :])
    text = " ".join(" ".join([lines[first], *rest]).split())  # the wrapped "peers:" line, joined
    installed = {name: v for name in info.PEERS if (v := info._version(name))}
    assert {"flax", "orbax-checkpoint", "optax"} <= set(installed)  # the package's and the test extra's
    for name, version in installed.items():
        assert f"{name} {version}" in text, name
    report = json.loads(_report(capsys, "--json"))
    assert report["peers"] == {name: info._version(name) for name in info.PEERS}


def test_no_cudnn_advice_without_an_nvidia_gpu(capsys, monkeypatch):
    monkeypatch.setattr(_extension.EXTENSION, "_module", None)
    monkeypatch.setattr(_extension.EXTENSION, "_error", "libcudnn.so.9 is missing; pip install nvidia-cudnn-cu13")
    monkeypatch.setattr(info, "nvidia_gpu", lambda: False)
    report = json.loads(_report(capsys, "--json"))
    assert not any("cudnn" in tip.lower() or "cuda" in tip.lower() for tip in report["advice"]), report["advice"]
    assert "nvidia-cudnn-cu13" not in _report(capsys)
    # With an NVIDIA GPU that JAX does not see, the advice is JAX's CUDA plugin; seen without the extension, its fix.
    monkeypatch.setattr(info, "nvidia_gpu", lambda: True)
    advice = json.loads(_report(capsys, "--json"))["advice"]
    if not any(d.platform == "gpu" for d in jax.devices()):
        assert any('pip install "jax[cuda13]"' in tip for tip in advice), advice
    else:
        assert any("pip install nvidia-cudnn-cu13" in tip for tip in advice), advice


def test_the_oneDNN_advice_gives_the_fix_where_it_applies(capsys, monkeypatch):
    monkeypatch.setattr(info, "nvidia_gpu", lambda: False)
    monkeypatch.setattr(onednn_extension.EXTENSION, "_module", None)
    monkeypatch.setattr(onednn_extension.EXTENSION, "_error", "the oneDNN extension is not part of this installation")
    report = json.loads(_report(capsys, "--json"))
    onednn_tips = [tip for tip in report["advice"] if "oneDNN" in tip]
    if report["machine"] == "x86_64":
        assert onednn_tips == [
            'the CPU default could run oneDNN\'s kernels where faster: `pip install "jax-cudnn-rnn[onednn]"`'
        ]
    else:  # no oneDNN wheels there: nothing to advise
        assert onednn_tips == []


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"jax-cudnn-rnn {jcr.__version__}"


def test_a_cpu_outside_what_the_rule_was_fitted_on_is_told_to_tune(capsys, monkeypatch):
    """Issue 61: where the CPU rule estimates this CPU's class from another class's measurements (here: an AMX CPU
    with the AMX measurements left out), the report says so and that `jax-cudnn-rnn tune` fixes it; where its classes
    were measured, it says nothing of the kind."""
    from jax_cudnn_rnn.backends.onednn import cpu_rule

    if not onednn.extension_loaded():
        skip_or_fail(f"the oneDNN extension is not loaded: {onednn.extension_error()}", REQUIRE_ONEDNN)
    monkeypatch.setattr(info, "nvidia_gpu", lambda: False)
    monkeypatch.setattr(info.onednn, "tuned_table", lambda: None)
    monkeypatch.setattr(info.onednn, "effective_cpu_isa", lambda: "avx512_core_amx")
    assert not any("fitted on other CPUs" in tip for tip in json.loads(_report(capsys, "--json"))["advice"])
    others = tuple(m for m in cpu_rule.MEASUREMENTS if not cpu_rule.includes(m.isa, "avx512_core_amx"))
    monkeypatch.setattr(cpu_rule, "MEASUREMENTS", others)
    report = json.loads(_report(capsys, "--json"))
    assert report["onednn_extension"]["outside_fit"] in report["advice"]
    assert "bf16 amx kernels): estimated from bf16 native measurements" in report["onednn_extension"]["outside_fit"]
    assert "`jax-cudnn-rnn tune` measures this machine" in _report(capsys).replace("\n", " ")


def test_a_gpu_says_which_measurements_its_costs_come_from(monkeypatch, tmp_path):
    """Issue 62: on a GPU the report names what cuDNN's costs and algorithms rest on: this machine's tuned table of the
    GPU's kind, the shipped measurements of that kind, or none (then the advice is to tune). No GPU is here: the
    report's GPU entry is made up, its kind's tables synthetic (not measurements)."""
    from jax_cudnn_rnn.backends.cudnn import gpu_rule
    from jax_cudnn_rnn.backends.cudnn import tuned as gpu_tuned
    from jax_cudnn_rnn.config import MODES

    kind = "NVIDIA H200 (synthetic, for this test)"
    deep = tmp_path / ("a-folder-as-deep-as-pytest-xdist-makes-them" * 2)  # a path longer than a line
    deep.mkdir()
    monkeypatch.setattr(tuned_files, "cache_dir", lambda: deep)
    gpu_tuned._read.cache_clear()
    report = info.collect()
    report["nvidia_gpu"] = True
    report["extension"] = {**report["extension"], "loaded": True, "error": None, "cudnn_runtime": "9.19.0"}
    report["extension"]["built_against"] = {"cudnn": "9.12.0", "jaxlib": "0.7.2", "xla_ffi_api": (0, 1)}
    entry = {
        "device": "cuda:0",
        "platform": "gpu",
        "kind": kind,
        "rnn_implementation": dict.fromkeys(MODES, "cudnn"),
        "decided_by": [registry.PREFERRED.source],
    }

    def text_and_advice():
        report["devices"] = [d for d in report["devices"] if d["platform"] != "gpu"]
        report["devices"].append({**entry, "gpu_table": info.gpu_table(kind)})
        report["advice"] = info.advice(report)
        text = info.format_report(report, verbose=True)
        assert all(len(line) <= 100 or len(line.split()) == 1 for line in text.splitlines()), text
        return " ".join(text.split()), report["advice"]

    try:
        text, advice = text_and_advice()
        assert f"cuDNN's costs and algorithms: none measured on the {kind}: cuDNN runs every call it supports" in text
        assert [tip for tip in advice if kind in tip] == [
            f"nothing was measured on the {kind}: the GPU default runs cuDNN for every call it supports; "
            "`jax-cudnn-rnn tune` measures this GPU, so that the default runs the xla implementation or another of "
            "cuDNN's algorithms where they are faster"
        ]
        shipped = gpu_rule.Measured(kind, "9.0", "2026-01-01", "cuDNN 9.19.0, jax 0.11.2", "float32", "synthetic", ())
        monkeypatch.setattr(gpu_rule, "MEASUREMENTS", (shipped,))
        text, advice = text_and_advice()
        assert f"the shipped measurements of 2026-01-01 on an {kind} (compute capability 9.0)" in text
        assert not [tip for tip in advice if kind in tip]
        path = gpu_tuned.save(dataclasses.replace(shipped, date="2026-02-02"))
        text, advice = text_and_advice()
        # The path stays whole, on a line of its own if it is longer than one: in CI's pytest-xdist folders
        # (.../popen-gw1/test_a_gpu_says_which_measurem0/) the wrap broke it in two (2026-11-28's failing CI run).
        assert f"this machine's tuned table {path}, then the shipped measurements" in text
    finally:
        gpu_tuned._read.cache_clear()


def _demo_import_raises(monkeypatch, error: ModuleNotFoundError) -> None:
    real_import = cli.importlib.import_module

    def failing(name, *args):
        if name == "jax_cudnn_rnn.tools.demo":
            raise error
        return real_import(name, *args)

    monkeypatch.setattr(cli.importlib, "import_module", failing)


def test_a_subcommand_whose_extra_is_missing_says_what_to_install_and_the_others_run(monkeypatch, capsys):
    """A plain ``pip install jax-cudnn-rnn`` has no Flax: the demo's module cannot be imported there. The command line
    still runs ``info``, and ``demo`` (with its arguments) says which package is missing and which extra brings it."""
    _demo_import_raises(monkeypatch, ModuleNotFoundError("No module named 'flax'", name="flax"))
    assert cli.main(["demo", "--steps", "5"]) == 2
    err = capsys.readouterr().err
    assert "jax-cudnn-rnn demo: needs the package 'flax'" in err and "pip install 'jax-cudnn-rnn[demo]'" in err
    assert "onednn" in _report(capsys).lower()


def test_a_missing_module_of_this_package_is_not_taken_for_a_missing_extra(monkeypatch):
    gone = "jax_cudnn_rnn.tools.gone"
    _demo_import_raises(monkeypatch, ModuleNotFoundError(f"No module named '{gone}'", name=gone))
    with pytest.raises(ModuleNotFoundError, match=r"jax_cudnn_rnn\.tools\.gone"):
        cli.main(["info"])


def test_a_subcommand_that_imports_a_missing_package_as_it_runs_says_what_to_install(monkeypatch, capsys):
    """The bench imports rich as it runs: without it the command says so and names the extra, as for an import."""

    def run(args):
        raise ModuleNotFoundError("No module named 'rich'", name="rich")

    tool = types.SimpleNamespace(add_arguments=lambda parser: None, run=run)
    monkeypatch.setitem(sys.modules, "jcr_test_tool", tool)
    monkeypatch.setitem(cli._COMMANDS, "tool", ("a test's", "a test's", "jcr_test_tool", "bench"))
    assert cli.main(["tool"]) == 2
    err = capsys.readouterr().err
    assert "jax-cudnn-rnn tool: needs the package 'rich'" in err and "pip install 'jax-cudnn-rnn[bench]'" in err
