"""CPU benchmark: LSTM T=100 B=32 I=H=256 float32, forward and forward+backward, against Flax's scan LSTM and
PyTorch's CPU nn.LSTM when installed. Prints milliseconds (median of --repeats) and ratios to PyTorch and Flax.

    python benchmarks/cpu_lstm.py [--mode lstm|gru] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_cudnn_rnn as jcr


def median_ms(fn, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def bench_ours(cfg, x, h0, c0, repeats, implementation):
    params = jcr.init_params(jax.random.key(0), cfg)

    @jax.jit
    def forward(params, x, h0, c0):
        return jcr.rnn(params, x, h0, c0, cfg, implementation=implementation)[0]

    @jax.jit
    def train_step(params, x, h0, c0):
        return jax.grad(lambda p, x: jnp.sum(jcr.rnn(p, x, h0, c0, cfg, implementation=implementation)[0] ** 2),
                        argnums=(0, 1))(params, x)

    return (median_ms(lambda: forward(params, x, h0, c0).block_until_ready(), repeats),
            median_ms(lambda: jax.block_until_ready(train_step(params, x, h0, c0)), repeats))


def bench_flax(mode, x_bm, hidden, repeats):
    import flax.linen as nn

    cell = nn.OptimizedLSTMCell(hidden) if mode == "lstm" else nn.GRUCell(hidden)
    model = nn.RNN(cell)
    variables = model.init(jax.random.key(0), x_bm)
    forward = jax.jit(model.apply)
    train_step = jax.jit(jax.grad(lambda v, x: jnp.sum(model.apply(v, x) ** 2), argnums=(0, 1)))
    return (median_ms(lambda: forward(variables, x_bm).block_until_ready(), repeats),
            median_ms(lambda: jax.block_until_ready(train_step(variables, x_bm)), repeats))


def bench_torch(mode, x_np, hidden, repeats):
    import torch

    module = (torch.nn.LSTM if mode == "lstm" else torch.nn.GRU)(x_np.shape[-1], hidden)
    x = torch.from_numpy(x_np)

    def forward():
        with torch.no_grad():
            module(x)

    def train_step():
        xg = x.clone().requires_grad_(True)
        (module(xg)[0] ** 2).sum().backward()

    return median_ms(forward, repeats), median_ms(train_step, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["lstm", "gru"], default="lstm")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--time", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    cfg = jcr.RNNConfig(mode=args.mode, num_layers=1, num_units=args.hidden, input_size=args.hidden)
    x_np = np.random.default_rng(0).standard_normal((args.time, args.batch, args.hidden), dtype=np.float32)
    x = jnp.asarray(x_np)
    h0 = jnp.zeros(cfg.state_shape(args.batch))
    c0 = h0 if args.mode == "lstm" else None
    results = {"jcr xla": bench_ours(cfg, x, h0, c0, args.repeats, "xla"),
               "flax nn.RNN": bench_flax(args.mode, jnp.swapaxes(x, 0, 1), args.hidden, args.repeats)}
    try:
        import torch  # noqa: F401

        results["torch cpu"] = bench_torch(args.mode, x_np, args.hidden, args.repeats)
    except ImportError:
        pass
    print(f"{args.mode.upper()} T={args.time} B={args.batch} I=H={args.hidden} float32, jax {jax.__version__}, "
          f"median of {args.repeats}")
    print(f"{'contender':<14}{'fwd ms':>10}{'fwd+bwd ms':>12}")
    for name, (fwd, train) in results.items():
        print(f"{name:<14}{fwd:>10.2f}{train:>12.2f}")
    ours = results["jcr xla"]
    for peer in ("torch cpu", "flax nn.RNN"):
        if peer in results:
            fwd, train = results[peer]
            print(f"ratio jcr/{peer}: fwd {ours[0] / fwd:.2f}  fwd+bwd {ours[1] / train:.2f}")


if __name__ == "__main__":
    main()
