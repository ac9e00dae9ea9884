"""What every contender of ``jax-cudnn-rnn bench`` is set up as: a ``Runner`` of zero-argument calls that block on their
result, the JAX contenders' jitted forward and training step with XLA's memory analysis (``jax_runner``), and the
input all of them take.

Imports neither JAX nor this package at module level: a PyTorch contender's worker process
(jax_cudnn_rnn/tools/bench/measure.py) loads it by path, beside contenders.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

if __package__:
    from jax_cudnn_rnn.tools.bench.problems import FWD, TRAIN, BenchConfig
else:  # loaded by path in a worker (measure.py): problems.py beside it
    from problems import FWD, TRAIN, BenchConfig  # type: ignore[no-redef]


@dataclasses.dataclass
class Runner:
    """A contender set up for one config and dtype: zero-argument calls that run and block on the result."""

    forward: Callable[[], Any]
    train: Callable[[], Any] | None
    reset_peak: Callable[[], None] = lambda: None
    peak_bytes: Callable[[], int | None] = lambda: None
    allocated_bytes: Callable[[], int | None] = lambda: None  # now, for op_bytes = peak - allocated at reset
    compiled_bytes: dict[str, int | None] = dataclasses.field(default_factory=dict)
    op_bytes: dict[str, int | None] = dataclasses.field(default_factory=dict)  # where known without running
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)  # facts for the records (what ran)


def on_gpu() -> bool:
    import jax

    return jax.default_backend() == "gpu"


def jax_peak_bytes() -> int | None:
    import jax

    if not on_gpu():
        return None
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def memory_analysis(fn: Any, *args: Any) -> Any:
    """XLA's memory analysis of the jitted ``fn`` compiled for ``args``, or None where the backend has none."""
    try:
        return fn.lower(*args).compile().memory_analysis()
    except Exception:  # noqa: BLE001 - the analysis is optional on every backend
        return None


def jax_runner(
    forward: Callable[..., Any],
    loss: Callable[..., Any],
    args: tuple[Any, ...],
    inference_only: bool,
    extra_bytes: dict[str, int | None] | None = None,
) -> Runner:
    """Jits ``forward(*args)`` and the gradient of ``loss(*args)`` with respect to its first two arguments.
    ``extra_bytes``: per measurement, device memory the step takes outside XLA's buffers (cuDNN's workspace)."""
    import jax

    fwd = jax.jit(forward)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    runner = Runner(forward=lambda: jax.block_until_ready(fwd(*args)), train=None, peak_bytes=jax_peak_bytes)
    if not inference_only:
        runner.train = lambda: jax.block_until_ready(grad(*args))
    for measurement, fn in ((FWD, fwd), (TRAIN, grad))[: 1 if inference_only else 2]:
        stats = memory_analysis(fn, *args)
        if stats is None:
            continue
        step = stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes
        runner.compiled_bytes[measurement] = int(stats.argument_size_in_bytes + step)
        extra = (extra_bytes or {}).get(measurement, 0)
        runner.op_bytes[measurement] = None if extra is None else int(step + extra)
    return runner


def sum_squares(y: Any) -> Any:
    import jax.numpy as jnp

    return jnp.sum(jnp.square(y.astype(jnp.float32)))


def inputs(bc: BenchConfig) -> np.ndarray:
    """The time-major input [T, B, I] as float32 NumPy (each contender casts it)."""
    return np.random.default_rng(0).standard_normal((bc.time, bc.batch, bc.input_size), dtype=np.float32)


def short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return first[:300]
