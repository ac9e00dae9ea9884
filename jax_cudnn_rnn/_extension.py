"""Loads the native cuDNN module ``jax_cudnn_rnn._cudnn_rnn`` if it was built, and registers its FFI targets
(``_native.NativeExtension``, shared with the oneDNN extension).

Importing this module never raises: when the extension is absent or broken, ``extension_loaded()`` is False and
``extension_error()`` says why, and the package runs its pure-JAX implementation.

The module links ``libcudnn.so.9``. Inside a virtual environment that library comes from the ``nvidia-cudnn-cu13``
wheel (``site-packages/nvidia/cudnn/lib``); the module's RPATH points there, and when that package is importable it
is also preloaded here (``RTLD_GLOBAL``), so no ``LD_LIBRARY_PATH`` is needed either way. The CUDA runtime is linked
statically, so importing needs no GPU and no ``libcudart.so``.
"""

from __future__ import annotations

import ctypes
import os
from types import ModuleType

from jax_cudnn_rnn import _native

# Targets are registered under these names for platform "CUDA"; jax_cudnn_rnn/cudnn.py calls them.
FORWARD_TARGET = "jax_cudnn_rnn_forward"
BACKWARD_DATA_TARGET = "jax_cudnn_rnn_backward_data"
BACKWARD_WEIGHTS_TARGET = "jax_cudnn_rnn_backward_weights"

BUILD_HINT = ("build it with `pip install --no-build-isolation -e .` (or `pip install .`) in an environment with the "
              "CUDA 13 toolkit and nvidia-cudnn-cu13 installed; JAX_CUDNN_RNN_CUDA=ON makes a missing dependency "
              "a build error instead of a silent skip")
EXTENSION = _native.NativeExtension("jax_cudnn_rnn._cudnn_rnn", "cuDNN extension", "CUDA", BUILD_HINT)


def _preload_cudnn() -> str | None:
    """Loads the wheel's libcudnn.so.9 globally if the wheel is installed; returns the path loaded, else None."""
    try:
        import nvidia.cudnn
    except ImportError:
        return None
    for directory in nvidia.cudnn.__path__:
        path = os.path.join(directory, "lib", "libcudnn.so.9")
        if os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return path
    return None


def _preload() -> str | None:
    """Preloads the wheel's libcudnn; returns a note for an import error if that failed (the module's own RPATH may
    still find a libcudnn)."""
    try:
        _preload_cudnn()
    except OSError as e:
        return f"preloading nvidia-cudnn-cu13's libcudnn.so.9 failed: {e}"
    return None


def extension_loaded() -> bool:
    """True when the cuDNN extension was imported and all its FFI targets are registered for platform "CUDA"."""
    return EXTENSION.loaded()


def extension_error() -> str | None:
    """Why the extension is not loaded (not built, import error, registration error), or None when it is."""
    return EXTENSION.error()


def registered_targets() -> tuple[str, ...]:
    """Names of the FFI targets registered for platform "CUDA" (empty when the extension is not loaded)."""
    return EXTENSION.targets()


def module() -> ModuleType:
    """The loaded native module; raises RuntimeError with the reason and how to build it when it is not loaded."""
    return EXTENSION.module()


EXTENSION.load(_preload)
