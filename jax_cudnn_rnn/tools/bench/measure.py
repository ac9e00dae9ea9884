"""How ``jax-cudnn-rnn bench`` runs its contenders: the timing, each contender in a process of its own (the default)
or all in this one (``--same-process``), and the neighbour ratio.

A process of its own per (config, dtype, contender) keeps one contender's threads and settings from touching
another's: in one process, an OpenMP setting this package once made for the whole process slowed PyTorch's column by
1.5x (issue 30). The worker is this file run by path (``python .../measure.py --worker``, the job as JSON on stdin, the
result as JSON on stdout's last line); it loads contenders.py beside it without importing this package, so that
PyTorch's and Flax's workers hold nothing of it.

The neighbour ratio is PyTorch's LSTM forward in a process that first imported this package and ran ``rnn()`` with
every implementation available, over the same in a fresh process alone: what this package costs a PyTorch user in the
same process.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

if __package__:
    from jax_cudnn_rnn.tools.bench import contenders as C
else:  # run by path as a worker: contenders.py beside it, and this package stays unimported
    # This folder by name: Python puts a script's folder first on sys.path only without PYTHONSAFEPATH (or -P), which
    # the worker inherits from whoever ran the bench (scripts/gpu_check.sh sets it).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import contenders as C  # type: ignore[no-redef]


@dataclasses.dataclass(frozen=True)
class Timing:
    """How each measurement is timed: the median of ``repeats`` runs after at least ``warmup`` untimed runs and at
    least ``warmup_seconds`` of them (``median_seconds``)."""

    repeats: int
    warmup: int
    warmup_seconds: float = 0.0


def describe_timing(timing: Timing) -> str:
    """E.g. "median of 20 timed runs, after 3 warm-up runs lasting at least 0.25 s"."""
    plural = "s" if timing.warmup != 1 else ""
    warmup = f"{timing.warmup} warm-up run{plural}" if timing.warmup else "no warm-up run"
    if timing.warmup_seconds > 0:
        warmup += f" lasting at least {timing.warmup_seconds:g} s"
    return f"median of {timing.repeats} timed run{'s' if timing.repeats != 1 else ''}, after {warmup}"


DEFAULT_TIMING = Timing(repeats=20, warmup=3, warmup_seconds=0.25)
QUICK_TIMING = Timing(repeats=3, warmup=1, warmup_seconds=0.0)


def _timed_runs(run: Callable[[], object], timing: Timing) -> list[float]:
    """Wall times of ``run()`` (which blocks on its result) in seconds over ``timing.repeats`` runs, after
    ``timing.warmup`` runs and then more until ``timing.warmup_seconds`` have passed since the first one returned
    (that one may compile; a GPU left idle meanwhile clocks down and needs sustained work to clock up again)."""
    calls, started = 0, None
    while calls < timing.warmup or (
        timing.warmup_seconds > 0 and (started is None or time.perf_counter() - started < timing.warmup_seconds)
    ):
        run()
        calls += 1
        started = time.perf_counter() if started is None else started
    times = []
    for _ in range(timing.repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(run: Callable[[], object], timing: Timing) -> float:
    """Median wall time of ``run()`` in seconds (``_timed_runs``)."""
    return statistics.median(_timed_runs(run, timing))


def fastest_seconds(run: Callable[[], object], timing: Timing) -> float:
    """Fastest wall time of ``run()`` in seconds (``_timed_runs``): a peak's measure."""
    return min(_timed_runs(run, timing))


def loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (Linux), or None."""
    try:
        with open("/proc/loadavg") as f:
            return [float(v) for v in f.read().split()[:3]]
    except OSError:
        return None


def process_facts() -> dict[str, Any]:
    """The running process's threads, PyTorch's thread counts where PyTorch is imported, whether this package is
    imported, and the load average."""
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None
    facts: dict[str, Any] = {
        "pid": os.getpid(),
        "threads": threads,
        "package_imported": C.PACKAGE in sys.modules,
        "loadavg": loadavg(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        facts["torch_num_threads"] = torch.get_num_threads()
        facts["torch_num_interop_threads"] = torch.get_num_interop_threads()
    return facts


# ------------------------------------------------------------------------------------------------ measuring


@dataclasses.dataclass
class Results:
    records: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    skipped: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    errors: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    neighbour: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def measure(runner: C.Runner, measurement: str, timing: Timing) -> dict[str, Any]:
    """ms (median), peak_bytes, op_bytes and compiled_bytes of one measurement."""
    fn = runner.forward if measurement == C.FWD else runner.train
    runner.reset_peak()
    before = runner.allocated_bytes()
    ms = 1e3 * median_seconds(fn, timing)
    peak = runner.peak_bytes()
    op = peak - before if peak is not None and before is not None else runner.op_bytes.get(measurement)
    return {"ms": ms, "peak_bytes": peak, "op_bytes": op, "compiled_bytes": runner.compiled_bytes.get(measurement)}


def run_one(contender: C.Contender, bc: C.BenchConfig, dtype: str, timing: Timing) -> list[dict[str, Any]]:
    """Times ``contender`` on ``bc`` in ``dtype`` in this process: one record per measurement (ratios filled in
    later), with the load average when it started and what the runner noted (e.g. the implementation picked)."""
    runner = contender.build(bc, dtype)
    records = []
    for measurement in C.MEASUREMENTS:
        if measurement == C.TRAIN and runner.train is None:
            continue
        start_load = loadavg()
        records.append(
            {
                "config": bc.name,
                "dtype": dtype,
                "contender": contender.name,
                "measurement": measurement,
                **measure(runner, measurement, timing),
                "gflop": bc.gemm_flops(measurement) / 1e9,
                "loadavg_1min": start_load[0] if start_load else None,
                **runner.notes,
            }
        )
    return records


def _outcome(contender: C.Contender, bc: C.BenchConfig, dtype: str, timing: Timing) -> dict[str, Any]:
    """``run_one`` as {"records": [...]}, or {"skip": reason} for a failed peer, or {"error": text} for ours."""
    try:
        return {"records": run_one(contender, bc, dtype, timing)}
    except Exception as e:  # noqa: BLE001 - one failing contender must not stop the others
        return {"error": C.short(e)} if contender.ours else {"skip": f"failed: {C.short(e)}"}


def _in_worker(job: dict[str, Any], timeout: float = 900, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs ``job`` in a fresh Python process (this file as a worker, with ``env`` added to this process's environment)
    and returns its result; a worker still running after ``timeout`` seconds is killed and reported as an error."""
    try:
        worker = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker"],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=None if env is None else {**os.environ, **env},
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the worker process was stopped after {timeout:.0f} s"}
    lines = worker.stdout.strip().splitlines()
    if worker.returncode != 0 or not lines:
        tail = (worker.stderr or worker.stdout).strip().splitlines()[-3:]
        return {"error": f"the worker process exited with {worker.returncode}: {' | '.join(tail)[-600:]}"}
    return json.loads(lines[-1])


def _contender_job(
    contender: C.Contender, bc: C.BenchConfig, dtype: str, timing: Timing, precision: str
) -> dict[str, Any]:
    return {
        "kind": "contender",
        "contender": contender.name,
        "config": dataclasses.asdict(bc),
        "dtype": dtype,
        "timing": dataclasses.asdict(timing),
        "precision": precision,
    }


def _with_precision(precision: str, contender: C.Contender, fn: Callable[[], Any]) -> Any:
    """``fn()`` under this float32 matmul precision for every contender that has the knob (JAX's
    default_matmul_precision, which rnn()'s precision=None follows; PyTorch's allow_tf32 flags)."""
    if contender.framework == "torch":
        C.set_torch_precision(precision)
        return fn()
    import jax

    with jax.default_matmul_precision(precision):
        return fn()


def run_guarded(
    results: Results,
    log: Callable[[str, str], None],
    contender: C.Contender,
    bc: C.BenchConfig,
    dtype: str,
    timing: Timing,
    isolated: bool,
    precision: str,
    timeout: float = 900,
    env: dict[str, str] | None = None,
) -> None:
    """Times ``contender`` (in a worker process when ``isolated``, stopped after ``timeout`` seconds, with ``env`` added
    to its environment) and stores its records, skip or error."""
    where = f"{bc.name} {dtype} {contender.name}"
    entry = {"config": bc.name, "dtype": dtype, "contender": contender.name}
    reason = contender.unsupported(bc, dtype)
    if reason:
        log("skip", f"{where}: {reason}")
        results.skipped.append({**entry, "reason": reason})
        return
    if isolated:
        outcome = _in_worker(_contender_job(contender, bc, dtype, timing, precision), timeout, env)
    else:
        outcome = _with_precision(precision, contender, lambda: _outcome(contender, bc, dtype, timing))
    if "skip" in outcome or ("error" in outcome and not contender.ours):
        reason = outcome.get("skip") or f"failed: {outcome['error']}"
        log("skip", f"{where}: {reason}")
        results.skipped.append({**entry, "reason": reason})
    elif "error" in outcome:
        log("error", f"{where}: {outcome['error']}")
        results.errors.append({**entry, "error": outcome["error"]})
    else:
        records = [{**r, "process": outcome.get("process")} for r in outcome["records"]]
        results.records.extend(records)
        log("ok", f"{where}: " + ", ".join(f"{r['measurement']} {r['ms']:.3f} ms" for r in records))


