"""Loads the native oneDNN module ``jax_cudnn_rnn._onednn_rnn`` if it was built, and registers its FFI targets for
the CPU (``native_extension.NativeExtension``, as the cuDNN extension is loaded).

The extension is optional (the ``onednn`` extra: ``onednn-cpu-tbb``, ``tbb`` and ``intel-cmplr-lib-rt`` at run time;
``onednn-devel-cpu-tbb`` and ``tbb-devel`` to build): without it ``extension_loaded()`` is False,
``extension_error()`` says why, and nothing else changes. Loading it changes nothing process-wide either: no
environment variable, no OpenMP or TBB setting (onednn/threading.h), and its libraries are loaded RTLD_LOCAL, so that
no other library in the process binds to their symbols.
"""

from __future__ import annotations

from types import ModuleType

from jax_cudnn_rnn.backends import native_extension

# Targets are registered under these names for platform "cpu"; jax_cudnn_rnn/backends/onednn/kernels.py calls them.
WEIGHTS_TARGET = "jax_cudnn_rnn_onednn_weights"
FORWARD_TARGET = "jax_cudnn_rnn_onednn_forward"
BACKWARD_TARGET = "jax_cudnn_rnn_onednn_backward"
MATMUL_TARGET = "jax_cudnn_rnn_onednn_matmul"
PACK_TARGET = "jax_cudnn_rnn_onednn_matmul_pack"
PACKED_MATMUL_TARGET = "jax_cudnn_rnn_onednn_matmul_packed"
GEMM_FORWARD_TARGET = "jax_cudnn_rnn_onednn_gemm_forward"
GEMM_BACKWARD_TARGET = "jax_cudnn_rnn_onednn_gemm_backward"
# Every target kernels.py calls: what a loaded module must register (one lacking any is a stale build, refused at
# load) and what jax_cudnn_rnn.export lets through (tests/packaging/test_extension_declarations.py checks that every
# ffi_call of the package names one of these).
TARGETS = (
    WEIGHTS_TARGET,
    FORWARD_TARGET,
    BACKWARD_TARGET,
    MATMUL_TARGET,
    PACK_TARGET,
    PACKED_MATMUL_TARGET,
    GEMM_FORWARD_TARGET,
    GEMM_BACKWARD_TARGET,
)
BUILD_HINT = (
    'install the package with its `onednn` extra (`pip install ".[onednn]"`: the isolated build brings '
    "oneDNN's headers from the onednn-devel-cpu-tbb and tbb-devel wheels on Linux x86_64 with a C++17 "
    "compiler), or build it with `pip install --no-build-isolation -e .` in an environment with jax, "
    "pybind11, onednn-devel-cpu-tbb==2023.2.0 and tbb-devel==2021.13.1; JAX_CUDNN_RNN_ONEDNN=ON makes a "
    "missing oneDNN a build error instead of a skip"
)

EXTENSION = native_extension.NativeExtension(
    "jax_cudnn_rnn._onednn_rnn",
    "oneDNN extension",
    "cpu",
    BUILD_HINT,
    "JAX_CUDNN_RNN_ONEDNN",
    library=(
        "cannot open shared object file",
        "the extension needs oneDNN 3.2's libdnnl.so.3 on oneTBB (libtbb.so.12) with Intel's compiler runtime "
        '(libimf.so, libintlc.so.5): `pip install "jax-cudnn-rnn[onednn]"` brings them (onednn-cpu-tbb, tbb, '
        "intel-cmplr-lib-rt)",
    ),
    targets=TARGETS,
    # what kernels.py, this module, `jax-cudnn-rnn info` and the bench ask of it (the same test checks the package's
    # uses against this list)
    attributes=(
        "buffer_sizes",
        "matmul_packed_bytes",
        "matmul_implementation",
        "CPU_RUNTIME",
        "JAXLIB_BUILD_VERSION",
        "XLA_FFI_API_BUILD_VERSION",
        "effective_cpu_isa",
        "onednn_version",
        "release_scratch",
    ),
)

# The shared libraries loaded before the extension, per runtime wheel: (distribution, file name), in load order.
# The TBB wheel's libdnnl.so.3 has no RUNPATH: it finds oneTBB and Intel's compiler runtime (libimf, libintlc, which
# its wheel does not declare) only when they are already loaded.
PRELOADS = {
    "onednn-cpu-tbb": (
        ("tbb", "libtbb.so.12"),
        ("intel-cmplr-lib-rt", "libintlc.so.5"),
        ("intel-cmplr-lib-rt", "libimf.so"),
        ("onednn-cpu-tbb", "libdnnl.so.3"),
    ),
    "onednn-cpu-gomp": (("onednn-cpu-gomp", "libdnnl.so.3"),),
}


def runtime_wheel() -> str | None:
    """The wheel whose libdnnl.so.3 the extension was built against (CMake records it in _build_info.py), or None for
    a oneDNN that no wheel provides (DNNL_ROOT) or a source checkout that was never built."""
    return native_extension.build_record("ONEDNN_RUNTIME_WHEEL") or None


def _preload() -> str | None:
    """Loads the runtime wheel's libraries wherever pip put them (the module's RPATH covers a virtual environment's
    lib/; this covers --user and other prefixes), RTLD_LOCAL: the extension finds them by their sonames, and nothing
    else in the process binds to their symbols (RTLD_GLOBAL had put libdnnl's OpenMP into the global scope, where a
    PyTorch imported later bound its own OpenMP calls to it). Returns a note for an import error, or None."""
    for distribution, filename in PRELOADS.get(runtime_wheel() or "", ()):
        try:
            native_extension.preload(distribution, filename, global_scope=False)
        except OSError as e:
            return f"preloading {distribution}'s {filename} failed: {e}"
    return None


def cpu_runtime() -> str | None:
    """The CPU threading runtime of the loaded extension's oneDNN ("tbb" or "omp": onednn/threading.h), or None when
    the extension is not loaded."""
    return EXTENSION.module().CPU_RUNTIME if EXTENSION.loaded() else None


def effective_cpu_isa() -> str | None:
    """oneDNN's name for the instruction set its kernels use on this CPU ("avx2", "avx512_core",
    "avx512_core_bf16", ...: the CPU's own, capped where the user set ONEDNN_MAX_CPU_ISA), or None when the extension
    is not loaded. The CPU rule reads it (jax_cudnn_rnn/backends/onednn/cpu_rule.py)."""
    return EXTENSION.module().effective_cpu_isa() if EXTENSION.loaded() else None


def release_scratch() -> None:
    """Frees the temporary memory the oneDNN calls keep between calls (at most 4 buffers and 1 GiB together:
    onednn/scratch.h); the next call allocates afresh. Does nothing without the extension."""
    if EXTENSION.loaded():
        EXTENSION.module().release_scratch()


def extension_loaded() -> bool:
    """True when the oneDNN extension was imported and its FFI targets are registered for platform "cpu"."""
    return EXTENSION.loaded()


def extension_error() -> str | None:
    """Why the oneDNN extension is not loaded, or None when it is."""
    return EXTENSION.error()


def module() -> ModuleType:
    """The loaded native module; raises RuntimeError saying why it is not loaded and how to get it."""
    return EXTENSION.module()


EXTENSION.load(_preload)
