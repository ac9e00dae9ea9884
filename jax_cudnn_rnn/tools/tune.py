"""``jax-cudnn-rnn tune``: measures on this machine what ``rnn(implementation=None)`` chooses between on the CPU, and
keeps it for the choices from then on.

Every implementation the CPU's default may run (the registry's: the xla implementation, oneDNN, oneDNN's variants) is
timed at a grid of shapes per mode and dtype, the forward and a training step, each (shape, dtype, implementation) in
a process of its own (the bench's workers: jax_cudnn_rnn/tools/bench/measure.py), so that nothing one of them loads
or sets moves another's time. Each measurement's fastest median over the rounds, over the xla implementation's, makes
one cell of this machine's table, in the form of the shipped measurements (jax_cudnn_rnn/backends/onednn/
cpu_measurements.json). The table is written to the user's cache directory under this machine's key (CPU model,
oneDNN instruction set, cores, this package's, jax's and oneDNN's versions: jax_cudnn_rnn/backends/onednn/tuned.py),
and the CPU rule reads it instead of the shipped measurements for the modes and dtypes it measured, in every later
process on this machine with this software; ``jax-cudnn-rnn info`` says which decided. ``--json`` also writes the
measurements to a file (``benchmarks/cpu_table.py`` turns one into the shipped data's entry for a new CPU).

This tool asks the registry (jax_cudnn_rnn/backends/registry.py) what may run and can run, and the public
``jax_cudnn_rnn.onednn`` for the machine's facts; what the cells mean is the CPU rule's (``cpu_rule.Measured``).

On a machine with a GPU that cuDNN runs on, the command also tunes the GPU (jax_cudnn_rnn/tools/tune_gpu.py: cuDNN's
algorithms and the xla implementation per benchmark problem and dtype, within 5 minutes), into a table of the GPU's
kind; ``--platform`` picks one of the two. The CPU's measurements then run with ``JAX_PLATFORMS=cpu`` in their
processes, so that they time the CPU, not the GPU beside it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from jax_cudnn_rnn.tools import tune_gpu

SHAPES = ((64, 8, 100), (256, 1, 100), (256, 8, 100), (256, 32, 100), (512, 64, 50), (1024, 64, 25))
"""(hidden = input size, batch, time steps): the shipped measurements' grid, small to large steps."""
QUICK_SHAPES = ((64, 8, 100), (256, 32, 100))
MODES = ("lstm", "gru")
DTYPES = ("float32", "bfloat16")


def implementations() -> tuple[str, ...]:
    """What the default may run on the CPU, the baseline (the xla implementation: every ratio's denominator) first."""
    from jax_cudnn_rnn.backends import registry

    names = registry.implementations("cpu", by_default=True)
    return (registry.BASELINE, *(name for name in names if name != registry.BASELINE))


def _config(mode: str, dtype: str, shape: tuple[int, int, int]):
    from jax_cudnn_rnn.tools.bench import contenders

    hidden, batch, time = shape
    name = f"{mode}-h{hidden}-b{batch}-t{time}"
    return contenders.BenchConfig(name, mode, 1, hidden, hidden, batch, time, platform="cpu")


def measure_cells(
    modes: Sequence[str],
    dtypes: Sequence[str],
    shapes: Sequence[tuple[int, int, int]],
    *,
    timing: Any,
    rounds: int,
    progress: Callable[[str], None],
    log: Callable[[str, str], None],
) -> list[list[Any]]:
    """The cells (cpu_measurements.json's form) of every (mode, dtype, shape) that the xla implementation and at least
    one other implementation ran: each implementation's fastest median over ``rounds`` over the xla one's, per side
    (None on a side the implementation is not offered for). ``progress(text)`` is called after each timing."""
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.tools.bench import contenders, measure

    names = implementations()
    fastest: dict[tuple[str, str, tuple[int, int, int], str, str], float] = {}
    for _ in range(rounds):
        for mode in modes:
            for dtype in dtypes:
                for shape in shapes:
                    bc = _config(mode, dtype, shape)
                    for name in names:
                        results = measure.Results()
                        measure.run_guarded(
                            results,
                            log,
                            contenders.contender(f"jcr-{name}"),
                            bc,
                            dtype,
                            timing,
                            True,
                            "float32",
                            env={"JAX_PLATFORMS": "cpu"},  # the CPU, also where a GPU is JAX's default
                        )
                        for record in results.records:
                            key = (mode, dtype, shape, name, record["measurement"])
                            fastest[key] = min(fastest.get(key, math.inf), record["ms"])
                        progress(f"{bc.name} {dtype} {name}")
    cells = []
    for mode in modes:
        for dtype in dtypes:
            for shape in shapes:
                ratios = {}
                for name in names[1:]:
                    sides = []
                    for side, measurement in zip(registry.SIDES, contenders.MEASUREMENTS, strict=True):
                        mine, xla = (fastest.get((mode, dtype, shape, n, measurement)) for n in (name, names[0]))
                        offered = side in registry.sides_of(name)
                        sides.append(round(mine / xla, 3) if offered and mine and xla else None)
                    if any(r is not None for r in sides):
                        ratios[name] = sides
                if ratios:
                    cells.append([mode, dtype, *shape, ratios])
    return cells


