"""Leak check: thousands of rnn() calls with changing shapes; prints resident memory (and, on GPU, device memory in
use) after warm-up and at the end. Growth that keeps rising with --calls is a leak; a fixed step is JAX's caches.

    python benchmarks/leak_check.py [--calls 2000] [--implementation xla|cudnn]
"""

from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp

import jax_cudnn_rnn as jcr


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def device_mib() -> float | None:
    stats = jax.devices()[0].memory_stats() or {}
    return stats["bytes_in_use"] / 2**20 if "bytes_in_use" in stats else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--implementation", default="xla")
    args = parser.parse_args()
    cfg = jcr.RNNConfig(mode="lstm", num_layers=2, num_units=16, input_size=8, direction="bidirectional")
    params = jcr.init_params(jax.random.key(0), cfg)
    shapes = [(steps, batch) for steps in (3, 5, 8) for batch in (1, 2, 4)]  # 9 shapes: 9 compilations each
    steps_fn = jax.jit(
        jax.value_and_grad(
            lambda p, x, h, lengths: jnp.sum(
                jcr.rnn(p, x, h, h, cfg, seq_lengths=lengths, implementation=args.implementation)[0] ** 2
            )
        )
    )

    def call(i):
        steps, batch = shapes[i % len(shapes)]
        x = jnp.full((steps, batch, 8), 0.01 * (i % 7))
        h = jnp.zeros(cfg.state_shape(batch))
        lengths = jnp.full((batch,), 1 + i % steps, jnp.int32)
        jax.block_until_ready(steps_fn(params, x, h, lengths))

    for i in range(len(shapes) * 3):
        call(i)
    start_rss, start_dev = resident_mib(), device_mib()
    for i in range(args.calls):
        call(i)
    end_rss, end_dev = resident_mib(), device_mib()
    print(
        f"{args.calls} calls over {len(shapes)} shapes, implementation={args.implementation}, "
        f"backend={jax.default_backend()}"
    )
    print(f"resident memory: {start_rss:.1f} MiB after warm-up -> {end_rss:.1f} MiB (+{end_rss - start_rss:.1f})")
    if start_dev is not None:
        print(f"device memory in use: {start_dev:.1f} MiB -> {end_dev:.1f} MiB (+{end_dev - start_dev:.1f})")


if __name__ == "__main__":
    main()
