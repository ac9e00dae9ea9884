"""Measures what rnn(implementation=None) should run on this CPU: the xla implementation and oneDNN (its training
step also with its backward on plain weights, "onednn:plain"), forward and training step, over a grid of shapes, each
(shape, dtype, implementation) in a fresh process (the bench's workers: jax_cudnn_rnn/tools/bench/measure.py), and
prints the per-shape winners from which onednn.CPU_TABLE (jax_cudnn_rnn/backends/onednn/cpu_table.json) is written,
with the machine's facts, and that table's entry for this CPU's oneDNN instruction set (its rows: ties within 5 % to
oneDNN, and to oneDNN's own backward layout over the plain one; bounds at the geometric middle between shapes).
ONEDNN_MAX_CPU_ISA (oneDNN) and XLA_FLAGS=--xla_cpu_max_isa (XLA) measure a lesser instruction set on this CPU.

    python benchmarks/cpu_table.py [--modes lstm,gru] [--dtypes float32,bfloat16] [--repeats 10] [--rounds 2]
                                   [--json out.json]

Each round times every (shape, dtype, implementation) once; the fastest median over the rounds is kept, the time
least disturbed by whatever else ran on the machine.
"""

from __future__ import annotations

import argparse
import json
import math

from jax_cudnn_rnn.backends.onednn.cpu_table import step_macs
from jax_cudnn_rnn.tools.bench import contenders as C
from jax_cudnn_rnn.tools.bench import measure, report

# (hidden = input size, batch, time steps): small to large steps.
SHAPES = ((64, 8, 100), (256, 1, 100), (256, 8, 100), (256, 32, 100), (512, 64, 50), (1024, 64, 25))
ONEDNN = ("jcr-onednn", "jcr-onednn-plain")  # oneDNN's training step on its own backward weights layout, on plain
TIE = 1.05  # within this factor the simpler choice stays: oneDNN over xla, oneDNN's own layout over the plain one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="lstm,gru")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    configs = [
        C.BenchConfig(f"{mode}-h{h}-b{b}-t{t}", mode, 1, h, h, b, t, platform="cpu")
        for mode in args.modes.split(",")
        for h, b, t in SHAPES
    ]
    timing = measure.Timing(repeats=args.repeats, warmup=3, warmup_seconds=0.25)
    facts = report.machine_facts(isolated=True)
    print(facts["processor"], facts["cpu_features"], "load", facts["loadavg_start"], flush=True)
    records, errors, ms = [], [], {}
    for _ in range(args.rounds):
        results = measure.run_all(
            configs,
            args.dtypes.split(","),
            [C.CONTENDERS[name] for name in ("jcr-xla", *ONEDNN)],
            timing,
            lambda kind, text: print(kind, text, flush=True),
        )
        records += results.records
        errors += results.errors
        for r in results.records:
            key = (r["config"], r["dtype"], r["contender"], r["measurement"])
            ms[key] = min(ms.get(key, float("inf")), r["ms"])
    print(
        "\nconfig dtype step-MACs | fastest ms xla fwd, fwd+bwd; oneDNN fwd, fwd+bwd; oneDNN:plain fwd+bwd | "
        "oneDNN/xla fwd, fwd+bwd, plain fwd+bwd | picked"
    )
    for bc in configs:
        for dtype in args.dtypes.split(","):
            ratios = _ratios(ms, bc, dtype)
            macs = step_macs(bc.rnn_config(dtype), bc.batch)
            times = [
                ms.get((bc.name, dtype, c, m), math.nan) for c in ("jcr-xla", "jcr-onednn") for m in C.MEASUREMENTS
            ]
            times.append(ms.get((bc.name, dtype, ONEDNN[1], C.MEASUREMENTS[1]), math.nan))
            print(
                f"{bc.name} {dtype} {macs:.3g} | {', '.join(f'{t:.2f}' for t in times)} | "
                f"{', '.join(f'{r:.2f}' for r in ratios)} | {', '.join(_picked(ratios))}",
                flush=True,
            )
    print(json.dumps(table_entry(configs, args.dtypes.split(","), ms, facts), indent=2))
    facts["loadavg_end"] = measure.loadavg()
    print("load at the end", facts["loadavg_end"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": facts, "records": records, "errors": errors}, f, indent=1)


def _ratios(ms: dict, bc: C.BenchConfig, dtype: str) -> list[float]:
    """oneDNN's fastest time over the xla implementation's: forward, training step, training step with the backward on
    plain weights (NaN where either is missing)."""
    xla = [ms.get((bc.name, dtype, "jcr-xla", m), math.nan) for m in C.MEASUREMENTS]
    onednn = [ms.get((bc.name, dtype, ONEDNN[0], m), math.nan) for m in C.MEASUREMENTS]
    plain = ms.get((bc.name, dtype, ONEDNN[1], C.MEASUREMENTS[1]), math.nan)
    return [onednn[0] / xla[0], onednn[1] / xla[1], plain / xla[1]]


def _picked(ratios: list[float]) -> tuple[str, str]:
    """(undifferentiated, under jax.grad) from ``_ratios``: oneDNN within ``TIE`` of xla; under jax.grad its backward
    on plain weights where that is faster than its own layout by more than ``TIE``."""
    forward, training, plain = ratios
    differentiated, ratio = ("onednn:plain", plain) if plain * TIE < training else ("onednn", training)
    return ("onednn" if forward < TIE else "xla", differentiated if ratio < TIE else "xla")


def table_entry(configs: list, dtypes: list[str], ms: dict, facts: dict) -> dict:
    """cpu_table.json's entry for this CPU's instruction set from the fastest times ``ms``."""
    from jax_cudnn_rnn import onednn

    rows, ratios = {}, {"shapes": [f"{h}, {b}, {t}" for h, b, t in SHAPES]}
    for mode in dict.fromkeys(bc.mode for bc in configs):
        for dtype in dtypes:
            picked, shown = [], []
            for bc in (bc for bc in configs if bc.mode == mode):
                r = _ratios(ms, bc, dtype)
                shown.append(" / ".join(f"{x:.2f}" for x in r))
                macs = step_macs(bc.rnn_config(dtype), bc.batch)
                picked.append((macs, _picked(r), any(math.isnan(x) for x in r)))
            ratios[f"{mode}/{dtype}"] = shown
            if any(missing for *_, missing in picked):
                continue  # oneDNN or xla could not run it here: no rows (the xla implementation runs)
            merged: list[list] = []
            for i, (macs, pair, _) in enumerate(picked):
                if merged and tuple(merged[-1][1:]) == pair:
                    merged[-1][0] = None
                else:
                    if merged:
                        merged[-1][0] = float(f"{math.sqrt(picked[i - 1][0] * macs):.2g}")
                    merged.append([None, *pair])
            rows[f"{mode}/{dtype}"] = merged
    return {
        "isa": onednn.effective_cpu_isa(),
        "measured": {
            "date": facts["date_utc"][:10],
            "cpu": facts["processor"],
            "cores": facts["cpus_usable"],
            "software": f"oneDNN {'.'.join(map(str, facts['onednn_version'] or []))} on {facts['onednn_cpu_runtime']}, "
            f"jax {facts['versions']['jax']}",
            "how": "",
        },
        "rows": rows,
        "ratios": ratios,
    }


if __name__ == "__main__":
    main()
