"""Where a forward's time goes (issue 62 item 3: our float32 forward trailed PyTorch's 1.08-1.13x at configs A and F
on an H200): each contender's forward traced over a few calls, ours with the JAX profiler, PyTorch's with its own,
and summarised as the kernels each call runs, their count and time, against the call's wall time.

Each (config, contender) runs in a process of its own, as the bench's contenders do, warmed up for at least 0.25 s (a
GPU that idled while the step compiled clocks up again), then ``--calls`` forwards under the profiler, in strict
float32 for both frameworks (``jax.default_matmul_precision("float32")``, PyTorch's ``allow_tf32`` off). The summary
(``--summary``, JSON) lists per trace: the median wall time per call, untraced and traced, and per device line of the
trace (a GPU stream) every event name with its count and time per call, largest first; on a machine without a GPU
only the host's lines exist (what this script's CPU test sees). The raw traces (JAX's ``.xplane.pb``, PyTorch's
Chrome JSON) go into one gzipped tarball (``--archive``), for TensorBoard or Perfetto.

    python benchmarks/trace_forward.py [--configs A,F] [--contenders jcr-cudnn,torch] [--calls 10] [--quick]
                                       --summary trace-summary.json [--archive traces.tar.gz]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from typing import Any

from jax_cudnn_rnn.tools.bench import contenders as C

TOP = 12  # events kept per line, largest total first


def _warm(forward: Callable[[], object], seconds: float = 0.25) -> None:
    forward()  # compiles
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        forward()


def _timed(forward: Callable[[], object], calls: int) -> float:
    """The median wall time of ``calls`` forwards, in microseconds (each blocks on its result)."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        forward()
        times.append(time.perf_counter() - start)
    return round(1e6 * statistics.median(times), 2)


def _lines_summary(lines: dict[str, dict[str, list[float]]], calls: int) -> dict[str, Any]:
    """{line: {"events": [[name, count per call, microseconds per call], ...], "busy_us_per_call"}} from
    {line: {event name: [durations in microseconds]}}, each line's ``TOP`` largest."""
    summary = {}
    for line, events in lines.items():
        ranked = sorted(events.items(), key=lambda item: -sum(item[1]))
        summary[line] = {
            "busy_us_per_call": round(sum(sum(d) for d in events.values()) / calls, 2),
            "events": [[name, round(len(d) / calls, 3), round(sum(d) / calls, 2)] for name, d in ranked[:TOP]],
        }
    return summary


def _trace_jax(forward: Callable[[], object], calls: int, folder: str) -> dict[str, Any]:
    import jax

    with jax.profiler.trace(folder):
        wall = _timed(forward, calls)
    (path,) = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
    data = jax.profiler.ProfileData.from_file(path)
    device, host = {}, {}
    for plane in data.planes:
        on_device = plane.name.startswith("/device:")
        for line in plane.lines:
            events: dict[str, list[float]] = {}
            for event in line.events:
                events.setdefault(event.name, []).append(event.duration_ns / 1e3)
            if events:
                (device if on_device else host)[f"{plane.name} {line.name}"] = events
    return {"traced_us_per_call": wall, "device": device, "host": host}


def _trace_torch(forward: Callable[[], object], calls: int, folder: str) -> dict[str, Any]:
    import torch
    from torch.autograd import DeviceType

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profile:
        wall = _timed(forward, calls)
    profile.export_chrome_trace(os.path.join(folder, "torch.trace.json"))
    device, host = {}, {}
    for event in profile.events():
        where = device if event.device_type == DeviceType.CUDA else host
        line = f"{event.device_type.name.lower()} {event.device_index if where is device else 'ops'}"
        where.setdefault(line, {}).setdefault(event.name, []).append(event.time_range.elapsed_us())
    return {"traced_us_per_call": wall, "device": device, "host": host}


def worker(config: str, contender: str, dtype: str, calls: int, quick: bool, folder: str) -> dict[str, Any]:
    """One trace in this process: ``contender``'s forward on ``config`` in ``dtype``."""
    bc = C.CONFIGS[config].shrunk() if quick else C.CONFIGS[config]
    chosen = C.contender(contender)
    if chosen.framework == "torch":
        C.set_torch_precision("float32")
        runner = chosen.build(bc, dtype)
        _warm(runner.forward)
        untraced = _timed(runner.forward, calls)
        traced = _trace_torch(runner.forward, calls, folder)
    else:
        import jax

        with jax.default_matmul_precision("float32"):
            runner = chosen.build(bc, dtype)
            _warm(runner.forward)
            untraced = _timed(runner.forward, calls)
            traced = _trace_jax(runner.forward, calls, folder)
    return {
        "config": config,
        "contender": contender,
        "dtype": dtype,
        "calls": calls,
        "notes": runner.notes,
        "wall_us_per_call": untraced,
        "traced_wall_us_per_call": traced["traced_us_per_call"],
        "device": _lines_summary(traced["device"], calls),
        "host": _lines_summary(traced["host"], calls),
    }


def _machine() -> dict[str, Any]:
    import jax

    device = jax.devices()[0]
    return {"jax": jax.__version__, "backend": jax.default_backend(), "device_kind": device.device_kind}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="A,F")
    parser.add_argument("--contenders", default="jcr-cudnn,torch")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="the configs shrunk (the bench's --quick sizes)")
    parser.add_argument("--summary", required=True, help="write the summary (JSON) here")
    parser.add_argument("--archive", help="write the raw traces here as a gzipped tarball")
    parser.add_argument("--worker", nargs=2, metavar=("CONFIG", "CONTENDER"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        result = worker(*args.worker, args.dtype, args.calls, args.quick, args.folder)
        with open(args.summary, "w", encoding="utf-8") as f:
            json.dump(result, f)
        return 0
    traces, failures = [], []
    with tempfile.TemporaryDirectory(prefix="trace-forward-") as root:
        for config in args.configs.split(","):
            for contender in args.contenders.split(","):
                folder = os.path.join(root, f"{config}-{contender}")
                os.makedirs(folder)
                out = os.path.join(root, f"{config}-{contender}.json")
                command = [sys.executable, os.path.abspath(__file__), "--worker", config, contender]
                command += ["--dtype", args.dtype, "--calls", str(args.calls), "--summary", out, "--folder", folder]
                run = subprocess.run(command + (["--quick"] if args.quick else []), capture_output=True, text=True)
                if run.returncode == 0:
                    with open(out, encoding="utf-8") as f:
                        traces.append(json.load(f))
                    print(f"{config} {contender}: {traces[-1]['wall_us_per_call']:.1f} us per forward", flush=True)
                else:
                    failures.append({"config": config, "contender": contender, "error": run.stderr[-2000:]})
                    print(f"{config} {contender}: failed\n{run.stderr[-2000:]}", flush=True)
        if args.archive:
            with tarfile.open(args.archive, "w:gz") as archive:
                for config in args.configs.split(","):
                    for contender in args.contenders.split(","):
                        archive.add(os.path.join(root, f"{config}-{contender}"), f"{config}-{contender}")
    with open(args.summary, "w", encoding="utf-8") as f:
        json.dump({"machine": _machine(), "traces": traces, "failures": failures}, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
