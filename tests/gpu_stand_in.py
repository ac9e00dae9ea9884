"""A pytest plugin (``-p gpu_stand_in``, with tests/ on the path) that runs the tests marked ``gpu`` on the CPU with
cuDNN's kernels stood in for (tests/cudnn_stand_in.py: the reference implementation) instead of skipping them. It
proves nothing about cuDNN; it measures what a GPU selection costs around the kernels (tracing, compiling both
implementations, the comparisons), to size the device commands before a GPU is lent (lab/gpu-verification.md,
scripts/gpu_check.sh's ``first`` stage). Tests that need a real GPU (its devices, cuDNN's own answers) fail here."""

from __future__ import annotations

import pytest
from cudnn_stand_in import CudnnStandIn


def pytest_collection_finish(session):
    # tests/conftest.py skips a gpu test where cuDNN cannot run: here it can, stood in for.
    for plugin in session.config.pluginmanager.get_plugins():
        if getattr(plugin, "__name__", "") == "conftest" and hasattr(plugin, "cudnn_gpu_missing"):
            plugin.cudnn_gpu_missing = lambda: None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if item.get_closest_marker("gpu") is None:
        return (yield)
    with CudnnStandIn():
        return (yield)
