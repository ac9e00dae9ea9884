"""Importing the package and running every implementation changes nothing process-wide: not the environment (as C
code reads it), not the OpenMP runtimes' settings, not PyTorch's thread counts, and it adds at most a pool of threads
the size of the machine. Each order of importing PyTorch and the package runs in a fresh process
(tests/core/side_effects_probe.py); PyTorch imported alone is the baseline.

The package once set OMP_WAIT_POLICY=PASSIVE when its oneDNN extension loaded, which slowed PyTorch's LSTM in the same
process 1.5x (issue 30): the environment checks here fail on that behaviour.
"""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import skips
from support import run_checked

from jax_cudnn_rnn import onednn

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "side_effects_probe.py")
# What the user's shell may have set for OpenMP or TBB: left out, so that each probe starts from the runtimes' defaults.
_RUNTIME_VARIABLES = ("OMP_", "GOMP_", "KMP_", "TBB_", "DNNL_", "ONEDNN_")


def _probe(order):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_RUNTIME_VARIABLES)}
    return json.loads(run_checked([sys.executable, PROBE, order], timeout=600, env=env).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def torch_alone():
    skips.import_or_skip("torch")
    return _probe("torch-alone")


def _check_package_run(report):
    package = report["package"]
    assert not package["errors"], package["errors"]
    expected = {"default", "xla", "reference"} | ({"onednn"} if onednn.extension_loaded() else set())
    assert expected <= set(package["ran"]), package["ran"]
    assert report["environment_changes"] == [], report["environment_changes"]
    assert report["python_environment_changes"] == [], report["python_environment_changes"]
    # A pool of at most one thread per CPU (TBB's workers, or the OpenMP team of an OpenMP build), not one per
    # calling thread.
    assert len(report["threads_added_by_package"]) <= report["cpu_count"] + 1, report["threads_added_by_package"]


def test_package_alone_changes_nothing_process_wide():
    report = _probe("package-only")
    _check_package_run(report)
    if report["package"]["onednn_runtime"] == "tbb":
        assert report["openmp_loaded_by_package"] == [], "the TBB build brought an OpenMP runtime"


def test_torch_imported_first_keeps_its_settings(torch_alone):
    report = _probe("torch-first")
    _check_package_run(report)
    assert report["torch_after"] == report["torch_before"] == torch_alone["torch_before"]
    assert report["openmp_after"] == report["openmp_before"] == torch_alone["openmp_before"]


def test_torch_imported_after_the_package_starts_as_if_alone(torch_alone):
    """libgomp reads OMP_WAIT_POLICY and its other variables once, when it loads: a package that set them before
    PyTorch's import changed PyTorch's OpenMP for the whole process."""
    report = _probe("package-first")
    _check_package_run(report)
    assert report["torch_after"] == torch_alone["torch_before"]
    assert report["openmp_after"] == torch_alone["openmp_before"]
