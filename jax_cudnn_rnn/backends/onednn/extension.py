"""Loads the native oneDNN module ``jax_cudnn_rnn._onednn_rnn`` if it was built, and registers its FFI targets for
the CPU (``loader.NativeExtension``, as the cuDNN extension is loaded).

The extension is optional (the ``onednn`` extra: the ``onednn-cpu-gomp`` wheel at run time, ``onednn-devel-cpu-gomp``
to build): without it ``extension_loaded()`` is False, ``extension_error()`` says why, and nothing else changes.
"""

from __future__ import annotations

import os
from types import ModuleType

from jax_cudnn_rnn.backends.fused import loader

# Targets are registered under these names for platform "cpu"; jax_cudnn_rnn/backends/onednn/kernels.py calls them.
FORWARD_TARGET = "jax_cudnn_rnn_onednn_forward"
BACKWARD_TARGET = "jax_cudnn_rnn_onednn_backward"
RUNTIME_DISTRIBUTION = "onednn-cpu-gomp"
BUILD_HINT = ("install the package with its `onednn` extra (`pip install \".[onednn]\"`: the isolated build brings "
              "oneDNN's headers from the onednn-devel-cpu-gomp wheel on Linux x86_64 with a C++17 compiler), or build "
              "it with `pip install --no-build-isolation -e .` in an environment with jax, pybind11 and "
              "onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0; JAX_CUDNN_RNN_ONEDNN=ON makes a missing "
              "oneDNN a build error instead of a skip")

EXTENSION = loader.NativeExtension(
    "jax_cudnn_rnn._onednn_rnn", "oneDNN extension", "cpu", BUILD_HINT, "JAX_CUDNN_RNN_ONEDNN",
    library=("libdnnl", "the extension needs oneDNN 3.2's libdnnl.so.3: `pip install \"jax-cudnn-rnn[onednn]\"` or "
                        "`pip install onednn-cpu-gomp==2023.2.0` brings it"))
_wait_policy = "not set: libgomp not loaded by this package"


def _libgomp_loaded() -> bool:
    with open("/proc/self/maps") as maps:
        return any("libgomp" in line for line in maps)


def _choose_wait_policy() -> None:
    """Makes GNU OpenMP's idle threads sleep instead of spin (OMP_WAIT_POLICY=PASSIVE), unless the user chose a
    policy or libgomp is already loaded (then its setting stands: libgomp reads it once, when it loads).

    Why: oneDNN's threads are an OpenMP team and XLA's are not. A spinning OpenMP worker keeps a core busy for
    milliseconds after each parallel region (300,000 spins by default), while XLA's threads run the ops between the
    RNN calls; on a machine with few cores, or one shared with other processes, the two fight for the cores. Measured on
    this project's 2-core machine under load (LSTM T100 B32 H256 float32, forward): 222-302 ms of CPU per call spinning,
    27-31 ms passive, and the wall time 3x lower passive. The setting is process-wide: it also applies to PyTorch when
    both are loaded (they share libgomp). Set OMP_WAIT_POLICY=ACTIVE before importing to keep spinning."""
    global _wait_policy
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        _wait_policy = "set by the user: " + ", ".join(
            f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ)
    elif _libgomp_loaded():
        _wait_policy = "libgomp's default (spin): it was loaded before jax_cudnn_rnn, e.g. by PyTorch"
    else:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        _wait_policy = "PASSIVE, set by jax_cudnn_rnn"


def openmp_wait_policy() -> str:
    """How oneDNN's OpenMP threads wait between parallel regions in this process, and who decided it."""
    return _wait_policy

def _before_import() -> None:
    _choose_wait_policy()
    loader.preload(RUNTIME_DISTRIBUTION, "libdnnl.so.3")



def extension_loaded() -> bool:
    """True when the oneDNN extension was imported and its FFI targets are registered for platform "cpu"."""
    return EXTENSION.loaded()


def extension_error() -> str | None:
    """Why the oneDNN extension is not loaded, or None when it is."""
    return EXTENSION.error()


def module() -> ModuleType:
    """The loaded native module; raises RuntimeError saying why it is not loaded and how to get it."""
    return EXTENSION.module()


EXTENSION.load(_before_import)
