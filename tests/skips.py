"""Skips that a run can forbid. A test skips when something it needs is missing (an optional peer library, the cuDNN
extension, a GPU), unless the run says it provides that thing; then the missing piece fails the test instead, so that
a broken install cannot pass as a run of skips. Imports nothing from the package (test_numpy_reference_vs_torch uses
it next to the independent oracle).

Flags (environment, "1" to set):
- ``JAX_CUDNN_RNN_REQUIRE_PEERS``: the peer libraries of the test extra and of the README's test command (torch,
  keras, equinox; sphinx and myst-parser for the docs build) must import. Set by .ci/run.
- ``JAX_CUDNN_RNN_REQUIRE_EXTENSION``: the cuDNN extension must be built and loaded (tests marked ``gpu`` still skip
  without a GPU). Set by .ci/run and scripts/gpu_check.sh.
- ``JAX_CUDNN_RNN_REQUIRE_ONEDNN``: the oneDNN extension must be built and loaded. Set by .ci/run.
- ``JAX_CUDNN_RNN_REQUIRE_GPU``: a CUDA device must be there for the tests marked ``gpu``, and PyTorch must see it for
  the GPU peer comparisons. Set by scripts/gpu_check.sh.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

import pytest

REQUIRE_PEERS = "JAX_CUDNN_RNN_REQUIRE_PEERS"
REQUIRE_EXTENSION = "JAX_CUDNN_RNN_REQUIRE_EXTENSION"
REQUIRE_ONEDNN = "JAX_CUDNN_RNN_REQUIRE_ONEDNN"
REQUIRE_GPU = "JAX_CUDNN_RNN_REQUIRE_GPU"


def required(flag: str) -> bool:
    """Whether the run sets ``flag`` (one of the names above) to "1"."""
    return os.environ.get(flag) == "1"


def skip_or_fail(reason: str, flag: str, allow_module_level: bool = False) -> None:
    """Skips with ``reason``, or fails when the run sets ``flag``: what is missing was promised."""
    if required(flag):
        pytest.fail(f"{flag}=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=allow_module_level)


def import_or_skip(name: str, flag: str = REQUIRE_PEERS) -> ModuleType:
    """The module ``name``; skips the calling test (module) when the package is not installed, fails instead under
    ``flag``, and lets an installed package that fails to import fail the run (a skip would hide the breakage)."""
    if importlib.util.find_spec(name) is None:
        skip_or_fail(f"{name} is not installed", flag, allow_module_level=True)
    return importlib.import_module(name)
