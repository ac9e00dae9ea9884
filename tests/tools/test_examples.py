"""The example scripts run to completion (they assert their own round trips)."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run_example(name, *args):
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_seed_use_case_example():
    out = _run_example("seed_use_case.py")
    assert "canonical round trip: exact" in out
    losses = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("step ")]
    assert len(losses) == 5 and losses[-1] < losses[0]


def _numbers(line):
    return [float(token.rstrip(",)")) for token in line.replace("(", " ").split() if token[:1].isdigit()]


def test_tbptt_example_learns_and_streams_exactly():
    out = _run_example("tbptt.py", "--steps", "30", "--num-units", "32", "--batch-size", "8", "--window", "16")
    first, last = _numbers(next(line for line in out.splitlines() if line.startswith("loss: first")))
    assert last < first - 0.3, out
    streamed = next(line for line in out.splitlines() if line.startswith("streamed windows vs one call"))
    _, difference, without_carry = _numbers(streamed.split("over", 1)[1])
    assert difference < 1e-4 and without_carry > 1e-2, out


def test_rl_resets_example_matches_the_scan():
    out = _run_example("rl_resets.py", "--steps", "4", "--envs", "8", "--window", "16", "--num-layers", "2")
    check = next(line for line in out.splitlines() if line.startswith("fused resets vs step-by-step scan"))
    values, gradients, ignored = _numbers(check)
    assert values < 1e-4 and gradients < 1e-4 and ignored > 1e-2, out
    assert sum(line.startswith("window ") for line in out.splitlines()) == 4, out


def test_data_parallel_example_trains_on_two_processes_and_resumes_on_one(tmp_path):
    """examples/data_parallel.py, as docs/scaling.md tells to run it: 2 processes x 4 CPU devices on 127.0.0.1 train
    3 steps and checkpoint them; one process with 8 devices resumes from step 3 and trains on."""
    sys.path.insert(0, str(ROOT / "tests"))
    import multiprocess

    script, run = str(ROOT / "examples" / "data_parallel.py"), str(tmp_path / "run")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    coordinator = f"127.0.0.1:{multiprocess.free_port()}"
    outputs = multiprocess.run_commands(
        [
            [
                sys.executable,
                script,
                "--cpu-devices",
                "4",
                "--coordinator",
                coordinator,
                "--num-processes",
                "2",
                "--process-id",
                str(i),
                "--steps",
                "3",
                "--checkpoint-dir",
                run,
            ]
            for i in range(2)
        ],
        timeout=300,
        env=env,
    )
    losses = [[line.split()[-1] for line in out.splitlines() if " loss " in line] for out in outputs]
    assert len(losses[0]) == 3 and losses[0] == losses[1]  # both processes hold the same replicated loss
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["2", "3"]

    (output,) = multiprocess.run_commands(
        [[sys.executable, script, "--cpu-devices", "8", "--steps", "5", "--checkpoint-dir", run]], timeout=300, env=env
    )
    assert "process 0: resumed from step 3" in output
    resumed = [line for line in output.splitlines() if " loss " in line]
    assert [line.split()[3] for line in resumed] == ["4", "5"], output
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["4", "5"]
