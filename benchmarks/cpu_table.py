"""Measures what rnn(implementation=None) should run on this CPU: the xla implementation, oneDNN's RNN primitives
(its training step also with its backward on plain weights, "onednn:plain") and the network as GEMMs on oneDNN's
matmul ("onednn:gemm"), forward and training step, over a grid of shapes, each (shape, dtype, implementation) in a
fresh process (the bench's workers: jax_cudnn_rnn/tools/bench/measure.py), and prints the per-shape winners from which
onednn.CPU_TABLE (jax_cudnn_rnn/backends/onednn/cpu_table.json) is written, with the machine's facts, and that table's
entry for this CPU's oneDNN instruction set (its rows: on each side the first of ``PREFERENCE`` that no later one
beats by more than 5 %; bounds at the geometric middle between shapes).
ONEDNN_MAX_CPU_ISA (oneDNN) and XLA_FLAGS=--xla_cpu_max_isa (XLA) measure a lesser instruction set on this CPU.

    python benchmarks/cpu_table.py [--modes lstm,gru] [--dtypes float32,bfloat16] [--shapes 1024x64x25,...]
                                   [--repeats 10] [--rounds 2] [--json out.json]

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
# Each side's candidates by contender, in order of preference: a later one is chosen only where it beats the one
# chosen so far by more than TIE (oneDNN's primitive over its variants, oneDNN over xla). "onednn:plain" differs from
# "onednn" only in its training step.
CONTENDERS = {
    "onednn": "jcr-onednn",
    "onednn:plain": "jcr-onednn-plain",
    "onednn:gemm": "jcr-onednn-gemm",
    "xla": "jcr-xla",
}
PREFERENCE = {C.FWD: ("onednn", "onednn:gemm", "xla"), C.TRAIN: ("onednn", "onednn:plain", "onednn:gemm", "xla")}
TIE = 1.05


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="lstm,gru")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument(
        "--shapes",
        default=",".join(f"{h}x{b}x{t}" for h, b, t in SHAPES),
        help="hidden (= input size) x batch x time steps, comma-separated",
    )
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    configs = [
        C.BenchConfig(f"{mode}-h{h}-b{b}-t{t}", mode, 1, h, h, b, t, platform="cpu")
        for mode in args.modes.split(",")
        for h, b, t in shapes
    ]
    timing = measure.Timing(repeats=args.repeats, warmup=3, warmup_seconds=0.25)
    facts = report.machine_facts(isolated=True)
    print(facts["processor"], facts["cpu_features"], "load", facts["loadavg_start"], flush=True)
    records, errors, ms = [], [], {}
    for _ in range(args.rounds):
        results = measure.run_all(
            configs,
            args.dtypes.split(","),
            [C.CONTENDERS[name] for name in CONTENDERS.values()],
            timing,
            lambda kind, text: print(kind, text, flush=True),
        )
        records += results.records
        errors += results.errors
        for r in results.records:
            key = (r["config"], r["dtype"], r["contender"], r["measurement"])
            ms[key] = min(ms.get(key, float("inf")), r["ms"])
    print(f"\nconfig dtype step-MACs | fastest ms per side: {_header()} | picked")
    for bc in configs:
        for dtype in args.dtypes.split(","):
            macs = step_macs(bc.rnn_config(dtype), bc.batch)
            times = _times(ms, bc, dtype)
            shown = ", ".join(f"{name} {times[side][name]:.2f}" for side in C.MEASUREMENTS for name in PREFERENCE[side])
            print(f"{bc.name} {dtype} {macs:.3g} | {shown} | {', '.join(_picked(times))}", flush=True)
    print(json.dumps(table_entry(configs, args.dtypes.split(","), ms, facts), indent=2))
    facts["loadavg_end"] = measure.loadavg()
    print("load at the end", facts["loadavg_end"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": facts, "records": records, "errors": errors}, f, indent=1)


def _header() -> str:
    return "; ".join(f"{side} " + ", ".join(PREFERENCE[side]) for side in C.MEASUREMENTS)


def _times(ms: dict, bc: C.BenchConfig, dtype: str) -> dict[str, dict[str, float]]:
    """{side: {implementation: its fastest ms}} (NaN where it was not measured); "onednn:plain"'s forward is
    oneDNN's."""
    return {
        side: {name: ms.get((bc.name, dtype, CONTENDERS[name], side), math.nan) for name in PREFERENCE[side]}
        for side in C.MEASUREMENTS
    }


def _picked(times: dict[str, dict[str, float]]) -> tuple[str, str]:
    """(undifferentiated, under jax.grad): on each side the first of ``PREFERENCE`` that no later implementation
    beats by more than ``TIE`` (one that did not run, NaN, never replaces one that did)."""
    picked = []
    for side in C.MEASUREMENTS:
        choice = None
        for name in PREFERENCE[side]:
            time = times[side][name]
            if not math.isnan(time) and (choice is None or time * TIE < times[side][choice]):
                choice = name
        picked.append(choice or "xla")
    return picked[0], picked[1]


def _ratios(times: dict[str, dict[str, float]]) -> str:
    """Each of oneDNN's implementations' time over xla's, per side: what the table's "ratios" show."""
    return "; ".join(
        " / ".join(f"{times[side][name] / times[side]['xla']:.2f}" for name in PREFERENCE[side][:-1])
        for side in C.MEASUREMENTS
    )


def table_entry(configs: list, dtypes: list[str], ms: dict, facts: dict) -> dict:
    """cpu_table.json's entry for this CPU's instruction set from the fastest times ``ms``."""
    from jax_cudnn_rnn import onednn

    rows: dict[str, list] = {}
    first = [bc for bc in configs if bc.mode == configs[0].mode]
    ratios: dict[str, list] = {"shapes": [f"{bc.hidden}, {bc.batch}, {bc.time}" for bc in first]}
    ratios["columns"] = [_header()]
    for mode in dict.fromkeys(bc.mode for bc in configs):
        for dtype in dtypes:
            picked, shown = [], []
            for bc in (bc for bc in configs if bc.mode == mode):
                times = _times(ms, bc, dtype)
                shown.append(_ratios(times))
                macs = step_macs(bc.rnn_config(dtype), bc.batch)
                missing = math.isnan(times[C.FWD]["xla"]) or math.isnan(times[C.FWD]["onednn"])
                picked.append((macs, _picked(times), missing))
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
