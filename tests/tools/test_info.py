"""``jax-cudnn-rnn info``: versions, the extension's status and why, devices, and the implementation rnn() picks."""

import json

import jax
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.cudnn import extension as _extension
from jax_cudnn_rnn.tools import cli, info


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
            want = training if training.partition(":")[0] == forward else f"{forward}+{training}"
            assert picked == want, (mode, picked)
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
    """Cross-check with what rnn() really does on the CPU: the named implementation's result, bit for bit."""
    device = jax.devices("cpu")[0]
    picked_name = info.implementation_on(device, mode)
    assert registry.why_not(picked_name, "cpu", Call(jcr.RNNConfig(mode, 1, 3, 2))) is None, picked_name
    cfg = jcr.RNNConfig(mode=mode, num_layers=1, num_units=3, input_size=2)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.device_put(np.ones((4, 2, 2), np.float32), device)
    h0 = np.zeros(cfg.state_shape(2), np.float32)
    c0 = h0 if mode == "lstm" else None
    picked = jcr.rnn(params, x, h0, c0, cfg)[0]
    named = jcr.rnn(params, x, h0, c0, cfg, implementation=picked_name)[0]
    np.testing.assert_array_equal(np.asarray(picked), np.asarray(named))


def test_text_report_says_why_the_extension_is_not_loaded(capsys, monkeypatch):
    monkeypatch.setattr(_extension.EXTENSION, "_module", None)
    monkeypatch.setattr(_extension.EXTENSION, "_error", "the cuDNN extension was not built: no C++ compiler was found")
    out = _report(capsys)
    assert "cuDNN extension: not loaded" in out
    assert "why: the cuDNN extension was not built: no C++ compiler was found" in out
    assert "cpu:0" in out and "xla" in out


def test_text_report_shows_a_version_mismatch(capsys, monkeypatch):
    note = "the cuDNN extension is loaded, but it was compiled against jaxlib 0"
    monkeypatch.setattr(_extension.EXTENSION, "_warning", note)
    monkeypatch.setattr(_extension.EXTENSION, "_error", note)
    out = _report(capsys)
    assert ("note: " if jcr.extension_loaded() else "why: ") + "the cuDNN extension is loaded, but" in out


def test_report_says_what_only_the_xla_implementation_runs(capsys):
    """Issue 40's configurations: each fused backend's reason, the registry's own words, in both reports."""
    report = json.loads(_report(capsys, "--json"))["pure_jax_only"]
    assert len(report) == 3
    for label, declined in report.items():
        assert set(declined) == {"cudnn", "onednn"}, label
    assert "do not run 'gru_reset_before'" in report["mode 'gru_reset_before'"]["cudnn"]
    text = _report(capsys)
    assert "run by the xla implementation only" in text
    assert "onednn: needs no recurrent dropout in training" in text