def _cache_kib(level: int) -> int | None:
    """The size of this CPU's level-``level`` data cache in KiB (glibc's sysconf), or None where it does not say."""
    name = {2: "SC_LEVEL2_CACHE_SIZE", 3: "SC_LEVEL3_CACHE_SIZE"}[level]
    try:
        size = os.sysconf(name)
    except (ValueError, OSError):
        return None
    return size // 1024 if size and size > 0 else None


def measured_entry(cells: list[list[Any]], timing: Any, rounds: int, loads: Iterable[Any]) -> dict[str, Any]:
    """This machine's entry in the shipped measurements' form."""
    import jax

    from jax_cudnn_rnn import onednn
    from jax_cudnn_rnn.tools.bench import measure, report

    version = ".".join(map(str, onednn.library_version() or ())) or "unknown"
    start, end = loads
    return {
        "cpu": report.cpu_model() or "unknown",
        "isa": onednn.effective_cpu_isa(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "l2_kib_per_core": _cache_kib(2),
        "l3_kib": _cache_kib(3),
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "software": f"oneDNN {version} on {onednn.cpu_runtime()}, jax {jax.__version__}",
        "how": f"jax-cudnn-rnn tune: each shape, dtype and implementation in a process of its own, the fastest "
        f"{measure.describe_timing(timing)} over {rounds} round{'s' if rounds != 1 else ''}; load average {start} "
        f"at the start, {end} at the end",
        "cells": cells,
    }


PLATFORMS = ("cpu", "gpu")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--platform",
        default=None,
        help="comma-separated: cpu (oneDNN against xla), gpu (cuDNN's algorithms against xla); default: each that "
        "this machine has (the oneDNN extension loaded; a GPU cuDNN runs on)",
    )
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"CPU: comma-separated modes (default: {','.join(MODES)})"
    )
    parser.add_argument(
        "--dtypes", default=",".join(DTYPES), help=f"comma-separated dtypes (default: {','.join(DTYPES)})"
    )
    parser.add_argument("--repeats", type=int, default=10, help="timed runs per measurement (default: 10)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds over the whole grid (default: 1)")
    parser.add_argument(
        "--quick", action="store_true", help=f"two shapes only: CPU {QUICK_SHAPES}, GPU {tune_gpu.QUICK_CONFIGS} shrunk"
    )
    parser.add_argument("--json", help="also write the CPU's measurements to this file")
    parser.add_argument(
        "--configs", default=None, help=f"GPU: comma-separated bench configs (default: {','.join(tune_gpu.CONFIGS)})"
    )
    parser.add_argument(
        "--budget-seconds",
        type=float,
        default=tune_gpu.BUDGET_SECONDS,
        help=f"GPU: no measurement starts after this many seconds, a running one is stopped (default: "
        f"{tune_gpu.BUDGET_SECONDS:g})",
    )
    parser.add_argument("--gpu-json", help="also write the GPU's measurements (the shipped table's entry) to this file")
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="GPU: time every measurement in this process (the default gives each a process of its own)",
    )
    parser.add_argument(
        "--no-save", action="store_true", help="measure and print only; the default keeps deciding as before"
    )


def _check(names: str, known: Sequence[str], what: str) -> list[str]:
    chosen = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        raise SystemExit(f"unknown {what} {', '.join(map(repr, unknown)) or '(none given)'}; known: {', '.join(known)}")
    return chosen


def _missing(platform: str) -> str | None:
    """Why ``platform`` cannot be tuned here, or None."""
    if platform == "gpu":
        reason = tune_gpu.unavailable()
        return None if reason is None else f"cuDNN cannot run here: it needs {reason}"
    from jax_cudnn_rnn import onednn

    return None if onednn.extension_loaded() else f"the oneDNN extension is not loaded ({onednn.extension_error()})"