def run_all(
    configs: Sequence[C.BenchConfig],
    dtypes: Sequence[str],
    contenders: Sequence[C.Contender],
    timing: Timing,
    log: Callable[[str, str], None],
    isolated: bool = True,
    precision: str = "float32",
    rounds: int = 1,
    budget_seconds: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Results:
    """Runs every contender on every config and dtype, each in a process of its own when ``isolated``, ``rounds``
    times over the whole grid; ``log(kind, text)`` gets one line per result ("ok"), skip ("skip") or error ("error").
    Each measurement's record is its middle round's (``combine_rounds``). With ``budget_seconds``, no contender starts
    once they have passed, and a worker still running then is stopped: what did not run is skipped, saying so."""
    results = Results()
    available = []
    for contender in contenders:
        reason = contender.unavailable()
        if reason:
            log("skip", f"{contender.name}: {reason}")
            results.skipped.append({"config": None, "dtype": None, "contender": contender.name, "reason": reason})
        else:
            available.append(contender)
    start, spent = clock(), False
    for round_index in range(rounds):
        if rounds > 1:
            log("info", f"round {round_index + 1} of {rounds}")
        for bc in configs:
            for dtype in dtypes:
                for contender in available:
                    left = math.inf if budget_seconds is None else budget_seconds - (clock() - start)
                    if left <= 0:
                        reason = f"the bench's budget of {budget_seconds:g} s was spent (round {round_index + 1})"
                        if not spent:
                            log("skip", f"{reason}: {bc.name} {dtype} {contender.name} and what follows did not run")
                        spent = True
                        results.skipped.append(
                            {"config": bc.name, "dtype": dtype, "contender": contender.name, "reason": reason}
                        )
                        continue
                    timeout = min(900.0, left)
                    run_guarded(results, log, contender, bc, dtype, timing, isolated, precision, timeout)
    results.records = combine_rounds(results.records)
    results.skipped = list({json.dumps(s, sort_keys=True): s for s in results.skipped}.values())
    add_ratios(results.records)
    return results


def combine_rounds(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (config, dtype, contender, measurement): of several rounds, the one with the middle time (the
    lower of the two middle ones for an even count), with every round's time in ``ms_rounds``. The same rule for
    every contender: a process that ran slow or fast for reasons of its own moves no one's result."""
    grouped: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        grouped.setdefault((r["config"], r["dtype"], r["contender"], r["measurement"]), []).append(r)
    combined = []
    for group in grouped.values():
        ordered = sorted(group, key=lambda r: r["ms"])
        combined.append({**ordered[(len(ordered) - 1) // 2], "ms_rounds": [r["ms"] for r in group]})
    return combined


def add_ratios(records: list[dict[str, Any]]) -> None:
    """Sets ``ratio_to_torch`` and ``ratio_to_flax``: ms / the peer's ms for the same config, dtype, measurement."""

    def key(record: dict[str, Any]) -> tuple[str, str, str]:
        return record["config"], record["dtype"], record["measurement"]

    baselines = {(r["contender"], key(r)): r["ms"] for r in records}
    for record in records:
        for peer in (C.TORCH, C.FLAX):
            base = baselines.get((peer, key(record)))
            record[f"ratio_to_{peer}"] = record["ms"] / base if base else None


# ------------------------------------------------------------------------------------------------ the neighbour


def _run_package_implementations(bc: C.BenchConfig, dtype: str) -> list[str]:
    """Imports this package and runs ``rnn()``'s forward and (where ``bc`` has one) training step on ``bc`` with every
    implementation that can run here, and with the default; returns what ran."""
    from jax_cudnn_rnn.backends import registry

    ran = []
    for name in [None, *registry.names()]:
        if name is not None and C.implementation_unsupported(name)(bc, dtype):
            continue
        runner = C._build_jcr(bc, dtype, name)
        for _ in range(3):
            runner.forward()
            if runner.train is not None:  # an inference-only problem has none
                runner.train()
        ran.append(name or "default")
    return ran


def _neighbour_outcome(bc: C.BenchConfig, dtype: str, timing: Timing, with_package: bool) -> dict[str, Any]:
    """PyTorch's forward on ``bc`` timed in this process, after this package ran when ``with_package``."""
    ran = _run_package_implementations(bc, dtype) if with_package else []
    ms = 1e3 * median_seconds(C.build_torch(bc, dtype).forward, timing)
    return {"ms": ms, "ran": ran}


def neighbour(
    bc: C.BenchConfig, dtype: str, timing: Timing, rounds: int, log: Callable[[str, str], None]
) -> dict[str, Any]:
    """PyTorch's forward on ``bc`` in a fresh process alone and in one that ran this package first, ``rounds`` times
    each, alternating; the ratio of the medians (target: within 1.15)."""
    times: dict[str, list[float]] = {"alone": [], "after_package": []}
    ran: list[str] = []
    for _ in range(rounds):
        for key in times:
            job = {
                "kind": "neighbour",
                "config": dataclasses.asdict(bc),
                "dtype": dtype,
                "timing": dataclasses.asdict(timing),
                "with_package": key == "after_package",
            }
            outcome = _in_worker(job)
            if "error" in outcome:
                log("error", f"neighbour {bc.name} {dtype} ({key}): {outcome['error']}")
                return {"config": bc.name, "dtype": dtype, "error": outcome["error"]}
            times[key].append(outcome["ms"])
            ran = outcome["ran"] or ran
    alone, after = statistics.median(times["alone"]), statistics.median(times["after_package"])
    result = {
        "config": bc.name,
        "dtype": dtype,
        "torch_fwd_ms_alone": times["alone"],
        "torch_fwd_ms_after_package": times["after_package"],
        "ratio": after / alone,
        "package_ran": ran,
        "loadavg": loadavg(),
    }
    log(
        "ok",
        f"neighbour {bc.name} {dtype}: PyTorch's forward {alone:.3f} ms alone, {after:.3f} ms after this "
        f"package ran {', '.join(ran)}: {after / alone:.2f}x",
    )
    return result


# ------------------------------------------------------------------------------------------------ the roofline


def gemm_peak(
    dtypes: Sequence[str],
    sizes: Sequence[int],
    timing: Timing,
    frameworks: Sequence[str],
    log: Callable[[str, str], None],
) -> dict[str, dict[str, Any]]:
    """{dtype: {"gflops", "framework", "size"}}: the machine's GEMM peak, the fastest [size]^3 product of any of
    ``frameworks`` at any of ``sizes``, each framework in a worker process of its own: the roofline's ceiling. Each
    product's fastest run counts (``fastest_seconds``): the rate the machine reached, which a run slowed by something
    else on the machine only lowers, so that no measurement of the same machine can exceed it by more than its own
    noise."""
    best: dict[str, dict[str, Any]] = {}
    for framework in frameworks:
        outcome = _in_worker(
            {
                "kind": "gemm",
                "framework": framework,
                "dtypes": list(dtypes),
                "sizes": list(sizes),
                "timing": dataclasses.asdict(timing),
            }
        )
        if "error" in outcome:
            log("skip", f"GEMM peak in {framework}: {outcome['error']}")
            continue
        for dtype, reason in outcome["skipped"].items():
            log("skip", f"GEMM peak in {framework} {dtype}: {reason}")
        for dtype, by_size in outcome["gflops"].items():
            for size, rate in by_size.items():
                log("ok", f"GEMM {framework} {dtype} [{size}]^3: {rate:.0f} GFLOP/s (fastest run)")
                if rate > best.get(dtype, {}).get("gflops", 0.0):
                    best[dtype] = {"gflops": round(rate, 1), "framework": framework, "size": int(size)}
    return best


def _gemm_outcome(framework: str, dtypes: Sequence[str], sizes: Sequence[int], timing: Timing) -> dict[str, Any]:
    gflops: dict[str, dict[int, float]] = {}
    skipped: dict[str, str] = {}
    for dtype in dtypes:
        try:
            for size in sizes:
                seconds = fastest_seconds(C.gemm(framework, dtype, size), timing)
                gflops.setdefault(dtype, {})[size] = 2.0 * size**3 / seconds / 1e9
        except Exception as e:  # noqa: BLE001 - a dtype the framework lacks (oneDNN's matmul: no float16 here)
            skipped[dtype] = C.short(e)
    return {"gflops": gflops, "skipped": skipped}


# ------------------------------------------------------------------------------------------------ the worker


def _worker(job: dict[str, Any]) -> dict[str, Any]:
    timing = Timing(**job["timing"])
    if job["kind"] == "gemm":
        return {**_gemm_outcome(job["framework"], job["dtypes"], job["sizes"], timing), "process": process_facts()}
    bc = C.BenchConfig(**job["config"])
    if job["kind"] == "neighbour":
        result = _neighbour_outcome(bc, job["dtype"], timing, job["with_package"])
    else:
        contender = C.contender(job["contender"])
        result = _with_precision(job["precision"], contender, lambda: _outcome(contender, bc, job["dtype"], timing))
    return {**result, "process": process_facts()}


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    print(json.dumps(_worker(json.loads(sys.stdin.read()))))
