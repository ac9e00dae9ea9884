"""No device or host memory growth across thousands of cuDNN calls with changing shapes (descriptors, handles,
host-read lengths). Runs benchmarks/leak_check.py in a fresh process; marked ``gpu``."""

import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # tests/conftest.py: skips without cuDNN and a GPU

SCRIPT = pathlib.Path(__file__).parents[2] / "benchmarks" / "leak_check.py"


def test_cudnn_calls_do_not_grow_memory():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--calls", "3000", "--implementation", "cudnn"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    host = re.search(r"resident memory: .* \(\+([-\d.]+)\)", result.stdout)
    device = re.search(r"device memory in use: .* \(\+([-\d.]+)\)", result.stdout)
    assert host and device, result.stdout
    assert float(host.group(1)) < 16.0, result.stdout  # JAX's own caches settle during warm-up
    assert float(device.group(1)) < 1.0, result.stdout
