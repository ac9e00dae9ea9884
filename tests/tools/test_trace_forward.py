"""benchmarks/trace_forward.py (issue 62 item 3, for the next GPU command) on the CPU: each (config, contender) traced
in a process of its own, the summary's shape, the raw traces archived. On the CPU there are no device lines; what the
traces say of a GPU is unverified until a device runs it."""

import importlib.util
import json
import os
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "trace_forward.py")
HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_each_forward_is_traced_in_a_process_of_its_own(tmp_path):
    summary, archive = tmp_path / "summary.json", tmp_path / "traces.tar.gz"
    contenders = "jcr-default" + (",torch" if HAS_TORCH else "")
    command = [sys.executable, SCRIPT, "--quick", "--configs", "F", "--contenders", contenders, "--calls", "3"]
    run = subprocess.run(
        [*command, "--summary", str(summary), "--archive", str(archive)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    data = json.loads(summary.read_text())
    assert data["failures"] == [] and data["machine"]["backend"] == "cpu"
    traces = {trace["contender"]: trace for trace in data["traces"]}
    assert set(traces) == set(contenders.split(","))
    for trace in traces.values():
        assert trace["config"] == "F" and trace["dtype"] == "float32" and trace["calls"] == 3
        assert trace["wall_us_per_call"] > 0 and trace["traced_wall_us_per_call"] > 0
        assert trace["device"] == {}  # no GPU here: no device lines
        assert trace["host"] and all(line["busy_us_per_call"] >= 0 for line in trace["host"].values())
    assert traces["jcr-default"]["notes"]["implementation"]
    if HAS_TORCH:
        events = {name for line in traces["torch"]["host"].values() for name, *_ in line["events"]}
        assert "aten::lstm" in events
    with tarfile.open(archive) as opened:
        names = opened.getnames()
    assert any(name.startswith("F-jcr-default/") and name.endswith(".xplane.pb") for name in names)
    assert not HAS_TORCH or "F-torch/torch.trace.json" in names
