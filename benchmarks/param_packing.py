"""What the linen modules' named parameters cost: a jitted training step (value_and_grad, then optax's Adam) of
``jax_cudnn_rnn.flax.LSTM``/``GRU`` (the named canonical tensors, packed into the opaque buffer on each call) against
the same module keeping one opaque buffer as its parameter (the design before 0.2), with the same weight space, on
the bench's CPU shapes, on oneDNN and on the xla implementation. Each (shape, dtype, implementation, contender) runs
in a process of its own, rounds alternating the contenders; the fastest median over the rounds is kept.

    python benchmarks/param_packing.py [--rounds 3] [--repeats 20] [--implementations onednn,xla]
                                       [--dtypes float32] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

# (name, mode, hidden = input size, batch, time steps): jax_cudnn_rnn/tools/bench's CPU configurations.
SHAPES = (
    ("cpu-lstm", "lstm", 256, 32, 100),
    ("cpu-gru", "gru", 256, 32, 100),
    ("lstm-b1", "lstm", 256, 1, 100),
    ("gru-b1", "gru", 256, 1, 100),
    ("lstm-big", "lstm", 1024, 64, 25),
    ("gru-big", "gru", 1024, 64, 25),
)
CONTENDERS = ("named", "buffer")


def worker(contender: str, shape: str, implementation: str, dtype: str, repeats: int) -> dict[str, float]:
    """{contender: median ms of one training step} in this process; contender "both" times the two alternately (for
    a machine under load, where only their ratio means something)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    from jax_cudnn_rnn import _flax_core
    from jax_cudnn_rnn import flax as jcr_flax
    from jax_cudnn_rnn.params import RNNParams

    _, mode, hidden, batch, steps = next(s for s in SHAPES if s[0] == shape)
    named = (jcr_flax.LSTM if mode == "lstm" else jcr_flax.GRU)(hidden, implementation=implementation, dtype=dtype)
    config = named.rnn_config(hidden)

    class Buffer(nn.Module):
        """The module as it was: one RNNParams parameter, the same weight space and call."""

        @nn.compact
        def __call__(self, x):
            params = self.param("rnn_params", lambda key: RNNParams.init(key, config))
            return _flax_core.apply_rnn(params, x, compute_dtype=dtype, time_major=False, implementation=implementation)

    x = jax.random.normal(jax.random.key(0), (batch, steps, hidden), dtype)
    optimizer = optax.adam(1e-3)

    def training(module):
        params = module.init(jax.random.key(1), x)["params"]

        @jax.jit
        def step(params, state):
            def loss(p):
                return jnp.mean(module.apply({"params": p}, x).astype(jnp.float32) ** 2)

            value, grads = jax.value_and_grad(loss)(params)
            updates, state = optimizer.update(grads, state, params)
            return optax.apply_updates(params, updates), state, value

        carried = [params, optimizer.init(params)]
        for _ in range(3):
            *carried, value = step(*carried)
        value.block_until_ready()

        def once() -> float:
            start = time.perf_counter()
            carried[0], carried[1], value = step(*carried)
            value.block_until_ready()
            return time.perf_counter() - start

        return once

    runs = {
        name: training(named if name == "named" else Buffer()) for name in CONTENDERS if contender in (name, "both")
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, once in runs.items():
            times[name].append(once())
    return {name: 1e3 * sorted(t)[len(t) // 2] for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--implementations", default="onednn,xla")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--shapes", default=",".join(s[0] for s in SHAPES))
    parser.add_argument("--interleaved", action="store_true", help="both contenders in one process, alternately")
    parser.add_argument("--json")
    parser.add_argument("--worker", nargs=4, metavar=("CONTENDER", "SHAPE", "IMPLEMENTATION", "DTYPE"))
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.repeats)))
        return
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    print(f"{cpu}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}", flush=True)
    best: dict[tuple[str, ...], float] = {}
    for _ in range(args.rounds):
        for shape in args.shapes.split(","):
            for implementation in args.implementations.split(","):
                for dtype in args.dtypes.split(","):
                    for contender in ("both",) if args.interleaved else CONTENDERS:
                        command = [sys.executable, __file__, "--repeats", str(args.repeats), "--worker"]
                        out = subprocess.run(
                            [*command, contender, shape, implementation, dtype],
                            capture_output=True,
                            text=True,
                            check=True,
                        ).stdout
                        for name, ms in json.loads(out.strip().splitlines()[-1]).items():
                            key = (shape, implementation, dtype, name)
                            best[key] = min(best.get(key, float("inf")), ms)
    rows = []
    header = "| shape | implementation | dtype | named ms | buffer ms | named / buffer |"
    print(header, "| --- | --- | --- | --- | --- | --- |", sep="\n")
    for shape in args.shapes.split(","):
        for implementation in args.implementations.split(","):
            for dtype in args.dtypes.split(","):
                named, buffer = (best[(shape, implementation, dtype, c)] for c in CONTENDERS)
                rows.append(dict(shape=shape, implementation=implementation, dtype=dtype, named=named, buffer=buffer))
                print(f"| {shape} | {implementation} | {dtype} | {named:.2f} | {buffer:.2f} | {named / buffer:.3f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cpu": cpu, "cores": os.cpu_count(), "interleaved": args.interleaved, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
