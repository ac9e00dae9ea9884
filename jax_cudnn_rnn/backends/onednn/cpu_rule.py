"""What a call costs on oneDNN against the xla implementation, on this CPU: the rule fitted to the measurements
(``cpu_measurements.json`` beside this file), or to this machine's own where its user ran ``jax-cudnn-rnn tune``
(jax_cudnn_rnn/backends/onednn/tuned.py). The registry (jax_cudnn_rnn/backends/registry.py) compares the estimates;
nothing here chooses.

The rule. What oneDNN's kernels are on a CPU follows from its instruction set (oneDNN's effective ISA): for float32,
AVX2 or AVX-512 kernels, the latter on an AMX CPU a class of its own; for bfloat16, AMX tiles, native bfloat16 dot
products (``avx512_core_bf16``), emulated ones (AVX-512 without them: 2-4x oneDNN's float32 time), or none (below
AVX-512, which the backend's ``Supports`` refuses). That is the CPU's class for a dtype (``kernel_class``); a class
that measured nothing of a call falls back to the class below it whose kernels it also has (``FALLBACK``). Every
measurement of a class counts, whichever CPU it came from: per (class, mode, dtype, side, implementation), the log of
the measured time over the xla implementation's is a function of the log of the first layer's step in multiply-adds
(``step_macs``), the CPUs' measurements pooled at a step (``_pooled``: their mean where each CPU measured each
implementation), linear between measured steps and constant beyond them (``Curve``). A call's estimate is that
function at its step, for what the class (or its fallback) has measured; for anything else (another mode, a class
nothing was measured on) there is none, and the xla implementation runs.

Core counts and cache sizes are recorded with each CPU's measurements and not used yet: every CPU measured so far has
two cores, so no measurement shows how a choice moves with them; the AVX2 class's two CPUs (a Zen 3, L2 512 KiB a
core, and a Zen 4 capped at AVX2, 1 MiB) disagree at two small cells, too few to say whether the cache decides. A tuned
table replaces the shipped measurements for the (mode, dtype) pairs it measured: those are this machine's own.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np

from jax_cudnn_rnn.config import RNNConfig

SIDES = ("forward", "training")

# oneDNN's instruction sets as the bits of dnnl_cpu_isa_t (oneapi/dnnl/dnnl_types.h): a set includes another when it
# has all of its bits.
ISA_BITS = {
    "sse41": 0x1,
    "avx": 0x3,
    "avx2": 0x7,
    "avx2_vnni": 0xF,
    "avx2_vnni_2": 0x1F,
    "avx512_core": 0x27,
    "avx512_core_vnni": 0x67,
    "avx512_core_bf16": 0xE7,
    "avx512_core_fp16": 0x1EF,
    "avx512_core_amx": 0xFEF,
    "avx512_core_amx_fp16": 0x1FEF,
}


def includes(isa: str | None, other: str) -> bool:
    """Whether instruction set ``isa`` has every instruction of ``other`` (False for an unknown or None ``isa``)."""
    bits = ISA_BITS.get(isa or "")
    return bits is not None and bits & ISA_BITS[other] == ISA_BITS[other]


def kernel_class(isa: str | None, dtype: str) -> str | None:
    """What oneDNN's RNN kernels in ``dtype`` are on a CPU of instruction set ``isa``: "avx512 amx", "avx512", "avx2"
    (float32), "bf16 amx", "bf16 native", "bf16 emulated" (bfloat16), or None (none, or none measured). AMX marks a
    class of its own in both dtypes: its tile products (bfloat16) and the server cores that have it (two 512-bit FMA
    units, where a Zen 4 splits its AVX-512 into 256-bit halves) put oneDNN's kernels and the xla implementation's
    dots at other ratios than on the CPUs of the class below it (issue 61: the large bfloat16 GRU's forward ran 37.6 ms
    on "onednn:gemm" against 53.9 on the primitive that the Zen 4's measurements picked)."""
    amx = includes(isa, "avx512_core_amx")
    if dtype == "float32":
        if includes(isa, "avx512_core"):
            return "avx512 amx" if amx else "avx512"
        return "avx2" if includes(isa, "avx2") else None
    if dtype == "bfloat16":
        if includes(isa, "avx512_core_bf16"):
            return "bf16 amx" if amx else "bf16 native"
        return "bf16 emulated" if includes(isa, "avx512_core") else None
    return None


#: The class a class's estimates fall back to where it measured nothing of a (mode, dtype, side, implementation): the
#: one below it whose kernels it also runs (an AMX CPU has AVX-512's and AVX512-BF16's instructions too). Such an
#: estimate says so, and ``outside_fit`` tells ``jax-cudnn-rnn info``.
FALLBACK = {"avx512 amx": "avx512", "bf16 amx": "bf16 native"}


def step_macs(config: RNNConfig, batch: int) -> int:
    """Multiply-adds of one step of the first layer and direction: B * G * H * (I + hidden)."""
    return batch * config.num_gates * config.num_units * (config.input_size + config.hidden_size)


class Cell(NamedTuple):
    """One measured shape: ``ratios`` {implementation: (forward, training step)}, each its time over the xla
    implementation's (None where not measured on that side)."""

    mode: str
    dtype: str
    hidden: int  # = input size
    batch: int
    time: int
    ratios: dict[str, tuple[float | None, float | None]]

    @property
    def macs(self) -> int:
        config = RNNConfig(self.mode, 1, self.hidden, self.hidden)
        return step_macs(config, self.batch)


@dataclasses.dataclass(frozen=True)
class Measured:
    """One CPU's measurements: what it is (model, oneDNN instruction set, cores, caches where known), when and how it
    was measured, and its cells."""

    cpu: str
    isa: str
    cores: int | None
    l2_kib_per_core: int | None
    l3_kib: int | None
    date: str
    software: str
    how: str
    cells: tuple[Cell, ...]

    def describe(self) -> str:
        return f"{self.date} on a {self.cores}-core {self.cpu} ({self.isa}), {self.software}"


def measured_from(data: dict[str, Any]) -> Measured:
    """A ``Measured`` from its JSON form (cpu_measurements.json's entries, a tuned table)."""
    cells = tuple(
        Cell(mode, dtype, int(hidden), int(batch), int(time), {k: tuple(v) for k, v in ratios.items()})
        for mode, dtype, hidden, batch, time, ratios in data["cells"]
    )
    fields = {f.name for f in dataclasses.fields(Measured)} - {"cells"}
    return Measured(**{name: data.get(name) for name in fields}, cells=cells)


def as_json(measured: Measured) -> dict[str, Any]:
    """``measured`` in its JSON form (cells as lists)."""
    return {**dataclasses.asdict(measured), "cells": [[*cell[:5], cell.ratios] for cell in measured.cells]}


def _load() -> tuple[Measured, ...]:
    data = json.loads((pathlib.Path(__file__).parent / "cpu_measurements.json").read_text(encoding="utf-8"))
    return tuple(measured_from(entry) for entry in data["cpus"])


MEASUREMENTS = _load()
"""Every CPU's shipped measurements (cpu_measurements.json), each with the CPU it was measured on."""


class Curve(NamedTuple):
    """log(ratio) against log(step multiply-adds) at the measured steps, ascending: linear between them, constant
    beyond them."""

    log_macs: np.ndarray
    log_ratio: np.ndarray

    def at(self, macs: int) -> float:
        return math.exp(float(np.interp(math.log(macs), self.log_macs, self.log_ratio)))


Key = tuple[str, str, str, str]  # (mode, dtype, side, implementation)


def curves(measured: Iterable[Measured], dtype_class: str | None = None) -> dict[Key, Curve]:
    """The curves of ``measured`` per (mode, dtype, side, implementation), pooling every CPU given, or only those whose
    class for the cell's dtype is ``dtype_class`` (None: all, as for one machine's own table). At each measured step
    the implementations' log ratios are pooled by ``_pooled``."""
    steps: dict[tuple[str, str, str, int], dict[int, dict[str, float]]] = {}
    for index, entry in enumerate(measured):
        for cell in entry.cells:
            if dtype_class is not None and kernel_class(entry.isa, cell.dtype) != dtype_class:
                continue
            for implementation, sides in cell.ratios.items():
                for side, ratio in zip(SIDES, sides, strict=True):
                    if ratio is not None:
                        at = steps.setdefault((cell.mode, cell.dtype, side, cell.macs), {})
                        at.setdefault(index, {})[implementation] = math.log(ratio)
    points: dict[Key, dict[int, float]] = {}
    for (mode, dtype, side, macs), logs in steps.items():
        for implementation, log_ratio in _pooled(logs).items():
            points.setdefault((mode, dtype, side, implementation), {})[macs] = log_ratio
    return {
        key: Curve(np.log(np.array(sorted(at), float)), np.array([at[m] for m in sorted(at)]))
        for key, at in points.items()
    }


def _pooled(logs: dict[int, dict[str, float]]) -> dict[str, float]:
    """The log ratio of each implementation at one step, from ``logs`` {CPU: {implementation: log ratio}}: the least
    squares fit of log r[cpu, implementation] = a[implementation] + u[cpu], the CPUs' offsets u summing to 0, gives a.
    Where every CPU measured every implementation that is the mean of their logs; where a variant was measured on
    some CPUs only, it is read against what those CPUs measured beside it, not against the others' mean (the AVX2
    class, 2026-11-29: "onednn:gemm" measured on the Zen 3 alone at 0.82 of xla, where the primitive took 0.74 there
    and 1.04 on the capped Zen 4; by the plain means the gemm looked the faster). One CPU's are its own logs, without
    the fit."""
    if len(logs) == 1:
        return next(iter(logs.values()))
    cpus = list(logs)
    implementations = sorted({name for row in logs.values() for name in row})
    rows, values = [], []
    for p, row in logs.items():
        for name, value in row.items():
            rows.append([float(name == n) for n in implementations] + [float(p == q) for q in cpus])
            values.append(value)
    rows.append([0.0] * len(implementations) + [1.0] * len(cpus))
    values.append(0.0)
    solution = np.linalg.lstsq(np.array(rows), np.array(values), rcond=None)[0]
    return dict(zip(implementations, solution[: len(implementations)].tolist(), strict=True))


@functools.cache
def _class_curves(dtype_class: str) -> dict[Key, Curve]:
    return curves(MEASUREMENTS, dtype_class)


_last_tuned: list[tuple[Measured, dict[Key, Curve]]] = []


def _tuned_curves(tuned: Measured) -> dict[Key, Curve]:
    """``curves([tuned])``, built once for the table last asked about (``tuned.this_machine()`` gives the same object
    at every call; its cells hold dicts, so it cannot key a hashing cache)."""
    last = _last_tuned[:1]
    if last and last[0][0] is tuned:
        return last[0][1]
    built = curves([tuned])
    _last_tuned[:] = [(tuned, built)]
    return built


def measured_at(dtype_class: str) -> list[str]:
    """The instruction sets whose measurements the class pools (none: the rule estimates nothing for it)."""
    return list(
        dict.fromkeys(
            entry.isa
            for entry in MEASUREMENTS
            if any(kernel_class(entry.isa, cell.dtype) == dtype_class for cell in entry.cells)
        )
    )


def estimate(
    config: RNNConfig, batch: int, side: str, implementation: str, *, isa: str | None, tuned: Measured | None = None
) -> tuple[float, str] | None:
    """(time over the xla implementation's, what the number rests on) for a call of ``config`` over ``batch``
    sequences on ``side`` run by ``implementation`` ("onednn", "onednn:plain"), on a CPU of instruction set ``isa``
    whose tuned table is ``tuned`` (None: none); None where nothing measured covers it."""
    key = (config.mode, config.dtype.name, side, implementation)
    macs = step_macs(config, batch)
    if tuned is not None and any((c.mode, c.dtype) == key[:2] for c in tuned.cells):
        curve = _tuned_curves(tuned).get(key)
        return None if curve is None else (curve.at(macs), f"this machine's tuned table ({tuned.date})")
    own = kernel_class(isa, config.dtype.name)
    dtype_class = own
    while dtype_class is not None:
        curve = _class_curves(dtype_class).get(key)
        if curve is not None:
            isas = ", ".join(measured_at(dtype_class))
            source = f"the rule fitted to the shipped measurements ({dtype_class} kernels, measured at {isas})"
            if dtype_class != own:
                source += f", this CPU's {own} kernels not measured there: `jax-cudnn-rnn tune` measures them"
            return curve.at(macs), source
        dtype_class = FALLBACK.get(dtype_class)
    return None


# A call of at most ``gemm.IN_PLACE_STEPS`` steps on the buffer (a decoding step, a rollout's): "onednn:gemm" reads
# the weights where they lie in it, where oneDNN's primitives reorder them at every call (a GRU step, B=1, H=512: 2.7
# ms against 0.16) and the xla implementation copies them out. Its time over the xla implementation's, the median of
# the measured ratios per side (one layer, I=H, GRU and LSTM, B 1/4/64, H 128/512; 2026-11-29, the Zen 3, AVX2:
# lab/bench/cpu-2026-11-29-short-call-in-place-zen3.json); the shorter curves' per-step estimates do not see the
# per-call preparation, which dominates at one step.
SHORT_CALL = {"onednn:gemm": {"forward": 0.557, "training": 0.717}}
SHORT_CALL_SOURCE = "a call of few steps: onednn:gemm reads the weights in place (measured on a Zen 3, AVX2)"


def short_call(side: str, implementation: str) -> tuple[float, str] | None:
    """(time over the xla implementation's, what it rests on) of a call of at most ``gemm.IN_PLACE_STEPS`` steps on
    the opaque buffer run by ``implementation`` on ``side``: ``SHORT_CALL``'s, None (not estimated: not chosen) for
    the implementations that prepare the weights at every call."""
    ratios = SHORT_CALL.get(implementation)
    return None if ratios is None else (ratios[side], SHORT_CALL_SOURCE)


def outside_fit(isa: str | None) -> str | None:
    """Why the rule's estimates on a CPU of instruction set ``isa`` rest on other CPUs' classes than its own (or on
    nothing), for ``jax-cudnn-rnn info``; None where each of its classes (float32, bfloat16) has measurements of its
    own or oneDNN has no kernels for it."""
    notes = []
    for dtype in ("float32", "bfloat16"):
        own = kernel_class(isa, dtype)
        if own is None or measured_at(own):
            continue
        below = FALLBACK.get(own)
        while below is not None and not measured_at(below):
            below = FALLBACK.get(below)
        notes.append(
            f"{dtype} ({own} kernels): estimated from {below} measurements"
            if below
            else f"{dtype} ({own} kernels): nothing measured, the default runs xla"
        )
    if not notes:
        return None
    return (
        f"the CPU rule was fitted on other CPUs than this one ({isa}) for {'; '.join(notes)}; `jax-cudnn-rnn tune` "
        "measures this machine, and the default then estimates from its own table"
    )
