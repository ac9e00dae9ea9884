"""``jax-cudnn-rnn tune`` on a GPU: measures, per benchmark problem (``jax-cudnn-rnn bench``'s GPU configs A-G) and
dtype, cuDNN's algorithms and the xla implementation, the forward and the training step, and keeps the ratios as this
GPU kind's table, which ``rnn(implementation=None)`` then decides from (jax_cudnn_rnn/backends/cudnn/gpu_rule.py).

Each (problem, dtype, implementation) is timed in a process of its own (the bench's workers:
jax_cudnn_rnn/tools/bench/measure.py; ``same_process`` times them here, for the tests), the xla implementation first,
then each algorithm cuDNN may run the problem with (``algorithm.candidates``, on every side it measures) as
``rnn(implementation="cudnn", algorithm=...)``. The whole run is bounded (``budget_seconds``, 5 minutes by default):
no measurement starts after it, a running one is stopped at it, and the cells are those whose xla implementation and
at least one algorithm were timed. A cell is one problem and dtype: the xla implementation's milliseconds and each
algorithm's time over them, per side (gpu_measurements.json's form), for strict float32 (the bench's default
precision). The table is written to the user's cache directory under the GPU's kind and the software
(jax_cudnn_rnn/backends/cudnn/tuned.py); ``--gpu-json`` also writes it as an entry for the shipped table.

This tool asks the registry what is the baseline, cuDNN's ``algorithm`` module what may run, and the GPU rule for
the table's form (``gpu_rule.Measured``).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

CONFIGS = ("A", "B", "C", "D", "E", "F", "G-b1", "G-b64")
"""The bench's GPU configs (jax_cudnn_rnn/tools/bench/problems.py), in the order they are timed."""
QUICK_CONFIGS = ("B", "F")
DTYPES = ("float32", "bfloat16")
BUDGET_SECONDS = 300.0
"""The default bound on a GPU tune: 5 minutes."""


def device_facts() -> tuple[str, str]:
    """(jax's ``device_kind``, compute capability) of this process's first GPU, whose kind the table is for."""
    import jax

    device = jax.local_devices(backend="gpu")[0]
    return str(device.device_kind), str(getattr(device, "compute_capability", ""))


def unavailable() -> str | None:
    """Why cuDNN cannot be tuned here (the registry's reason: no extension, no GPU), or None."""
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.backends.call import Call

    return registry.why_not("cudnn", "cuda", Call())


def _call_time(bc: Any) -> int:
    """The time steps of one ``rnn()`` call of ``bc`` (1 for a decoding loop's one-step calls)."""
    return 1 if bc.decode else bc.time


def algorithms_for(bc: Any, dtype: str) -> tuple[str, ...]:
    """The cuDNN algorithms that may run ``bc`` in ``dtype`` on every side it is measured on (the forward; the
    training step too unless the problem is inference only)."""
    from jax_cudnn_rnn.backends.cudnn import algorithm

    config = bc.rnn_config(dtype)
    sides = (False,) if bc.inference_only else (False, True)
    problems = [algorithm.Problem(config, _call_time(bc), bc.batch, bc.padded, training, False) for training in sides]
    return tuple(a for a in algorithm.ALGORITHMS if all(a in algorithm.candidates(p) for p in problems))


def _contender_name(implementation: str, chosen: str | None = None) -> str:
    return f"jcr-{implementation}" + ("" if chosen is None else f"@{chosen}")


