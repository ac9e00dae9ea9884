"""The GEMM floor of a one-layer RNN forward on the CPU: what its products alone take, the input product of all steps
(one [T*B, I] x [I, G*H] product) and the T recurrent products ([B, H] x [H, G*H] on weights packed once), on oneDNN's
matmul primitive through this package's extension (what "onednn:gemm" runs), and the same products with ``torch.mm``
beside PyTorch's own ``nn.LSTM``/``nn.GRU`` forward; each framework in a process of its own. A forward cannot be
faster than its products: the floor says how much of a forward's time is the cells' arithmetic and the rest.

    python benchmarks/gemm_floor.py [--mode gru] [--steps 25] [--batch 64] [--hidden 1024] [--dtype bfloat16]
                                    [--repeats 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def _median_ms(fn, repeats: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _package(mode: str, T: int, B: int, H: int, dtype: str, repeats: int) -> dict[str, float]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jax_cudnn_rnn as jcr
    from jax_cudnn_rnn.backends.onednn import kernels

    G = {"lstm": 4, "gru": 3}[mode]
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((T * B, H)), dtype)
    w = jnp.asarray(rng.standard_normal((G * H, H)) * 0.03, dtype)  # [G*H, H]: the buffer's layout
    h = jnp.asarray(rng.standard_normal((B, H)), dtype)
    shape = dict(rows=B, b_shape=(G * H, H), transpose_b=True)
    inputs = jax.jit(lambda x, w: kernels.matmul(x, w, transpose_b=True))
    pack = jax.jit(lambda w: kernels.pack_weights(w, B, transpose_b=True))
    packed = pack(w)

    @jax.jit
    def recurrent(h, packed):  # T products, each on the last one's first H columns (a dependency, as in the network)
        step = lambda c, _: (kernels.matmul_packed(c, packed, **shape)[:, :H].astype(dtype), None)  # noqa: E731
        return jax.lax.scan(step, h, None, length=T)[0]

    config = jcr.RNNConfig(mode=mode, num_layers=1, num_units=H, input_size=H, dtype=dtype)
    params = jnp.asarray(rng.standard_normal(jcr.params_size(config)) * 0.03, dtype)
    xs, h0 = x.reshape(T, B, H), jnp.zeros((1, B, H), dtype)
    c0 = h0 if mode == "lstm" else None
    forward = {
        impl: jax.jit(lambda p, x, h, i=impl: jcr.rnn(p, x, h, c0, config, implementation=i)[0])
        for impl in ("onednn", "onednn:gemm")
    }
    return {
        "input product ms": _median_ms(lambda: inputs(x, w).block_until_ready(), repeats),
        "recurrent products ms": _median_ms(lambda: recurrent(h, packed).block_until_ready(), repeats),
        "packing ms": _median_ms(lambda: pack(w).block_until_ready(), repeats),
        **{
            f"forward {impl} ms": _median_ms(lambda f=f: f(params, xs, h0).block_until_ready(), repeats)
            for impl, f in forward.items()
        },
    }


def _torch(mode: str, T: int, B: int, H: int, dtype: str, repeats: int) -> dict[str, float]:
    import torch

    G = {"lstm": 4, "gru": 3}[mode]
    dt = getattr(torch, dtype)
    x, w, h = torch.randn(T * B, H).to(dt), (torch.randn(G * H, H) * 0.03).to(dt), torch.randn(B, H).to(dt)
    network = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[mode](H, H).to(dt)
    xs = x.reshape(T, B, H)
    with torch.no_grad():
        return {
            "input product ms": _median_ms(lambda: torch.mm(x, w.t()), repeats),
            "recurrent products ms": T * _median_ms(lambda: torch.mm(h, w.t()), repeats),
            "forward torch ms": _median_ms(lambda: network(xs), repeats),
            "threads": torch.get_num_threads(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="gru", choices=("lstm", "gru"))
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--worker", choices=("package", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    problem = (args.mode, args.steps, args.batch, args.hidden, args.dtype, args.repeats)
    if args.worker:
        print(json.dumps((_package if args.worker == "package" else _torch)(*problem)))
        return
    from jax_cudnn_rnn.onednn import effective_cpu_isa
    from jax_cudnn_rnn.tools.bench.report import cpu_model

    results = {
        "problem": dict(zip(("mode", "steps", "batch", "hidden", "dtype", "repeats"), problem, strict=True)),
        "cpu": cpu_model() or platform.processor(),
        "onednn_isa": effective_cpu_isa(),
        "loadavg": os.getloadavg(),
    }
    for worker in ("package", "torch"):
        run = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--worker", worker],
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        )
        results[worker] = json.loads(run.stdout.strip().splitlines()[-1])
    flop = 2 * args.steps * args.batch * args.hidden * {"lstm": 4, "gru": 3}[args.mode] * args.hidden
    for side in ("package", "torch"):
        products = results[side]["input product ms"] + results[side]["recurrent products ms"]
        results[side]["products ms"] = products
        results[side]["products GFLOP/s"] = 2 * flop / products / 1e6
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
