"""Loads the native cuDNN module ``jax_cudnn_rnn._cudnn_rnn`` if it was built, and registers its FFI targets
(``native_extension.NativeExtension``, shared with the oneDNN extension).

Importing this module never raises: when the extension is absent or broken, ``extension_loaded()`` is False and
``extension_error()`` says why, and the package runs its pure-JAX implementation.

The module links ``libcudnn.so.9``. Inside a virtual environment that library comes from the ``nvidia-cudnn-cu13``
wheel (``site-packages/nvidia/cudnn/lib``); the module's RPATH points there, and when that package is importable it
is also preloaded here (``RTLD_GLOBAL``), so no ``LD_LIBRARY_PATH`` is needed either way. The CUDA runtime is linked
statically, so importing needs no GPU and no ``libcudart.so``.

The module records what it was compiled against (cuDNN headers, the jaxlib whose XLA FFI headers it used).
Loading refuses a run-time cuDNN older than the build's headers (cuDNN is compatible with newer libraries of the same
major version only), and a running jaxlib whose XLA FFI API is older than the build's
(``native_extension.ffi_api_refusal``).
An isolated build (``pip install .``, the binary wheel) compiles against the oldest cuDNN and the oldest jaxlib the
package supports (pinned in pyproject.toml's build requirements), so it loads with every newer cuDNN 9 and jax; a
``--no-build-isolation`` build compiles against the environment's, which are then its floors.
"""

from __future__ import annotations

import importlib.metadata
from types import ModuleType
from typing import Any

from jax_cudnn_rnn.backends import native_extension

# Targets are registered under these names for platform "CUDA"; jax_cudnn_rnn/backends/cudnn/kernels.py calls them.
FORWARD_TARGET = "jax_cudnn_rnn_forward"
BACKWARD_DATA_TARGET = "jax_cudnn_rnn_backward_data"
BACKWARD_WEIGHTS_TARGET = "jax_cudnn_rnn_backward_weights"
# Every target kernels.py calls: what a loaded module must register and what jax_cudnn_rnn.export lets through.
TARGETS = (FORWARD_TARGET, BACKWARD_DATA_TARGET, BACKWARD_WEIGHTS_TARGET)

BUILD_HINT = (
    "build it with `pip install .` on Linux with a C++17 compiler (the isolated build brings cuDNN and the "
    "CUDA runtime headers from their wheels), or with `pip install --no-build-isolation -e .` in an "
    "environment with jax, pybind11, nvidia-cudnn-cu13 and the CUDA 13 runtime headers (a CUDA toolkit, "
    "or nvidia-cuda-runtime and nvidia-cuda-crt); JAX_CUDNN_RNN_CUDA=ON makes a missing dependency a build "
    "error instead of a skip"
)
EXTENSION = native_extension.NativeExtension(
    "jax_cudnn_rnn._cudnn_rnn",
    "cuDNN extension",
    "CUDA",
    BUILD_HINT,
    "JAX_CUDNN_RNN_CUDA",
    library=(
        "libcudnn",
        'the extension needs cuDNN 9\'s libcudnn.so.9: `pip install "jax-cudnn-rnn[cudnn]"` or '
        "`pip install nvidia-cudnn-cu13` brings it",
    ),
    targets=TARGETS,
    # what kernels.py and this module ask of it
    attributes=("cudnn_version", "CUDNN_BUILD_VERSION", "temp_space_sizes"),
)
_cudnn_path: str | None = None
# The cuDNN an isolated build compiles against (pyproject.toml's pin of nvidia-cudnn-cu13, the first cuDNN for CUDA 13),
# as cudnnGetVersion() reads it: the oldest run-time cuDNN such a build loads with.
CUDNN_FLOOR = 91200


def _preload() -> str | None:
    """Preloads the wheel's libcudnn; returns a note for an import error if that failed (the module's own RPATH may
    still find a libcudnn)."""
    global _cudnn_path
    try:
        _cudnn_path = native_extension.preload("nvidia-cudnn-cu13", "libcudnn.so.9")
    except OSError as e:
        return f"preloading nvidia-cudnn-cu13's libcudnn.so.9 failed: {e}"
    return None


