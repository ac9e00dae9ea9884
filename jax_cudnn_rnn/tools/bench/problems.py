"""The benchmark problems ``jax-cudnn-rnn bench`` times (``BenchConfig``: the GPU configs A-G, the CPU ones and their
padded batches), what it measures of each (``FWD``: the forward, ``TRAIN``: forward and backward) and in which dtypes.

Imports neither JAX nor this package: a PyTorch contender's worker process (jax_cudnn_rnn/tools/bench/measure.py) loads
it by path, beside contenders.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

FWD, TRAIN = "fwd", "fwd+bwd"
MEASUREMENTS = (FWD, TRAIN)
DTYPES = ("float32", "bfloat16", "float16")
QUICK_SIZES = {"time": 10, "batch": 4, "hidden": 32, "input_size": 32}


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """One benchmark problem. ``time`` x ``batch`` x ``input_size`` input, ``hidden`` units per layer; ``padded``:
    a padded batch whose sequences have the lengths ``lengths()`` (each contender's own way of taking them);
    ``decode``: autoregressive decoding, ``time`` one-step calls that carry the states (a JAX contender's in
    ``lax.scan``, PyTorch's a Python loop of module calls), forward only."""

    name: str
    mode: str
    num_layers: int
    hidden: int
    input_size: int
    batch: int
    time: int
    direction: str = "unidirectional"
    inference_only: bool = False
    platform: str = "gpu"
    padded: bool = False
    decode: bool = False

    @property
    def bidirectional(self) -> bool:
        return self.direction == "bidirectional"

    @property
    def num_gates(self) -> int:
        return {"lstm": 4, "gru": 3}.get(self.mode, 1)

    def rnn_config(self, dtype: str) -> Any:
        import jax_cudnn_rnn as jcr

        return jcr.RNNConfig(
            mode=self.mode,
            num_layers=self.num_layers,
            num_units=self.hidden,
            input_size=self.input_size,
            direction=self.direction,
            dtype=dtype,
        )

    def lengths(self) -> np.ndarray | None:
        """int32 [batch]: the sequences' lengths when ``padded`` (uniform in [T/2, T], the same for every contender,
        the first one T), else None."""
        if not self.padded:
            return None
        lengths = np.random.default_rng(1).integers(self.time // 2, self.time + 1, self.batch).astype(np.int32)
        lengths[0] = self.time
        return lengths

    def describe(self) -> str:
        layers = f"{self.num_layers} layer{'s' if self.num_layers > 1 else ''}"
        extras = (
            [layers]
            + (["bidirectional"] if self.bidirectional else [])
            + (["inference only"] if self.inference_only else [])
            + (["lengths in [T/2, T]"] if self.padded else [])
            + (["T one-step calls (decoding)"] if self.decode else [])
        )
        return f"{self.mode.upper()} T={self.time} B={self.batch} I={self.input_size} H={self.hidden}, " + ", ".join(
            extras
        )

    def shrunk(self) -> BenchConfig:
        """The ``--quick`` form: the same network shape with tiny sizes."""
        return dataclasses.replace(self, **{k: min(v, getattr(self, k)) for k, v in QUICK_SIZES.items()})

    def gemm_flops(self, measurement: str) -> float:
        """Floating-point operations of the problem's matrix products (2 per multiply-add): per step and direction,
        the input and recurrent products B x G*H x (in + H); the training step three times the forward's (the
        forward, the gradients of the inputs and states, the gradients of the weights)."""
        directions = 2 if self.bidirectional else 1
        total = 0.0
        for layer in range(self.num_layers):
            layer_input = self.input_size if layer == 0 else directions * self.hidden
            total += (
                directions * 2.0 * self.time * self.batch * self.num_gates * self.hidden * (layer_input + self.hidden)
            )
        return total if measurement == FWD else 3 * total


GPU_CONFIGS = (
    BenchConfig("A", "lstm", 1, 512, 512, 64, 100),
    BenchConfig("B", "lstm", 2, 512, 512, 1, 100, inference_only=True),
    BenchConfig("C", "lstm", 1, 1024, 1024, 128, 25),
    BenchConfig("D", "lstm", 4, 1024, 512, 64, 200, direction="bidirectional"),
    BenchConfig("E", "gru", 1, 2048, 2048, 32, 750),
    BenchConfig("F", "lstm", 1, 128, 64, 32, 1000),
    # Decoding (issue 39's "G"): 100 one-step calls of a 2-layer LSTM, against PyTorch calling nn.LSTM step by step.
    BenchConfig("G-b1", "lstm", 2, 512, 512, 1, 100, inference_only=True, decode=True),
    BenchConfig("G-b64", "lstm", 2, 512, 512, 64, 100, inference_only=True, decode=True),
)
CPU_CONFIGS = (
    BenchConfig("cpu-lstm", "lstm", 1, 256, 256, 32, 100, platform="cpu"),
    BenchConfig("cpu-gru", "gru", 1, 256, 256, 32, 100, platform="cpu"),
    # Names of at most 8 characters keep the printed table within 100 columns.
    BenchConfig("lstm-b1", "lstm", 1, 256, 256, 1, 100, platform="cpu"),
    BenchConfig("gru-b1", "gru", 1, 256, 256, 1, 100, platform="cpu"),
    BenchConfig("lstm-big", "lstm", 1, 1024, 1024, 64, 25, platform="cpu"),
    BenchConfig("gru-big", "gru", 1, 1024, 1024, 64, 25, platform="cpu"),
)
# The CPU problems as padded batches (issue 41), by name only: the same shapes with lengths in [T/2, T].
PADDED_CONFIGS = tuple(
    dataclasses.replace(c, name=name, padded=True)
    for c, name in zip(CPU_CONFIGS, ("lstm-pad", "gru-pad", "lstmb1p", "grub1p", "lstmbigp", "grubigp"), strict=True)
)
CONFIGS = {c.name: c for c in GPU_CONFIGS + CPU_CONFIGS + PADDED_CONFIGS}
