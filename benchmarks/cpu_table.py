"""Measures a CPU for the shipped measurements the default's CPU rule is fitted to
(jax_cudnn_rnn/backends/onednn/cpu_measurements.json): what ``jax-cudnn-rnn tune`` measures (every implementation the
CPU's default may run, forward and training step, over the grid of shapes, each (shape, dtype, implementation) in a
process of its own), over more rounds by default, printed as the JSON entry to add for this CPU, with the pick the
rule makes from this CPU's measurements alone in each cell. ONEDNN_MAX_CPU_ISA (oneDNN) and
XLA_FLAGS=--xla_cpu_max_isa (XLA) measure a lesser instruction set on this CPU. Writes nothing of the user's cache.

    python benchmarks/cpu_table.py [--modes lstm,gru] [--dtypes float32,bfloat16] [--shapes 1024x64x25,...]
                                   [--repeats 10] [--rounds 2] [--json out.json]

Each round times every (shape, dtype, implementation) once; the fastest median over the rounds is kept, the time
least disturbed by whatever else ran on the machine. ``--shapes`` re-measures part of the grid (a new variant's
cells, a shape whose measurements flipped between days). Add the entry to cpu_measurements.json with what the run was
("how": the load, anything unusual), then check tests/onednn/test_cpu_rule.py.
"""

from __future__ import annotations

import argparse
import json

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.onednn import cpu_rule
from jax_cudnn_rnn.tools import tune
from jax_cudnn_rnn.tools.bench import measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="lstm,gru")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument(
        "--shapes",
        default=",".join(f"{h}x{b}x{t}" for h, b, t in tune.SHAPES),
        help="hidden (= input size) x batch x time steps, comma-separated",
    )
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in shape.split("x")) for shape in args.shapes.split(",")]
    timing = measure.Timing(repeats=args.repeats, warmup=3, warmup_seconds=0.25)
    start = measure.loadavg()
    print("load", start, flush=True)
    cells = tune.measure_cells(
        args.modes.split(","),
        args.dtypes.split(","),
        shapes,
        timing=timing,
        rounds=args.rounds,
        progress=lambda text: print("timed", text, flush=True),
        log=lambda kind, text: print(kind, text, flush=True),
    )
    entry = tune.measured_entry(cells, timing, args.rounds, (start, measure.loadavg()))
    measured = cpu_rule.measured_from(entry)
    print("\ncell | ratios to xla (forward, training step) | the rule's pick from this CPU alone")
    for cell in measured.cells:
        config = jcr.RNNConfig(cell.mode, 1, cell.hidden, cell.hidden, dtype=cell.dtype)
        estimates = {side: {registry.BASELINE: registry.UNIT} for side in registry.SIDES}
        for implementation in cell.ratios:
            for side in registry.sides_of(implementation):
                found = cpu_rule.estimate(config, cell.batch, side, implementation, isa=measured.isa, tuned=measured)
                if found is not None:
                    estimates[side][implementation] = registry.Cost(*found)
        print(f"{list(cell[:5])} | {cell.ratios} | {' / '.join(registry.pick(estimates))}", flush=True)
    print(json.dumps(entry, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(entry, f, indent=1)


if __name__ == "__main__":
    main()