def measure_cells(
    configs: Sequence[Any],
    dtypes: Sequence[str],
    *,
    timing: Any,
    rounds: int,
    budget_seconds: float,
    isolated: bool,
    progress: Callable[[str], None],
    log: Callable[[str, str], None],
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[dict[str, Any]], int]:
    """(the cells of every problem and dtype that the xla implementation and at least one algorithm ran, in
    gpu_measurements.json's form; how many measurements the budget left out). Each implementation's fastest median
    over ``rounds`` counts. ``progress(text)`` is called after each measurement."""
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.tools.bench import contenders, measure

    jobs = [
        (bc, dtype, name, chosen)
        for _ in range(rounds)
        for bc in configs
        for dtype in dtypes
        for name, chosen in ((registry.BASELINE, None), *(("cudnn", a) for a in algorithms_for(bc, dtype)))
    ]
    fastest: dict[tuple[str, str, str | None, str], float] = {}
    start = clock()
    for done, (bc, dtype, name, chosen) in enumerate(jobs):
        left = budget_seconds - (clock() - start)
        if left <= 0:
            log("skip", f"the budget of {budget_seconds:g} s is spent: {len(jobs) - done} measurements not run")
            return _cells(configs, dtypes, fastest), len(jobs) - done
        results = measure.Results()
        contender = contenders.contender(_contender_name(name, chosen))
        measure.run_guarded(results, log, contender, bc, dtype, timing, isolated, "float32", timeout=left)
        for record in results.records:
            key = (bc.name, dtype, chosen, record["measurement"])
            fastest[key] = min(fastest.get(key, math.inf), record["ms"])
        progress(f"{bc.name} {dtype} {contender.name}")
    return _cells(configs, dtypes, fastest), 0


def _cells(configs: Sequence[Any], dtypes: Sequence[str], fastest: dict[tuple, float]) -> list[dict[str, Any]]:
    from jax_cudnn_rnn.tools.bench import contenders

    cells = []
    for bc in configs:
        for dtype in dtypes:
            xla = [fastest.get((bc.name, dtype, None, m)) for m in contenders.MEASUREMENTS]
            ratios = {}
            for chosen in algorithms_for(bc, dtype):
                mine = [fastest.get((bc.name, dtype, chosen, m)) for m in contenders.MEASUREMENTS]
                sides = [round(a / b, 3) if a and b else None for a, b in zip(mine, xla, strict=True)]
                if any(r is not None for r in sides):
                    ratios[chosen] = sides
            if ratios:
                cells.append(
                    {
                        "config": bc.name,
                        "mode": bc.mode,
                        "dtype": dtype,
                        "num_layers": bc.num_layers,
                        "direction": bc.direction,
                        "hidden": bc.hidden,
                        "input_size": bc.input_size,
                        "batch": bc.batch,
                        "time": _call_time(bc),
                        "xla_ms": [None if ms is None else round(ms, 4) for ms in xla],
                        "ratios": ratios,
                    }
                )
    return cells


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def measured_entry(
    cells: list[dict[str, Any]],
    facts: tuple[str, str],
    timing: Any,
    rounds: int,
    budget: tuple[float, int],
) -> dict[str, Any]:
    """This GPU's entry in the shipped measurements' form (gpu_measurements.json)."""
    import jax

    from jax_cudnn_rnn.backends.cudnn import extension
    from jax_cudnn_rnn.tools.bench import measure

    seconds, left_out = budget
    kind, capability = facts
    cudnn = extension.format_cudnn_version(extension.cudnn_version())
    return {
        "device_kind": kind,
        "compute_capability": capability,
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "software": f"cuDNN {cudnn}, jax {jax.__version__}, jax-cudnn-rnn {_version('jax-cudnn-rnn')}",
        "precision": "float32",
        "how": f"jax-cudnn-rnn tune: each problem, dtype and implementation in a process of its own, the fastest "
        f"{measure.describe_timing(timing)} over {rounds} round{'s' if rounds != 1 else ''}, within a budget of "
        f"{seconds:g} s ({left_out} measurements left out)",
        "cells": cells,
    }


def select(names: str | None, quick: bool) -> list[Any]:
    """The GPU configs to time (comma-separated ``names``, default all; ``quick``: two, shrunk); SystemExit naming
    the known ones for an unknown name."""
    from jax_cudnn_rnn.tools.bench import contenders

    chosen = [n.strip() for n in (names or ",".join(QUICK_CONFIGS if quick else CONFIGS)).split(",") if n.strip()]
    unknown = [name for name in chosen if name not in CONFIGS]
    if unknown or not chosen:
        raise SystemExit(
            f"unknown GPU config {', '.join(map(repr, unknown)) or '(none given)'}; known: {', '.join(CONFIGS)}"
        )
    configs = [contenders.CONFIGS[name] for name in dict.fromkeys(chosen)]
    return [c.shrunk() for c in configs] if quick else configs
