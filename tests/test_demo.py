"""A shortened demo run through the CLI entry point: trains, checkpoints, restores into plain Flax, logits match."""

import re

import pytest

from jax_cudnn_rnn import cli


def test_demo_cli_short_run(tmp_path, capsys):
    code = cli.main(["demo", "--steps", "5", "--num-units", "16", "--seq-len", "16", "--batch-size", "4",
                     "--save-every", "2", "--sample-length", "10", "--output-dir", str(tmp_path / "out"),
                     "--no-progress", "--tolerance", "1e-5"])
    out = capsys.readouterr().out
    assert code == 0, out
    difference = float(re.search(r"max \|logits difference\| =\s*([0-9.e+-]+)", out).group(1))
    assert difference <= 1e-5
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.name.isdigit()) == ["4", "5"]  # max_to_keep=2
    losses = [float(x) for x in re.findall(r"step \d+/5 loss ([0-9.]+)", out)]
    assert len(losses) == 5 and all(3.0 < loss < 4.5 for loss in losses)  # ~log(64) = 4.16 at the start


def test_cli_help_and_unknown_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", "--help"])
    assert exit_info.value.code == 0
    assert "--output-dir" in capsys.readouterr().out
    assert cli.main([]) == 2
