"""The CUDA device guard of the cuDNN extension's handle pool (cuda/scoped_device.h), on the CPU: a small C++ program
compiles the guard against a simulated CUDA driver and runtime (tests/cpp/scoped_device_test.cc) and checks what is
current during and after each scope: a thread that had no context has none afterwards and GPU 0's primary context is
never created, a previous context (primary or not) comes back exactly, the current device (-1) is resolved and held
under the same rule, and errors are returned. The real CUDA calls behind the guard (cuda/handle_pool.cc) need a GPU and
are not run here.

Skips without a C++ compiler, except where the run requires the cuDNN extension (JAX_CUDNN_RNN_REQUIRE_EXTENSION=1,
as in CI), which is built with one.
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skips import REQUIRE_EXTENSION, skip_or_fail

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_guard_restores_what_the_thread_had(tmp_path):
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not compiler:
        skip_or_fail("no C++ compiler to build tests/cpp/scoped_device_test.cc with", REQUIRE_EXTENSION)
    binary = tmp_path / "scoped_device_test"
    build = subprocess.run(
        [
            compiler,
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            os.path.join(ROOT, "cuda"),
            os.path.join(ROOT, "tests", "cpp", "scoped_device_test.cc"),
            "-o",
            str(binary),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0 and run.stdout.endswith("0 of 40 checks failed\n"), run.stdout + run.stderr


def test_the_handle_pool_uses_that_guard():
    """The guard tested above is the one the extension compiles (cuda/handle_pool.h), over the driver's calls."""
    with open(os.path.join(ROOT, "cuda", "handle_pool.h"), encoding="utf-8") as f:
        header = f.read()
    assert '#include "scoped_device.h"' in header and "BasicScopedDevice<CudaContextOps>" in header
    with open(os.path.join(ROOT, "cuda", "handle_pool.cc"), encoding="utf-8") as f:
        source = f.read()
    assert '"cuCtxGetCurrent"' in source and '"cuCtxSetCurrent"' in source


def test_the_modules_questions_hold_the_guard_before_borrowing_a_handle():
    """cuda/module.cc's trace-time questions (weight_params, temp_space_sizes) take the guard before they borrow a
    handle, for device -1 too, and borrow on the device the guard resolved: nothing they run (cudnnCreate, cudaMalloc,
    cuDNN's calls) is outside it. The pool refuses -1, so that no caller can borrow for "the current device" unguarded.
    Read from the sources: running them needs a GPU."""
    with open(os.path.join(ROOT, "cuda", "module.cc"), encoding="utf-8") as f:
        module = f.read()
    borrow = module[module.index("BorrowedHandle BorrowHandleOrThrow(") :]
    borrow = borrow[: borrow.index("\n}\n")]
    activate = borrow.index("ThrowIfError(scoped_device->Activate(device));")
    assert activate < borrow.index("BorrowForDevice(scoped_device->device(), &handle)")
    assert "if (device >= 0)" not in borrow
    for question in ("py::dict WeightParams(", "std::pair<size_t, size_t> TempSpaceSizes("):
        body = module[module.index(question) :]
        body = body[: body.index("\n}\n")]
        assert body.index("ScopedDevice scoped_device;") < body.index("BorrowHandleOrThrow("), question
    with open(os.path.join(ROOT, "cuda", "handle_pool.cc"), encoding="utf-8") as f:
        pool = f.read()
    for_device = pool[pool.index("HandlePool::BorrowForDevice(") :]
    for_device = for_device[: for_device.index("\n}\n")]
    assert "cudaGetDevice" not in for_device and "InvalidArgument" in for_device
