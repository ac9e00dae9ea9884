"""What ``seq_lengths`` costs the default ``rnn()`` on the CPU: each bench CPU problem with lengths in [T/2, T] (the
bench's padded configs) against the same call without lengths, forward and training step, float32 and bfloat16.

The two calls alternate in one process (a fresh process per problem and dtype, rounds of processes, the fastest
median per call kept): on a shared VM the same call's time moves 10-80 % from one process to the next, more than the
cost measured here, while in one process the two calls see the same machine. Ratio = with lengths / without.

    python benchmarks/lengths_cost.py [--configs cpu-lstm,lstm-b1] [--dtypes float32,bfloat16] [--rounds 2]
                                      [--repeats 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from jax_cudnn_rnn.tools.bench import contenders as C

PADDED = dict(zip((c.name for c in C.CPU_CONFIGS), C.PADDED_CONFIGS, strict=True))


def _alternating(calls: dict[str, object], repeats: int) -> dict[str, float]:
    """{name: median ms} of zero-argument ``calls`` run in turn ``repeats`` times after 3 warm-ups each."""
    for call in calls.values():
        for _ in range(3):
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def worker(config: str, dtype: str, repeats: int) -> dict[str, object]:
    """Medians (ms) of the default ``rnn()`` on ``config`` with and without lengths, in this process."""
    build = C.contender("jcr-default").build
    plain, padded = build(C.CONFIGS[config], dtype), build(PADDED[config], dtype)
    result: dict[str, object] = {"implementation": padded.notes.get("implementation")}
    for measurement in C.MEASUREMENTS:
        calls = {
            "none": plain.forward if measurement == C.FWD else plain.train,
            "lengths": padded.forward if measurement == C.FWD else padded.train,
        }
        result[measurement] = _alternating(calls, repeats)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=",".join(PADDED))
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--worker", nargs=2, metavar=("CONFIG", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.repeats)))
        return
    from jax_cudnn_rnn.onednn import effective_cpu_isa
    from jax_cudnn_rnn.tools.bench.report import cpu_model

    configs, dtypes = args.configs.split(","), args.dtypes.split(",")
    unknown = sorted(set(configs) - set(PADDED))
    if unknown:
        parser.error(f"--configs: expected names from {', '.join(PADDED)}, got {', '.join(unknown)}")
    results: dict[str, object] = {
        "cpu": cpu_model(),
        "onednn_isa": effective_cpu_isa(),
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
        "repeats": args.repeats,
        "cells": [],
    }
    for config in configs:
        for dtype in dtypes:
            rounds = []
            for _ in range(args.rounds):
                run = subprocess.run(
                    [sys.executable, __file__, "--repeats", str(args.repeats), "--worker", config, dtype],
                    capture_output=True,
                    text=True,
                    timeout=900,
                    check=True,
                )
                rounds.append(json.loads(run.stdout.strip().splitlines()[-1]))
            cell = {"config": config, "dtype": dtype, "implementation": rounds[0]["implementation"]}
            for measurement in C.MEASUREMENTS:
                best = {k: min(r[measurement][k] for r in rounds) for k in ("none", "lengths")}
                ratios = [r[measurement]["lengths"] / r[measurement]["none"] for r in rounds]
                cell[measurement] = {**best, "ratio": best["lengths"] / best["none"], "ratio_per_round": ratios}
            cell["loadavg"] = os.getloadavg()
            results["cells"].append(cell)
            fwd, train = cell[C.FWD], cell[C.TRAIN]
            print(
                f"{config:8s} {dtype:8s} forward {fwd['none']:8.3f} / {fwd['lengths']:8.3f} ms = {fwd['ratio']:.2f}x"
                f"   training {train['none']:8.3f} / {train['lengths']:8.3f} ms = {train['ratio']:.2f}x",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
