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
