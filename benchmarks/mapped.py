"""What a recurrent model mapped over its sequences with ``jax.vmap`` costs (Equinox's idiom: a module runs one
sequence, the batch is a vmap), against Equinox's own cells.

Cases: LSTM and GRU, (H = input size, T, sequences) in (128, 25, 64) and (256, 50, 32), the forward (the outputs) and
the training step's gradient (``eqx.filter_grad`` of the mean square of the outputs, with respect to the module), each
jitted, each contender in a process of its own:

- ``cells``: ``eqx.nn.LSTMCell`` / ``eqx.nn.GRUCell`` in ``lax.scan`` over one sequence, vmapped (the baseline);
- ``default``: ``jax_cudnn_rnn.equinox.LSTM`` / ``GRU`` with ``implementation=None``;
- ``xla`` and ``onednn``: the same module with that implementation on both sides (``onednn``: oneDNN's training runs
  once per mapped sequence, what the default chose before the CPU rule's ``MAPPED_TRAINING_MIN_BATCH``).

The rounds alternate the contenders; each number is the best of its rounds. Records the CPU, its feature flags,
oneDNN's ISA, the jax version and the threads this process may use (``one_step.machine``).

    python benchmarks/mapped.py [--rounds 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from one_step import machine, median_seconds

MODES = ("lstm", "gru")
SHAPES = ((128, 25, 64), (256, 50, 32))  # hidden (= input size), steps, sequences
CONTENDERS = ("cells", "default", "xla", "onednn")


def _functions(contender: str, mode: str, hidden: int, steps: int, sequences: int):
    """(forward, gradient, module, xs) of one contender, jitted with Equinox's filters."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from jax_cudnn_rnn import equinox as jeqx

    key = jax.random.key(0)
    xs = jax.random.normal(jax.random.key(1), (sequences, steps, hidden))
    if contender == "cells":
        module = (eqx.nn.LSTMCell if mode == "lstm" else eqx.nn.GRUCell)(hidden, hidden, key=key)

        def run(cell, x):
            zeros = jnp.zeros(hidden)
            carry = (zeros, zeros) if mode == "lstm" else zeros

            def step(carry, x_t):
                carry = cell(x_t, carry)
                return carry, carry[0] if mode == "lstm" else carry

            return jax.lax.scan(step, carry, x)[1]

    else:
        implementation = None if contender == "default" else contender
        module = (jeqx.LSTM if mode == "lstm" else jeqx.GRU)(hidden, hidden, implementation=implementation, key=key)

        def run(module, x):
            return module(x)[0]

    def forward(module, xs):
        return jax.vmap(run, in_axes=(None, 0))(module, xs)

    def loss(module, xs):
        return jnp.mean(forward(module, xs) ** 2)

    return eqx.filter_jit(forward), eqx.filter_jit(eqx.filter_grad(loss)), module, xs


def worker(contender: str) -> dict[str, float]:
    times = {}
    for mode in MODES:
        for hidden, steps, sequences in SHAPES:
            forward, gradient, module, xs = _functions(contender, mode, hidden, steps, sequences)
            case = f"{mode} H{hidden} T{steps} N{sequences}"
            times[f"{case} forward"] = median_seconds([(forward, (module, xs))], 1.5)
            times[f"{case} gradient"] = median_seconds([(gradient, (module, xs))], 1.5)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--worker", choices=CONTENDERS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return
    facts = machine()
    print(json.dumps(facts), flush=True)
    best: dict[str, dict[str, float]] = {}
    for round_ in range(args.rounds):
        shift = round_ % len(CONTENDERS)  # a different contender first each round
        for contender in CONTENDERS[shift:] + CONTENDERS[:shift]:
            done = subprocess.run([sys.executable, __file__, "--worker", contender], capture_output=True, text=True)
            if done.returncode:
                print(f"{contender} failed:\n{done.stderr[-3000:]}", file=sys.stderr, flush=True)
                continue
            for case, seconds in json.loads(done.stdout.strip().splitlines()[-1]).items():
                best.setdefault(case, {})[contender] = min(best.get(case, {}).get(contender, float("inf")), seconds)
            print(f"round {round_ + 1}: {contender} done", file=sys.stderr, flush=True)
    others = [c for c in CONTENDERS if c != "cells"]
    print(f"\n{facts['cpu']}, {facts['threads']} threads, oneDNN ISA {facts['onednn_isa']}, jax {facts['jax']}")
    print("| case | cells ms | " + " | ".join(f"{c} ms | {c} / cells" for c in others) + " |")
    print("|---" * (2 + 2 * len(others)) + "|")
    for case, times in best.items():
        base = times.get("cells")
        cells = [f"{base * 1e3:.2f}" if base else "-"]
        for c in others:
            t = times.get(c)
            cells += [f"{t * 1e3:.2f}" if t else "-", f"{t / base:.2f}" if t and base else "-"]
        print(f"| {case} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            ms = {case: {c: s * 1e3 for c, s in times.items()} for case, times in best.items()}
            json.dump({"machine": facts, "ms": ms}, f, indent=1)


if __name__ == "__main__":
    main()
