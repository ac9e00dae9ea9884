"""Run by tests/core/test_side_effects.py in a fresh process: ``python side_effects_probe.py ORDER`` imports PyTorch
and this package in ``ORDER`` ("torch-alone", "torch-first", "package-first"), runs every implementation that can run
here (forward and gradient, from several Python threads at once), and prints one JSON line with what it saw of the
process-wide state before and after: the C-level environment, every OpenMP runtime mapped into the process and the
ICVs the calling thread sees there, PyTorch's thread counts and the process's thread count."""

import ctypes
import json
import os
import sys
import threading

import jax  # JAX's own import and backend start-up are not the package's to answer for
import jax.numpy as jnp

jax.block_until_ready(jnp.ones(4) + 1)

_OPENMP_NAMES = ("libgomp", "libiomp", "libomp")


def c_environment():
    """The process's environment as C code (libgomp, TBB, oneDNN) reads it, not os.environ's Python copy."""
    environ = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    entries, i = {}, 0
    while environ[i] is not None:
        key, _, value = environ[i].decode(errors="replace").partition("=")
        entries[key] = value
        i += 1
    return entries


def openmp_runtimes():
    """{path: the calling thread's ICVs} for every OpenMP runtime mapped into the process."""
    with open("/proc/self/maps") as maps:
        paths = sorted({line.split()[-1] for line in maps if any(n in line for n in _OPENMP_NAMES)})
    state = {}
    for path in paths:
        lib = ctypes.CDLL(path)
        state[path] = {
            "max_threads": lib.omp_get_max_threads(),
            "dynamic": lib.omp_get_dynamic(),
            "max_active_levels": lib.omp_get_max_active_levels(),
            "num_procs": lib.omp_get_num_procs(),
        }
    return state


def thread_names():
    """{thread id: name} of the process's threads, but XLA's compiler pool ("llvm-worker-N"), which XLA starts when it
    compiles any large enough function in parallel: JAX's, not the package's."""
    names = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names[tid] = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
    return {tid: name for tid, name in names.items() if not name.startswith("llvm-worker-")}


def torch_threads(torch):
    return {"num_threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads()}


def run_every_implementation():
    """Forward and gradient of each implementation rnn() can run here, and of the default, for LSTM and GRU at a
    small and a multi-threaded size; three Python threads at once, so that per-caller threads would show."""
    import jax_cudnn_rnn as jcr
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.backends.call import Call

    ran = set()
    jobs = []
    for mode in ("lstm", "gru"):
        for units, batch in ((16, 4), (64, 32)):
            cfg = jcr.RNNConfig(mode=mode, num_layers=1, num_units=units, input_size=units)
            names = [n for n in registry.names() if registry.why_not(n, "cpu", Call(cfg, 8, batch)) is None]
            for name in [None, *names]:
                jobs.append((cfg, batch, name))
                ran.add(name or "default")

    def job(cfg, batch, name):
        params = jcr.init_params(jax.random.key(0), cfg)
        x = jnp.ones((8, batch, cfg.input_size))
        h0 = jnp.zeros(cfg.state_shape(batch))
        c0 = h0 if cfg.mode == "lstm" else None
        loss = lambda p, x: jnp.sum(jcr.rnn(p, x, h0, c0, cfg, implementation=name)[0] ** 2)  # noqa: E731
        jax.block_until_ready(jax.jit(loss)(params, x))
        jax.block_until_ready(jax.jit(jax.grad(loss, argnums=(0, 1)))(params, x))

    errors = []

    def worker(part):
        try:
            for args in part:
                job(*args)
        except Exception as e:  # noqa: BLE001 - reported in the JSON
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(jobs[i::3],)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    from jax_cudnn_rnn import onednn

    return {"ran": sorted(ran), "errors": errors, "onednn_runtime": onednn.cpu_runtime()}


def main(order):
    report = {"order": order, "cpu_count": os.cpu_count()}
    torch = None
    if order in ("torch-alone", "torch-first"):
        import torch

        torch.ones(64, 64) @ torch.ones(64, 64)  # PyTorch's OpenMP team exists from here on
        report["torch_before"] = torch_threads(torch)
    env_before, omp_before, threads_before = c_environment(), openmp_runtimes(), thread_names()
    report["openmp_before"] = omp_before
    if order != "torch-alone":
        report["package"] = run_every_implementation()
        threads_after = thread_names()
        report["threads_added_by_package"] = sorted(threads_after[t] for t in set(threads_after) - set(threads_before))
        report["openmp_loaded_by_package"] = sorted(set(openmp_runtimes()) - set(omp_before))
    if order == "package-first":
        import torch

        torch.ones(64, 64) @ torch.ones(64, 64)
    env_after = c_environment()
    report["environment_changes"] = sorted(
        k for k in set(env_before) | set(env_after) if env_before.get(k) != env_after.get(k)
    )
    report["python_environment_changes"] = sorted(
        k for k in set(os.environ) | set(env_after) if os.environ.get(k) != env_after.get(k)
    )
    report["openmp_after"] = openmp_runtimes()
    if torch is not None or order == "package-first":
        report["torch_after"] = torch_threads(sys.modules["torch"])
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
