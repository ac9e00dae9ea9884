"""The example scripts run to completion (they assert their own round trips)."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_seed_use_case_example():
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "seed_use_case.py")], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "canonical round trip: exact" in result.stdout
    losses = [float(line.split()[-1]) for line in result.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 5 and losses[-1] < losses[0]


def _run_example(name, *args):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _numbers(line):
    return [float(token.rstrip(",)")) for token in line.replace("(", " ").split() if token[:1].isdigit()]


def test_tbptt_example_learns_and_streams_exactly():
    out = _run_example("tbptt.py", "--steps", "30", "--num-units", "32", "--batch-size", "8", "--window", "16")
    first, last = _numbers(next(line for line in out.splitlines() if line.startswith("loss: first")))
    assert last < first - 0.3, out
    streamed = next(line for line in out.splitlines() if line.startswith("streamed windows vs one call"))
    steps, difference, without_carry = _numbers(streamed.split("over", 1)[1])
    assert difference < 1e-4 and without_carry > 1e-2, out


def test_rl_resets_example_matches_the_scan():
    out = _run_example("rl_resets.py", "--steps", "4", "--envs", "8", "--window", "16", "--num-layers", "2")
    check = next(line for line in out.splitlines() if line.startswith("fused resets vs step-by-step scan"))
    values, gradients, ignored = _numbers(check)
    assert values < 1e-4 and gradients < 1e-4 and ignored > 1e-2, out
    assert sum(line.startswith("window ") for line in out.splitlines()) == 4, out
