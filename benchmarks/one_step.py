"""What one time step costs through this package against Flax's own cell step on the CPU (issue 60, item 3: porting
autoregressive decoding or an RL rollout to a fused layer must lose nothing).

One step: GRU and LSTM, B in 1, 4, 64, H (= input size) in 128, 512, forward and a gradient (jax.grad of a sum over
the new carry and output, with respect to the parameters, the carry and x), each contender jitted:

- ``flax_cell``: Flax's ``nn.GRUCell`` / ``nn.LSTMCell`` ``apply`` (the baseline);
- ``dropin``: ``jax_cudnn_rnn.flax.RNN(cell)`` over the same cell, T=1, ``initial_carry`` and ``return_carry``;
- ``named``: ``jax_cudnn_rnn.flax.GRU`` / ``LSTM``, likewise;
- ``nnx``: ``jax_cudnn_rnn.nnx.RNN(cell)`` over ``nnx.GRUCell`` / ``nnx.LSTMCell`` (as ``nnx.RNN``), split into
  its graph, parameters and other state (what ``nnx.jit`` traces), the parameters passed as a list;
- ``equinox``: ``jax_cudnn_rnn.equinox.GRU`` / ``LSTM`` (one sequence, as ``eqx.nn`` cells) under ``jax.vmap`` over
  the batch, its arrays the parameters (``eqx.partition``), passed as a list;
- ``keras``: ``jax_cudnn_rnn.keras.GRU`` / ``LSTM`` (``return_state``) through Keras's ``stateless_call`` (what
  Keras's JAX trainer runs), its variables passed as lists;
- ``rnn``: ``jax_cudnn_rnn.rnn()`` on the opaque buffer, time-major [1, B, I].

Every contender's parameters reach the jitted step as plain containers (dicts, lists), whose flattening at each call
costs alike: an ``nnx.State`` argument took 25.7 us to dispatch against 13.2 for the linen cell's dict (an empty jitted
function, 12 arrays, Intel AMX), a fifth of a forward step at H=128, where the flattening of the module's own pytree
is Python's, as ``eqx.Module``'s is.

Decoding (the bench's config G, jax_cudnn_rnn/tools/bench/problems.py): 100 one-step calls of a 2-layer LSTM, H = I =
512, B 1 and 64, forward, in ``lax.scan``: ``flax_scan`` (Flax's ``nn.scan`` of a step of two ``nn.LSTMCell``, the
baseline), ``flax_scan_opt`` (the same with ``nn.OptimizedLSTMCell``), ``named`` (a 2-layer
``jax_cudnn_rnn.flax.LSTM`` called per step) and ``rnn`` (``rnn()`` per step, as the bench's contender).

``contender@implementation`` (``dropin@xla``, ``rnn@onednn:gemm``) times one of this package's contenders with that
``implementation`` rather than the default's choice.

Each (contender, kind) runs in a process of its own; the rounds alternate the contenders and each number is the best
of its rounds, so that a loaded machine shows ratios it can be trusted with more than its absolute times. Within a
process each case is built ``--executables`` times (5), each build its own compiled executable over its own arrays,
the builds timed in turn, and the process's number is their median (``median_seconds``: one executable of a small
step is not a measurement of its program). Records the CPU, its feature flags, oneDNN's ISA and kernel class, the jax
version and the threads this process may use.

Each worker first settles glibc's allocator (``settle_allocator``, ``--allocator fresh`` skips it): a new process that
has held no array larger than a step's gradients (1 MiB per kernel at H=512) keeps glibc's first thresholds, under
which the heap that XLA's freed outputs return to shrinks after every call (``madvise(MADV_DONTNEED)``) and the next
call's outputs fault in anew, a page at a time. One Flax LSTM cell's gradient at B=4, H=512 took 1,212 faults and
0.70 ms a call in such a process, 3 and 0.45 ms after one 16 MiB array had been allocated and freed; the drop-in's
1,623 and 1.6-1.9 ms, then 1 and 0.34 (three executables, AMD Zen 5, 2026-12-01). Which contender's process happened
to free a larger array first (the named modules' initialization does) decided ratios of up to 5x; a program that has
loaded its data has done so.

    python benchmarks/one_step.py [--rounds 3] [--executables 5] [--json out.json] [--quick] [--threads 1]
        [--label "loaded machine"] [--skip-steps | --skip-decode] [--contenders flax_cell,equinox,dropin@xla]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import timeit

MODES = ("gru", "lstm")
BATCHES = (1, 4, 64)
HIDDENS = (128, 512)
STEP_CONTENDERS = ("flax_cell", "dropin", "named", "nnx", "equinox", "keras", "rnn")
DECODE_CONTENDERS = ("flax_scan", "flax_scan_opt", "named", "rnn")
DECODE = {"layers": 2, "hidden": 512, "time": 100, "batches": (1, 64)}  # config G
SETTLE_BYTES = 16 << 20  # glibc's dynamic mmap threshold follows the largest freed mapping, up to 32 MiB


def settle_allocator() -> None:
    """Allocates, writes and frees one array of ``SETTLE_BYTES``: glibc then serves the step's buffers from its heap
    and keeps their pages between calls (the module's docstring), as in a program that has held a larger array."""
    import numpy as np

    np.ones(SETTLE_BYTES // 4, np.float32)


def median_seconds(builds, budget: float) -> float:
    """The median over ``builds`` ((fn, args) pairs, each its own compiled executable over its own arrays) of each
    one's best mean time over 7 repeats of about ``budget`` / 7 seconds. The builds are timed in turn within each
    repeat, so that a change in the machine's load falls on all of them alike.

    Several executables, because one executable of a small step is not a measurement of its program: the same HLO
    compiled 8 times in one process ran Flax's GRU cell step (B=4, H=128, forward) in 84-126 us (Intel AMX, 2026-11-30),
    a spread wider than the differences this benchmark is for; the median of several is the program's typical time."""
    import statistics

    import jax

    numbers = []
    for fn, args in builds:
        jax.block_until_ready(fn(*args))
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        numbers.append(max(3, int(budget / 7 / max(time.perf_counter() - start, 1e-6))))
    best = [float("inf")] * len(builds)
    for _ in range(7):
        for i, ((fn, args), number) in enumerate(zip(builds, numbers, strict=True)):
            seconds = timeit.timeit(lambda fn=fn, args=args: jax.block_until_ready(fn(*args)), number=number) / number
            best[i] = min(best[i], seconds)
    return statistics.median(best)


def _step_functions(contender: str, mode: str, batch: int, hidden: int):
    """(forward, gradient, args) of one contender's jitted step; ``contender@implementation`` (``dropin@xla``) runs
    this package's contender with that ``implementation`` instead of the default's choice."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    import jax_cudnn_rnn as jcr
    from jax_cudnn_rnn import flax as jf

    contender, _, implementation = contender.partition("@")
    if implementation and contender in ("flax_cell", "keras"):
        raise ValueError(f"{contender} takes no implementation (got {implementation!r})")
    implementation = implementation or None
    x = jax.random.normal(jax.random.key(0), (batch, hidden))
    cell = (nn.LSTMCell if mode == "lstm" else nn.GRUCell)(hidden)
    carry = cell.initialize_carry(jax.random.key(2), (batch, hidden))
    carry = jax.tree.map(lambda a: jax.random.normal(jax.random.key(3), a.shape), carry)
    if contender == "flax_cell":
        variables = cell.init(jax.random.key(1), carry, x)

        def run(v, c, x):
            return cell.apply(v, c, x)

    elif contender in ("dropin", "named"):
        # either one's carry is the cell's: (c, h) or h
        named = jf.LSTM if mode == "lstm" else jf.GRU
        module = (
            jf.RNN(cell, implementation=implementation)
            if contender == "dropin"
            else named(hidden, implementation=implementation)
        )
        variables = module.init(jax.random.key(1), x[:, None])

        def run(v, c, x):
            c, y = module.apply(v, x[:, None], initial_carry=c, return_carry=True)
            return c, y[:, 0]

    elif contender == "nnx":
        from flax import nnx

        from jax_cudnn_rnn import nnx as jnnx

        rngs = nnx.Rngs(1)
        nnx_cell = (nnx.LSTMCell if mode == "lstm" else nnx.GRUCell)(hidden, hidden, rngs=rngs)
        graph, state, rest = nnx.split(jnnx.RNN(nnx_cell, implementation=implementation), nnx.Param, ...)
        variables, treedef = jax.tree.flatten(state)  # a list: nnx.State's own flattening is Python's

        def run(v, c, x):
            module = nnx.merge(graph, jax.tree.unflatten(treedef, v), rest)
            c, y = module(x[:, None], initial_carry=c, return_carry=True)
            return c, y[:, 0]

    elif contender == "equinox":
        import equinox as eqx

        from jax_cudnn_rnn import equinox as jeqx

        eqx_module = (jeqx.LSTM if mode == "lstm" else jeqx.GRU)(
            hidden, hidden, implementation=implementation, key=jax.random.key(1)
        )
        arrays, static = eqx.partition(eqx_module, eqx.is_array)
        variables, treedef = jax.tree.flatten(arrays)  # a list: a module's own flattening is Python's
        carry = (carry[1][:, None], carry[0][:, None]) if mode == "lstm" else carry[:, None]  # per sequence [1, H]

        def run(v, c, x):
            module = eqx.combine(jax.tree.unflatten(treedef, v), static)
            y, c = jax.vmap(lambda x, c: module(x[None], c))(x, c)
            return c, y[:, 0]

    elif contender == "keras":
        from jax_cudnn_rnn import keras as jk  # the worker's KERAS_BACKEND is "jax" (main)

        layer = (jk.LSTM if mode == "lstm" else jk.GRU)(hidden, return_state=True)
        layer.build((batch, 1, hidden))
        variables = [v.value for v in layer.trainable_variables]
        fixed = [v.value for v in layer.non_trainable_variables]  # the seed generator's state: not differentiated

        def run(v, c, x):
            state = [c[1], c[0]] if mode == "lstm" else [c]  # Keras's [h, c] against Flax's (c, h)
            out, _ = layer.stateless_call(v, fixed, x[:, None], initial_state=state)
            return ((out[2], out[1]) if mode == "lstm" else out[1]), out[0]

    else:
        config = jcr.RNNConfig(mode, 1, hidden, hidden)
        variables = jcr.init_params(jax.random.key(1), config)
        carry = (carry[1][None], carry[0][None]) if mode == "lstm" else carry[None]

        def run(v, c, x):
            h, c0 = (c[0], c[1]) if mode == "lstm" else (c, None)
            y, h_n, c_n = jcr.rnn(v, x[None], h, c0, config, implementation=implementation)
            return ((h_n, c_n) if mode == "lstm" else h_n), y[0]

    def loss(v, c, x):
        c, y = run(v, c, x)
        return jnp.sum(y * y) + sum(jnp.sum(a) for a in jax.tree.leaves(c))

    return jax.jit(run), jax.jit(jax.grad(loss, argnums=(0, 1, 2))), (variables, carry, x)


def _decode_function(contender: str, batch: int):
    """(forward, args) of one contender's decoding loop."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    import jax_cudnn_rnn as jcr
    from jax_cudnn_rnn import flax as jf

    layers, hidden, steps = DECODE["layers"], DECODE["hidden"], DECODE["time"]
    x = jax.random.normal(jax.random.key(0), (steps, batch, hidden))
    zeros = jnp.zeros((batch, hidden))
    if contender.startswith("flax_scan"):
        kind = nn.OptimizedLSTMCell if contender == "flax_scan_opt" else nn.LSTMCell

        class Step(nn.Module):
            @nn.compact
            def __call__(self, carry, x_t):
                new = []
                for layer in range(layers):
                    state, x_t = kind(hidden, name=f"cell{layer}")(carry[layer], x_t)
                    new.append(state)
                return tuple(new), x_t

        scan = nn.scan(Step, variable_broadcast="params", split_rngs={"params": False}, in_axes=0, out_axes=0)()
        carry = tuple((zeros, zeros) for _ in range(layers))
        variables = scan.init(jax.random.key(1), carry, x)
        return jax.jit(lambda v, x: scan.apply(v, carry, x)[1]), (variables, x)
    if contender == "named":
        module = jf.LSTM(hidden, num_layers=layers)
        variables = module.init(jax.random.key(1), x[0][:, None])
        carry = (jnp.zeros((layers, batch, hidden)), jnp.zeros((layers, batch, hidden)))

        def decode(v, x):
            def step(c, x_t):
                c, y = module.apply(v, x_t[:, None], initial_carry=c, return_carry=True)
                return c, y[:, 0]

            return jax.lax.scan(step, carry, x)[1]

        return jax.jit(decode), (variables, x)
    config = jcr.RNNConfig("lstm", layers, hidden, hidden)
    params = jcr.init_params(jax.random.key(1), config)
    h0 = jnp.zeros((layers, batch, hidden))

    def decode(params, x):
        def step(s, x_t):
            y, h, c = jcr.rnn(params, x_t[None], s[0], s[1], config)
            return (h, c), y[0]

        return jax.lax.scan(step, (h0, h0), x)[1]

    return jax.jit(decode), (params, x)


def worker(kind: str, contender: str, mode: str, quick: bool, executables: int) -> dict[str, float]:
    """{case: seconds} of one contender in this process (``median_seconds`` over ``executables`` builds of each
    case); ``kind`` "step" (``mode``'s one step, every batch and hidden size, forward and gradient) or "decode"."""
    budget = 0.05 if quick else 0.2
    out = {}
    if kind == "step":
        for batch in BATCHES:
            for hidden in HIDDENS:
                builds = [_step_functions(contender, mode, batch, hidden) for _ in range(executables)]
                out[f"{mode} B{batch} H{hidden} forward"] = median_seconds([(f, a) for f, _, a in builds], budget)
                out[f"{mode} B{batch} H{hidden} gradient"] = median_seconds([(g, a) for _, g, a in builds], budget)
    else:
        for batch in DECODE["batches"]:
            builds = [_decode_function(contender, batch) for _ in range(executables)]
            out[f"decode B{batch}"] = median_seconds(builds, budget * 5)
    return out


def machine() -> dict[str, object]:
    """The CPU (model, feature flags, oneDNN's ISA and kernel class), jax's version and the threads of this process."""
    import jax

    from jax_cudnn_rnn import onednn
    from jax_cudnn_rnn.backends.onednn import cpu_rule
    from jax_cudnn_rnn.tools.bench import report

    isa = onednn.effective_cpu_isa()
    return {
        "cpu": report.cpu_model(),
        "cpu_features": report.cpu_features(),
        "onednn_isa": isa,
        "kernel_class": cpu_rule.kernel_class(isa, "float32"),
        "jax": jax.__version__,
        "threads": len(os.sched_getaffinity(0)),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="shorter repeats")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--contenders", default=",".join(STEP_CONTENDERS), help="the step's contenders (flax_cell, the baseline, first)"
    )
    parser.add_argument("--skip-decode", action="store_true")
    parser.add_argument("--skip-steps", action="store_true", help="decoding only")
    parser.add_argument(
        "--threads", type=int, default=0, help="1: XLA's CPU client on one thread (a loaded machine); 0: its default"
    )
    parser.add_argument(
        "--executables", type=int, default=5, help="builds of each case per process, their median taken (1: one)"
    )
    parser.add_argument("--label", default="", help='how the machine was, e.g. "loaded machine"')
    parser.add_argument(
        "--allocator",
        choices=("settled", "fresh"),
        default="settled",
        help="settled: each worker frees one 16 MiB array before it builds (settle_allocator); fresh: it does not",
    )
    parser.add_argument("--json")
    parser.add_argument("--worker", nargs=3, metavar=("KIND", "CONTENDER", "MODE"))
    args = parser.parse_args()
    if args.worker:
        if args.allocator == "settled":
            settle_allocator()
        print(json.dumps(worker(*args.worker, args.quick, args.executables)))
        return
    if args.threads == 1:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        )
    facts = machine()
    facts["label"] = args.label
    facts["allocator"] = args.allocator
    facts["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    print(json.dumps(facts), flush=True)
    contenders = args.contenders.split(",")
    jobs = [] if args.skip_steps else [("step", c, m) for m in args.modes.split(",") for c in contenders]
    if not args.skip_decode:
        jobs += [("decode", c, "lstm") for c in DECODE_CONTENDERS]
    best: dict[tuple[str, str], float] = {}
    for round_ in range(args.rounds):
        shift = round_ % len(STEP_CONTENDERS)  # a different contender first each round
        for kind, contender, mode in jobs[shift:] + jobs[:shift]:
            quick = ["--quick"] if args.quick else []
            command = [sys.executable, __file__, *quick, "--executables", str(args.executables)]
            command += ["--allocator", args.allocator]
            command += ["--worker", kind, contender, mode]
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "KERAS_BACKEND": "jax"})
            if done.returncode:
                print(f"{kind} {contender} {mode} failed:\n{done.stderr[-3000:]}", file=sys.stderr, flush=True)
                continue
            for case, seconds in json.loads(done.stdout.strip().splitlines()[-1]).items():
                best[(case, contender)] = min(best.get((case, contender), float("inf")), seconds)
            print(f"round {round_ + 1}: {kind} {contender} {mode} done", file=sys.stderr, flush=True)
    rows = _table(best)
    print(
        f"\n{facts['cpu']}, {facts['threads']} threads, oneDNN ISA {facts['onednn_isa']}, jax {facts['jax']}"
        f", allocator {args.allocator}{', ' + args.label if args.label else ''}"
    )
    print("\n".join(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            cases = sorted({case for case, _ in best})
            json.dump(
                {
                    "machine": facts,
                    "ms": {case: {c: best[(case, c)] * 1e3 for (k, c) in best if k == case} for case in cases},
                },
                f,
                indent=1,
            )


def _table(best: dict[tuple[str, str], float]) -> list[str]:
    """Markdown rows: each case's times in ms and each contender's ratio to the case's baseline."""
    rows = []
    for kind, contenders, baseline in (
        ("step", STEP_CONTENDERS, "flax_cell"),
        ("decode", DECODE_CONTENDERS, "flax_scan"),
    ):
        measured = [(case, c) for case, c in best if case.startswith("decode") == (kind == "decode")]
        if not measured:
            continue
        cases = list(dict.fromkeys(case for case, _ in measured))
        present = dict.fromkeys(c for _, c in measured)
        others = [c for c in contenders if c in present and c != baseline]
        others += [c for c in present if c not in contenders]  # contender@implementation
        rows += [
            "",
            f"| {kind} | {baseline} ms | " + " | ".join(f"{c} ms | {c} / {baseline}" for c in others) + " |",
            "|---" * (2 + 2 * len(others)) + "|",
        ]
        for case in cases:
            base = best.get((case, baseline))
            cells = [f"{base * 1e3:.4f}" if base else "-"]
            for c in others:
                t = best.get((case, c))
                cells += [f"{t * 1e3:.4f}" if t else "-", f"{t / base:.2f}" if t and base else "-"]
            rows.append(f"| {case} | " + " | ".join(cells) + " |")
    return rows


if __name__ == "__main__":
    main()
