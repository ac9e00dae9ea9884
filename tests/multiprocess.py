"""Runs test functions in several JAX processes at once: ``jax.distributed`` on 127.0.0.1, CPU devices, gloo.

``Cluster(num_processes=2, local_devices=4)`` starts the worker processes once (this file, run as a script); each
calls ``jax.distributed.initialize`` (a free port on 127.0.0.1, ``jax_cpu_collectives_implementation="gloo"``,
``jax_num_cpu_devices=local_devices``) and then waits for work. ``cluster.run(fn, *args)`` runs ``fn(*args)`` in
every process at once, as a multi-controller JAX program does, and returns the results in process order. ``fn`` must
be a module-level function of a module that can be imported without touching JAX's backends (a test module is fine:
the worker imports it from its file); arguments and results travel pickled. With ``num_processes=1`` there is no
``jax.distributed``: one fresh process with ``local_devices`` CPU devices.

Every wait is bounded: a call that does not answer in time (a process stuck in a collective whose peer failed), a
process that dies, or an exception raised in any process kills every worker and raises ``ClusterError`` with each
process's traceback and the tail of its output; the next ``run`` starts fresh workers. Nothing hangs.

In a test module::

    @pytest.fixture(scope="module")
    def cluster():
        with multiprocess.Cluster() as running:
            yield running

    def _count_devices():                 # runs in every process
        return jax.device_count(), jax.process_index()

    def test_devices(cluster):
        assert cluster.run(_count_devices) == [(8, 0), (8, 1)]
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

START_TIMEOUT_S = 180
CALL_TIMEOUT_S = 300
# After one process fails, how long the others get to finish before every process is killed: a peer left waiting in a
# collective never returns on its own.
GRACE_S = 15
OUTPUT_TAIL = 3000


class ClusterError(RuntimeError):
    """A call failed in some process, timed out, or a process died; the message has every process's story."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a coordinator address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Worker:
    """One worker process: commands go down its stdin, pickled answers come up its stdout, everything it prints goes
    to a log file."""

    def __init__(self, index: int, argv: list[str], log_path: str, env: dict[str, str]):
        self.index, self.log_path = index, log_path
        with open(log_path, "wb") as log:  # the worker writes to its own copy of the descriptor
            self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env)
        self.commands = Connection(os.dup(self.process.stdin.fileno()), readable=False)
        self.answers = Connection(os.dup(self.process.stdout.fileno()), writable=False)

    def output(self) -> str:
        with open(self.log_path, "rb") as log:
            text = log.read().decode("utf-8", "replace")
        return text if len(text) <= OUTPUT_TAIL else "..." + text[-OUTPUT_TAIL:]

    def receive(self, deadline: float) -> tuple[str, Any]:
        """("ok", value), ("error", traceback text), ("died", exit code) or ("timeout", None)."""
        try:
            if not self.answers.poll(max(0.0, deadline - time.monotonic())):
                return "timeout", None
            return self.answers.recv()
        except (EOFError, OSError):
            try:
                return "died", self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                return "died", None

    def stop(self, kill: bool) -> None:
        if self.process.poll() is None:
            if kill:
                self.process.kill()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        for handle in (self.commands, self.answers, self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                handle.close()


class Cluster:
    """``num_processes`` JAX processes with ``local_devices`` CPU devices each; see the module docstring."""

    def __init__(
        self,
        num_processes: int = 2,
        local_devices: int = 4,
        start_timeout: float = START_TIMEOUT_S,
        grace: float = GRACE_S,
    ):
        self.num_processes, self.local_devices, self.start_timeout = num_processes, local_devices, start_timeout
        self.grace = grace
        self._workers: list[_Worker] = []
        self._logs: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        if self._logs is None:
            self._logs = tempfile.TemporaryDirectory(prefix="jax-cluster-")
        port = free_port()
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
        env.pop("XLA_FLAGS", None)  # a forced host device count there would override local_devices
        self._workers = [
            _Worker(
                i,
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    str(i),
                    str(self.num_processes),
                    str(self.local_devices),
                    str(port),
                    str(int(self.start_timeout)),
                ],
                os.path.join(self._logs.name, f"process{i}-{time.monotonic_ns()}.log"),
                env,
            )
            for i in range(self.num_processes)
        ]
        self._collect("start", time.monotonic() + self.start_timeout)

    def close(self) -> None:
        """Asks every process to leave ``jax.distributed`` and exit; kills those that do not within 30 s."""
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.commands.send(None)
        deadline = time.monotonic() + 30
        for worker in self._workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            worker.stop(kill=True)
        self._workers = []
        if self._logs is not None:
            self._logs.cleanup()
            self._logs = None

    # ------------------------------------------------------------------------------------------------ calls
    def run(self, fn: Callable[..., Any], *args: Any, timeout: float = CALL_TIMEOUT_S) -> list[Any]:
        """``fn(*args)`` in every process at once; the results in process order. Raises ClusterError (and kills the
        workers) if any process raises, dies or has not answered within ``timeout`` seconds."""
        if fn.__qualname__ != fn.__name__ or fn.__name__ == "<lambda>":
            raise ValueError(f"fn must be a module-level function; got {fn.__qualname__!r}")
        if not self._workers:
            self._start()
        path = inspect.getfile(fn)
        module = fn.__module__ if fn.__module__ != "__main__" else os.path.splitext(os.path.basename(path))[0]
        command = (module, path, fn.__name__, args)
        for worker in self._workers:
            with contextlib.suppress(OSError):  # a dead worker is reported by _collect
                worker.commands.send(command)
        return self._collect(fn.__name__, time.monotonic() + timeout)

    def _collect(self, what: str, deadline: float) -> list[Any]:
        answers: list[tuple[str, Any]] = [("timeout", None)] * len(self._workers)
        pending = set(range(len(self._workers)))
        while pending and time.monotonic() < deadline:
            for index in sorted(pending):
                status, value = self._workers[index].receive(min(deadline, time.monotonic() + 0.2))
                if status != "timeout":
                    answers[index] = (status, value)
                    pending.discard(index)
                    if status != "ok":  # the others may be stuck waiting for this one in a collective
                        deadline = min(deadline, time.monotonic() + self.grace)
        if all(status == "ok" for status, _ in answers):
            return [value for _, value in answers]
        report = [f"{what} failed in a cluster of {self.num_processes} process(es) x {self.local_devices} CPU devices"]
        for worker, (status, value) in zip(self._workers, answers, strict=True):
            worker.stop(kill=True)
            story = {
                "ok": "returned",
                "error": f"raised:\n{value}",
                "died": f"died with exit code {value}",
                "timeout": "did not answer in time (killed)",
            }[status]
            report.append(f"--- process {worker.index} {story}\n--- process {worker.index} output:\n{worker.output()}")
        self._workers = []
        raise ClusterError("\n".join(report))