def format_cudnn_version(version: int | None) -> str:
    """cuDNN's integer version (``CUDNN_VERSION``, ``cudnnGetVersion()``: major*10000 + minor*100 + patch for cuDNN 9)
    as "9.28.1"; "unknown" for None."""
    if version is None:
        return "unknown"
    return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def runtime_versions(native: ModuleType | None = None) -> dict[str, Any]:
    """What runs now: jax, jaxlib, their XLA FFI API version, and (given the native module) the cuDNN library."""
    return {
        "jax": _distribution_version("jax"),
        "jaxlib": _distribution_version("jaxlib"),
        "xla_ffi_api": native_extension.running_xla_ffi_api_version(),
        "cudnn": int(native.cudnn_version()) if native is not None else None,
    }


def build_versions(native: ModuleType) -> dict[str, Any]:
    """What ``native`` was compiled against; "unknown"/None for a module built before these were recorded."""
    ffi_api = getattr(native, "XLA_FFI_API_BUILD_VERSION", None)
    return {
        "jaxlib": getattr(native, "JAXLIB_BUILD_VERSION", "unknown"),
        "xla_ffi_api": tuple(ffi_api) if ffi_api is not None else None,
        "cudnn": int(native.CUDNN_BUILD_VERSION),
    }


def check_versions(
    build: dict[str, Any], runtime: dict[str, Any], cudnn_path: str | None = None
) -> tuple[str | None, str | None]:
    """Compares ``build_versions`` with ``runtime_versions``: (why the extension must not load, or None; a note on a
    mismatch it can live with, or None). The XLA FFI API versions are compared before this, for both extensions
    (``native_extension.ffi_api_refusal``)."""
    if runtime["cudnn"] is not None and runtime["cudnn"] < build["cudnn"]:
        where = f" ({cudnn_path})" if cudnn_path else ""
        # A --no-build-isolation build against a newer cuDNN than the one running: an isolated build would load.
        rebuild = (
            f", or reinstall the extension from an isolated build (`pip install .` or the binary wheel), which "
            f"compiles against cuDNN {format_cudnn_version(CUDNN_FLOOR)} and loads with any newer cuDNN 9"
            if runtime["cudnn"] >= CUDNN_FLOOR
            else ""
        )
        return (
            f"the cuDNN extension was built against cuDNN {format_cudnn_version(build['cudnn'])} but the cuDNN "
            f"library loaded at run time{where} is {format_cudnn_version(runtime['cudnn'])}, which is older and "
            f"may lack functions or fixes the extension uses; install a newer one with `pip install "
            f'"nvidia-cudnn-cu13>={format_cudnn_version(build["cudnn"])}"`{rebuild}'
        ), None
    return None, None


def _check(native: ModuleType) -> tuple[str | None, str | None]:
    """``check_versions`` for the imported module (``native_extension.NativeExtension.load``'s check)."""
    return check_versions(build_versions(native), runtime_versions(native), _cudnn_path)


def load() -> None:
    """(Re)loads the extension: imports it, checks its versions and registers its targets; never raises."""
    EXTENSION.load(_preload, _check)


def extension_loaded() -> bool:
    """True when the cuDNN extension was imported and all its FFI targets are registered for platform "CUDA"."""
    return EXTENSION.loaded()


def extension_error() -> str | None:
    """Why the extension is not loaded (not built and why, import error, a run-time cuDNN older than the build's,
    a running jaxlib older than the build's XLA FFI API, registration error), or None when it is loaded."""
    return EXTENSION.error()


def cudnn_library_path() -> str | None:
    """The libcudnn.so.9 preloaded from the nvidia-cudnn-cu13 wheel, or None (then the module's RPATH decides)."""
    return _cudnn_path


def cudnn_version() -> int | None:
    """The version of the libcudnn loaded at run time, as cudnnGetVersion() reads it (92801 for 9.28.1); None when the
    extension is not loaded. What the loaded library supports, bfloat16 RNNs among it, depends on this, not on the
    headers the extension was built against."""
    return int(EXTENSION.module().cudnn_version()) if extension_loaded() else None


def registered_targets() -> tuple[str, ...]:
    """Names of the FFI targets registered for platform "CUDA" (empty when the extension is not loaded)."""
    return EXTENSION.targets()


def module() -> ModuleType:
    """The loaded native module; raises RuntimeError with the reason and how to build it when it is not loaded."""
    return EXTENSION.module()


load()
