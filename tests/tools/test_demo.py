"""A shortened demo run through the CLI entry point: trains, checkpoints, restores into plain Flax, logits match; and
the demo under faults, in a subprocess: killed (SIGKILL) during a save it resumes from the last complete step, and
stopped with Ctrl-C (SIGINT) it finishes the save in flight, says which step to resume from and exits 130."""

import math
import os
import re
import signal
import subprocess
import sys

import jax
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.tools import cli

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import saves_in_flight, wait_for_a_save_in_flight


def test_demo_cli_short_run(tmp_path, capsys):
    handler = signal.getsignal(signal.SIGINT)
    code = cli.main(
        [
            "demo",
            "--steps",
            "5",
            "--num-units",
            "16",
            "--seq-len",
            "16",
            "--batch-size",
            "4",
            "--save-every",
            "2",
            "--sample-length",
            "10",
            "--output-dir",
            str(tmp_path / "out"),
            "--no-progress",
            "--tolerance",
            "1e-5",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert signal.getsignal(signal.SIGINT) is handler  # the demo's Ctrl-C handler lives only while it trains
    difference = float(re.search(r"max \|logits difference\| =\s*([0-9.e+-]+)", out).group(1))
    assert difference <= 1e-5
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.name.isdigit()) == ["4", "5"]  # max_to_keep=2
    losses = [float(x) for x in re.findall(r"step \d+/5 loss ([0-9.]+)", out)]
    assert len(losses) == 5 and all(3.0 < loss < 4.5 for loss in losses)  # ~log(64) = 4.16 at the start


def test_cli_help_and_unknown_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["demo", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--output-dir" in out
    # What may train the demo is what rnn() may pick: not only cuDNN or pure JAX, also oneDNN on a CPU.
    assert all(name in out for name in ("cuDNN", "oneDNN", "'xla'")), out
    assert cli.main([]) == 2


_SMALL = [
    "--num-units",
    "16",
    "--seq-len",
    "16",
    "--batch-size",
    "4",
    "--save-every",
    "2",
    "--sample-length",
    "5",
    "--no-progress",
]


def _demo(capsys, out_dir, *flags):
    code = cli.main(["demo", *_SMALL, "--output-dir", str(out_dir), *flags])
    return code, re.sub(r"\s+", " ", capsys.readouterr().out)  # rich wraps long lines at the console's width


def _final_loss(out):
    return float(re.search(r"final loss ([0-9.]+)", out).group(1))


def test_rerun_with_other_settings_starts_fresh(tmp_path, capsys):
    """The issue's failure: a second run with other --steps/--num-units restored the first run's checkpoint."""
    code, out = _demo(capsys, tmp_path, "--steps", "4")
    assert code == 0, out
    assert "starting a new run" in out
    code, out = _demo(capsys, tmp_path, "--steps", "3", "--num-units", "8")
    assert code == 0, out
    assert "starting fresh" in out and "num_units 16 -> 8" in out
    assert "removed the previous run's checkpoints [2, 4]" in out
    assert "restored step 3 into plain Flax" in out
    code, out = _demo(capsys, tmp_path, "--steps", "2", "--num-units", "8")  # same settings, but not further
    assert code == 0, out
    assert "already reached step 3 >= --steps 2" in out


def test_resumed_run_equals_an_uninterrupted_one(tmp_path, capsys):
    code, straight = _demo(capsys, tmp_path / "straight", "--steps", "5")
    assert code == 0, straight
    _demo(capsys, tmp_path / "resumed", "--steps", "3")
    code, resumed = _demo(capsys, tmp_path / "resumed", "--steps", "5")
    assert code == 0, resumed
    assert "resuming the run" in resumed and "from its checkpoint at step 3" in resumed
    assert _final_loss(resumed) == _final_loss(straight)


def test_demo_refuses_a_folder_with_other_files(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match=r"notes\.txt"):
        _demo(capsys, tmp_path, "--steps", "1")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_demo_says_which_implementation_trained_it(tmp_path, capsys):
    code, out = _demo(capsys, tmp_path, "--steps", "1")
    assert code == 0, out
    if jcr.extension_loaded() and jax.default_backend() == "gpu":
        expected = "cuDNN"
    elif jax.default_backend() == "cpu" and onednn.extension_loaded():
        # What the registry runs under jax.grad on this CPU for this run's LSTM (_SMALL; the embedding's default 32).
        units, batch = int(_SMALL[_SMALL.index("--num-units") + 1]), int(_SMALL[_SMALL.index("--batch-size") + 1])
        training = onednn.cpu_choice(jcr.RNNConfig("lstm", 1, units, 32), batch)[1]
        expected = {
            "onednn": "oneDNN (implementation 'onednn'",
            "onednn:plain": "oneDNN (implementation 'onednn'",  # the primitive's target, plainer weights
            "onednn:gemm": "oneDNN (implementation 'onednn:gemm'",
            "xla": "pure JAX (implementation 'xla')",
        }[training]
    else:
        expected = "pure JAX (implementation 'xla')"
    assert f"training with {expected}" in out


# A model small enough that a step takes milliseconds, so that the run spends its time saving (every step).
_TINY = [
    "--num-units",
    "8",
    "--seq-len",
    "8",
    "--batch-size",
    "2",
    "--embed-size",
    "4",
    "--sample-length",
    "2",
    "--save-every",
    "1",
    "--no-progress",
]
_TIMEOUT = 60  # seconds for any one demo process; each takes about 10 on 2 CPU cores


def _start_demo(out_dir, log, *flags):
    """The demo in its own process, through the command line's module, its output in the file ``log``."""
    with open(log, "w") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "jax_cudnn_rnn.tools.cli", "demo", *_TINY, "--output-dir", str(out_dir), *flags],
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def _complete_steps(out_dir):
    return sorted(int(name) for name in os.listdir(out_dir) if name.isdigit())


def test_a_run_killed_during_a_save_resumes_from_the_last_complete_step(tmp_path):
    """The issue's case: SIGKILL while Orbax writes a step left ``<step>.orbax-checkpoint-tmp`` behind, and the
    re-run refused the folder as not the demo's."""
    out_dir, log = tmp_path / "out", tmp_path / "first.log"
    process = _start_demo(out_dir, log, "--steps", "400")
    wait_for_a_save_in_flight(process, out_dir, 3, _TIMEOUT, describe=lambda: log.read_text()[-3000:])
    process.kill()
    process.wait(_TIMEOUT)
    interrupted = saves_in_flight(out_dir)
    assert interrupted, f"the kill came after the save was committed: {sorted(os.listdir(out_dir))}"
    last = _complete_steps(out_dir)[-1]
    assert last >= 2 and all(int(name.split(".")[0]) > last for name in interrupted)

    rerun = subprocess.run(
        [
            sys.executable,
            "-m",
            "jax_cudnn_rnn.tools.cli",
            "demo",
            *_TINY,
            "--output-dir",
            str(out_dir),
            "--steps",
            str(last + 2),
        ],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
    )
    out = re.sub(r"\s+", " ", rerun.stdout)  # rich wraps long lines at the console's width
    assert rerun.returncode == 0, out + rerun.stderr[-3000:]
    assert f"resuming the run in {out_dir} from its checkpoint at step {last} (same settings)" in out
    assert f"discarding the interrupted save {interrupted[0]}" in out
    assert math.isfinite(_final_loss(out))
    assert f"restored step {last + 2} into plain Flax" in out
    assert saves_in_flight(out_dir) == [] and _complete_steps(out_dir) == [last + 1, last + 2]


def test_ctrl_c_stops_after_the_save_in_flight_and_exits_130(tmp_path):
    out_dir, log = tmp_path / "out", tmp_path / "demo.log"
    process = _start_demo(out_dir, log, "--steps", "400")
    wait_for_a_save_in_flight(process, out_dir, 2, _TIMEOUT, describe=lambda: log.read_text()[-3000:])
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(_TIMEOUT)
    finally:
        process.kill()
    out = re.sub(r"\s+", " ", log.read_text())
    assert code == 130, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert saves_in_flight(out_dir) == []  # the save that Ctrl-C interrupted was completed, not left half-written
    last = _complete_steps(out_dir)[-1]
    match = re.search(
        r"stopped by Ctrl-C at step (\d+); step (\d+) is saved: run the same command to resume from it", out
    )
    assert match, out[-3000:]
    assert int(match.group(2)) == last and int(match.group(1)) >= last >= 2