def run_commands(
    commands: list[list[str]],
    timeout: float = CALL_TIMEOUT_S,
    grace: float = GRACE_S,
    env: dict[str, str] | None = None,
) -> list[str]:
    """Runs ``commands`` (argv lists, e.g. the processes of one multi-process program) at once and returns each one's
    output (stdout and stderr together). Raises ClusterError with every output, after killing them all, if one exits
    with an error (the others get ``grace`` seconds to finish) or they have not all finished within ``timeout``."""
    with tempfile.TemporaryDirectory(prefix="jax-commands-") as logs, contextlib.ExitStack() as files:
        outputs = [
            files.enter_context(open(os.path.join(logs, f"command{i}.log"), "wb+")) for i in range(len(commands))
        ]
        processes = [
            subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
            for argv, out in zip(commands, outputs, strict=True)
        ]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(p.poll() is None for p in processes):
            if any(p.poll() not in (None, 0) for p in processes):
                deadline = min(deadline, time.monotonic() + grace)
            time.sleep(0.2)
        codes = []
        for process in processes:
            if process.poll() is None:
                process.kill()
            codes.append(process.wait(timeout=30) if process.returncode is None else process.returncode)
        texts = []
        for out in outputs:
            out.seek(0)
            texts.append(out.read().decode("utf-8", "replace"))
    if all(code == 0 for code in codes):
        return texts
    report = [f"{len(commands)} command(s) did not all succeed within {timeout} s"]
    for argv, code, text in zip(commands, codes, texts, strict=True):
        report.append(
            f"--- {' '.join(argv)}\n--- exit code {code} (-9: killed); output:\n"
            f"{text if len(text) <= OUTPUT_TAIL else '...' + text[-OUTPUT_TAIL:]}"
        )
    raise ClusterError("\n".join(report))


# ---------------------------------------------------------------------------------------------------- worker side
def global_array(value: Any, sharding: Any) -> Any:
    """A global ``jax.Array`` on ``sharding`` from ``value``, the whole array, which every process holds (each puts
    only its own devices' shards)."""
    import jax
    import numpy as np

    value = np.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def local_copy(array: Any) -> Any:
    """A fully replicated global array as a NumPy array (from this process's first shard)."""
    import numpy as np

    if not array.sharding.is_fully_replicated:
        raise ValueError(f"local_copy needs a fully replicated array; this one is on {array.sharding}")
    return np.asarray(array.addressable_data(0))


def _load(module: str, path: str):
    if module not in sys.modules:
        spec = importlib.util.spec_from_file_location(module, path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[module] = loaded
        spec.loader.exec_module(loaded)
    return sys.modules[module]


def _serve(index: int, num_processes: int, local_devices: int, port: int, start_timeout: int) -> None:
    answers = Connection(os.dup(1), readable=False)
    commands = Connection(os.dup(0), writable=False)
    os.dup2(2, 1)  # what the code under test prints goes to the log, not into the answers

    def answer(status: str, value: Any) -> None:
        try:
            answers.send((status, value))
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            answers.send(("error", f"the result could not be pickled: {type(e).__name__}: {e}"))

    try:
        import jax

        jax.config.update("jax_num_cpu_devices", local_devices)
        if num_processes > 1:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(
                f"127.0.0.1:{port}",
                num_processes,
                index,
                initialization_timeout=start_timeout,
                heartbeat_timeout_seconds=60,
                shutdown_timeout_seconds=30,
            )
        answer("ok", (jax.process_index(), jax.device_count()))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        answer("error", traceback.format_exc())
        return
    while True:
        try:
            command = commands.recv()
        except EOFError:
            break
        if command is None:
            break
        module, path, name, args = command
        try:
            answer("ok", getattr(_load(module, path), name)(*args))
        except BaseException:  # noqa: BLE001 - reported to the parent, which raises
            answer("error", traceback.format_exc())
    if num_processes > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    _serve(*(int(argument) for argument in sys.argv[1:6]))