def run(args: argparse.Namespace) -> int:
    """The ``tune`` subcommand: 0 when each platform's table was written (or printed), 1 when nothing could run."""
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    dtypes = _check(args.dtypes, DTYPES, "dtype")
    if args.platform is None:
        platforms = [p for p in PLATFORMS if _missing(p) is None]
        if not platforms:
            reasons = "; ".join(f"{p}: {_missing(p)}" for p in PLATFORMS)
            console.print(f"nothing to tune: {escape(reasons)}")
            return 1
    else:
        platforms = _check(args.platform, PLATFORMS, "platform")
        for platform in platforms:
            if (reason := _missing(platform)) is not None:
                console.print(f"nothing to tune on the {platform}: {escape(reason)}")
                return 1
    status = 0
    if "gpu" in platforms:
        status |= _run_gpu(args, dtypes, console)
    if "cpu" in platforms:
        status |= _run_cpu(args, dtypes, console)
    return status


def _progress_bar(console: Any, total: int, measure_them: Callable[..., Any]) -> Any:
    """``measure_them(progress=..., log=...)`` under a progress bar of ``total`` steps; skips and errors printed."""
    from rich.markup import escape
    from rich.progress import Progress

    with Progress(console=console) as bar:
        task = bar.add_task("tuning", total=total)

        def log(kind: str, text: str) -> None:
            if kind in ("skip", "error"):
                bar.console.print(f"{kind} {escape(text)}")

        return measure_them(
            progress=lambda text: bar.update(task, advance=1, description=escape(text)),
            log=log,
        )


def _run_gpu(args: argparse.Namespace, dtypes: list[str], console: Any) -> int:
    from jax_cudnn_rnn.backends.cudnn import gpu_rule, tuned
    from jax_cudnn_rnn.tools.bench import measure

    configs = tune_gpu.select(args.configs, args.quick)
    timing = measure.Timing(repeats=args.repeats, warmup=3, warmup_seconds=0.25)
    facts = tune_gpu.device_facts()
    total = args.rounds * sum(1 + len(tune_gpu.algorithms_for(bc, dtype)) for bc in configs for dtype in dtypes)
    console.print(
        f"timing the xla implementation and cuDNN's algorithms on the {facts[0]}: {', '.join(c.name for c in configs)} "
        f"x {', '.join(dtypes)}, {args.rounds} round(s), within {args.budget_seconds:g} s "
        f"({'in this process' if args.same_process else 'each in a process of its own'}, "
        f"{measure.describe_timing(timing)})"
    )
    cells, left_out = _progress_bar(
        console,
        total,
        lambda **report: tune_gpu.measure_cells(
            configs,
            dtypes,
            timing=timing,
            rounds=args.rounds,
            budget_seconds=args.budget_seconds,
            isolated=not args.same_process,
            **report,
        ),
    )
    entry = tune_gpu.measured_entry(cells, facts, timing, args.rounds, (args.budget_seconds, left_out))
    if args.gpu_json:
        with open(args.gpu_json, "w", encoding="utf-8") as f:
            json.dump(entry, f, indent=1)
    if not cells:
        console.print("no GPU cell was measured (see the skips above): nothing written")
        return 1
    for cell in cells:
        console.print(f"  {cell['config']} {cell['dtype']}: xla {cell['xla_ms']} ms, {cell['ratios']}")
    if args.no_save:
        return 0
    path = tuned.save(gpu_rule.measured_from(entry))
    console.print(f"written {path}: rnn(implementation=None) on an {facts[0]} decides from it from now on")
    return 0


def _run_cpu(args: argparse.Namespace, dtypes: list[str], console: Any) -> int:
    from jax_cudnn_rnn.backends.onednn import cpu_rule, tuned
    from jax_cudnn_rnn.tools.bench import measure

    modes = _check(args.modes, MODES, "mode")
    shapes = QUICK_SHAPES if args.quick else SHAPES
    timing = measure.Timing(repeats=args.repeats, warmup=3, warmup_seconds=0.25)
    names = implementations()
    total = args.rounds * len(modes) * len(dtypes) * len(shapes) * len(names)
    console.print(
        f"timing {', '.join(names)} on {len(shapes)} shapes x {', '.join(modes)} x {', '.join(dtypes)}, "
        f"{args.rounds} round(s), each in a process of its own ({measure.describe_timing(timing)})"
    )
    start = measure.loadavg()
    cells = _progress_bar(
        console,
        total,
        lambda **report: measure_cells(modes, dtypes, shapes, timing=timing, rounds=args.rounds, **report),
    )
    entry = measured_entry(cells, timing, args.rounds, (start, measure.loadavg()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(entry, f, indent=1)
    if not cells:
        console.print("no cell was measured (see the skips above): nothing written")
        return 1
    for cell in cells:
        console.print(f"  {cell[0]} {cell[1]} {cell[2]}, {cell[3]}, {cell[4]}: {cell[5]}")
    if args.no_save:
        return 0
    path = tuned.save(cpu_rule.measured_from(entry))
    console.print(f"written {path}: rnn(implementation=None) on this machine decides from it from now on")
    return 0
