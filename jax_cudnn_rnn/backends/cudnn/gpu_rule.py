"""What a call costs on cuDNN against the xla implementation on a GPU, and which of cuDNN's algorithms runs it
fastest: read off the measurements of the GPU's kind (``gpu_measurements.json`` beside this file, shipped, or this
machine's own where its user ran ``jax-cudnn-rnn tune`` on it: jax_cudnn_rnn/backends/cudnn/tuned.py). The cuDNN
backend declares the estimate as its cost (jax_cudnn_rnn/backends/cudnn/backend.py), the registry compares it with the
xla implementation's (jax_cudnn_rnn/backends/registry.py), and a call with ``algorithm=None`` ("measured") runs the
algorithm it names (jax_cudnn_rnn/backends/cudnn/plan.py); nothing here chooses between implementations.

Shape classes. A measured cell stands for the calls of its class: the same mode, dtype and direction, the same
algorithms cuDNN may run (``algorithm.candidates``: the persistent algorithms' limits on the hidden size, lengths, bias
mode, projection, clipping), the precision it was measured in, and time steps, batch, input size, hidden size and
layers each within a factor ``SPAN`` of the cell's. A call in several classes takes the nearest cell's (the smallest
sum of squared log ratios of those five); a call in none, on a GPU kind nothing was measured on, or unlike every cell
in what it runs (resets, dropout between layers: ``measured_problem``), has no estimate, and cuDNN runs it with its
heuristic's algorithm (``registry.PREFERRED``). Within its class a call's estimate on a side (forward: inference;
training: the forward and backward passes under ``jax.grad``) is the cell's: for "measured" and "autotune" the
fastest algorithm measured there, for "heuristic" or a named algorithm that one, each as its time over the xla
implementation's, where the cell measured it.

Classes rather than the CPU rule's curve over a step's multiply-adds (jax_cudnn_rnn/backends/onednn/cpu_rule.py):
on a GPU the winner turns on the shape's parts, not only their product. Config B (2 layers, H=512, one sequence of 100
steps) and config F (one layer, H=128, 32 sequences of 1,000 steps) differ by a third in a step's multiply-adds, yet the
persistent kernels that run F in one launch have no say at B's hidden size; a curve through both would put one's
winner on the other. ``SPAN`` = 4 lets a cell speak for shapes up to 4x smaller or larger in each dimension, short of
its neighbours in the bench's grid (B and F are 32x apart in batch, A and C 4x in time but 2x in batch and size: the
nearer one decides).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any, NamedTuple

from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.cudnn import algorithm
from jax_cudnn_rnn.config import RNNConfig

SIDES = ("forward", "training")
SPAN = 4.0
"""How far a cell speaks for: each of time steps, batch, input size, hidden size and layers within this factor."""


class Cell(NamedTuple):
    """One measured problem (one of ``jax-cudnn-rnn bench``'s GPU configs, ``config``) in one dtype: the network, one
    call's batch and time steps, the xla implementation's milliseconds (forward, training step) and ``ratios``
    {cuDNN algorithm: (forward, training step)}, each its time over the xla implementation's (None: not measured on
    that side)."""

    config: str
    mode: str
    dtype: str
    num_layers: int
    direction: str
    hidden: int
    input_size: int
    batch: int
    time: int
    xla_ms: tuple[float | None, float | None]
    ratios: dict[str, tuple[float | None, float | None]]

    def network(self) -> RNNConfig:
        return RNNConfig(
            self.mode, self.num_layers, self.hidden, self.input_size, direction=self.direction, dtype=self.dtype
        )

    def problem(self, side: str) -> algorithm.Problem:
        """The cuDNN call this cell timed on ``side`` (full-length sequences, strict float32 math)."""
        return algorithm.Problem(self.network(), self.time, self.batch, False, side == SIDES[1], False)


@dataclasses.dataclass(frozen=True)
class Measured:
    """One GPU kind's measurements: the kind (jax's ``device.device_kind``), its compute capability, when and with what
    software they were taken, the float32 precision they ran in ("float32": strict), how, and the cells."""

    device_kind: str
    compute_capability: str
    date: str
    software: str
    precision: str
    how: str
    cells: tuple[Cell, ...]

    def describe(self) -> str:
        return f"{self.date} on an {self.device_kind} (compute capability {self.compute_capability}), {self.software}"


_CELL_FIELDS = Cell._fields


def measured_from(data: dict[str, Any]) -> Measured:
    """A ``Measured`` from its JSON form (gpu_measurements.json's entries, a tuned table, ``tune --gpu-json``);
    ValueError naming what is missing or malformed."""
    missing = [name for name in ("device_kind", "cells") if name not in data]
    if missing:
        raise ValueError(f"a GPU measurement entry needs {', '.join(missing)}; it has {', '.join(sorted(data))}")
    cells = []
    for entry in data["cells"]:
        absent = [name for name in _CELL_FIELDS if name not in entry]
        if absent:
            raise ValueError(f"a GPU measurement cell needs {', '.join(absent)}; it has {', '.join(sorted(entry))}")
        values = {name: entry[name] for name in _CELL_FIELDS}
        values["xla_ms"] = tuple(values["xla_ms"])
        values["ratios"] = {name: tuple(sides) for name, sides in values["ratios"].items()}
        for name in ("num_layers", "hidden", "input_size", "batch", "time"):
            values[name] = int(values[name])
        cells.append(Cell(**values))
    fields = {f.name for f in dataclasses.fields(Measured)} - {"cells"}
    return Measured(**{name: data.get(name, "") for name in fields}, cells=tuple(cells))


def as_json(measured: Measured) -> dict[str, Any]:
    """``measured`` in its JSON form (one object per cell)."""
    return {**dataclasses.asdict(measured), "cells": [cell._asdict() for cell in measured.cells]}


def _load() -> tuple[Measured, ...]:
    data = json.loads((pathlib.Path(__file__).parent / "gpu_measurements.json").read_text(encoding="utf-8"))
    return tuple(measured_from(entry) for entry in data["devices"])


MEASUREMENTS = _load()
"""Every GPU kind's shipped measurements (gpu_measurements.json): none until a device measures them."""


def shipped(kind: str) -> Measured | None:
    """The shipped measurements of GPU kind ``kind``, or None."""
    return next((entry for entry in MEASUREMENTS if entry.device_kind == kind), None)


class Speaking(NamedTuple):
    """A cell that speaks for a GPU kind, what it rests on, and the float32 precision it was measured in."""

    cell: Cell
    source: str
    precision: str


def cells_for(kind: str, tuned: Measured | None) -> list[Speaking]:
    """Every cell that speaks for GPU kind ``kind``: this machine's tuned table's (``tuned``, when it is of that kind)
    for the (mode, dtype) pairs it measured, the shipped measurements' for the rest."""
    found = []
    pairs = set()
    if tuned is not None and tuned.device_kind == kind:
        pairs = {(cell.mode, cell.dtype) for cell in tuned.cells}
        source = f"this machine's tuned table of the {kind} ({tuned.date})"
        found += [Speaking(cell, source, tuned.precision) for cell in tuned.cells]
    entry = shipped(kind)
    if entry is not None:
        source = f"the measurements of the {kind} shipped with this package ({entry.date})"
        found += [
            Speaking(cell, source, entry.precision) for cell in entry.cells if (cell.mode, cell.dtype) not in pairs
        ]
    return found


def measured_problem(call: Call, side: str, batch: int | None = None) -> algorithm.Problem | None:
    """The cuDNN problem whose cost the cells speak to for ``call`` on ``side`` (``batch``: one device's, default the
    call's), or None where they cannot: a shape tracing does not know, resets (run as packed segments), dropout between
    layers (run layer by layer), an input channel added around the kernel."""
    config = call.config
    if config is None or call.max_time is None or call.batch is None or call.resets or call.input_channel:
        return None
    if call.is_training and config.dropout > 0 and config.num_layers > 1:
        return None
    return algorithm.Problem(
        config,
        call.max_time,
        call.batch if batch is None else batch,
        call.seq_lengths,
        side == SIDES[1],
        call.precision == "tensorfloat32",
    )


def distance(problem: algorithm.Problem, cell: Cell, precision: str = "float32") -> float | None:
    """How far ``problem`` lies from ``cell`` (the sum of squared log ratios of time steps, batch, input size, hidden
    size and layers), or None where it is outside the cell's class (see the module docstring)."""
    config, side = problem.config, SIDES[problem.training]
    if (config.mode, config.dtype.name, config.direction) != (cell.mode, cell.dtype, cell.direction):
        return None
    if config.dtype.name == "float32" and problem.allow_tf32 != (precision == "tensorfloat32"):
        return None
    if algorithm.candidates(problem) != algorithm.candidates(cell.problem(side)):
        return None
    gaps = [
        math.log(mine / theirs)
        for mine, theirs in (
            (problem.max_time, cell.time),
            (problem.batch, cell.batch),
            (config.input_size, cell.input_size),
            (config.num_units, cell.hidden),
            (config.num_layers, cell.num_layers),
        )
    ]
    if any(abs(gap) > math.log(SPAN) + 1e-9 for gap in gaps):
        return None
    return sum(gap * gap for gap in gaps)


class Estimate(NamedTuple):
    """An algorithm's time over the xla implementation's for a call on one side, and what it rests on."""

    algorithm: str
    relative: float
    source: str


def estimate(
    problem: algorithm.Problem, requested: str, device: algorithm.DeviceInfo, tuned: Measured | None = None
) -> Estimate | None:
    """The estimate for ``problem`` (its side: ``problem.training``) run with ``rnn(algorithm=requested)`` on a GPU
    described by ``device`` whose kind's tuned table is ``tuned`` (None: none), or None where no measured cell covers
    it: nothing measured of ``device.kind``, no class, or the algorithm it would run not measured there."""
    index = int(problem.training)
    nearest, best = None, math.inf
    for speaking in cells_for(device.kind, tuned):
        gap = distance(problem, speaking.cell, speaking.precision)
        measured_here = any(sides[index] is not None for sides in speaking.cell.ratios.values())
        if gap is not None and gap < best and measured_here:
            nearest, best = speaking, gap
    if nearest is None:
        return None
    cell, source = nearest.cell, nearest.source
    measured = {
        name: sides[index]
        for name, sides in cell.ratios.items()
        if name in algorithm.candidates(problem) and sides[index] is not None
    }
    if requested in (algorithm.MEASURED, algorithm.AUTOTUNE):
        chosen = min(measured, key=measured.__getitem__, default=None)
    elif requested == algorithm.HEURISTIC:
        chosen = algorithm.heuristic(problem, device)
    else:
        chosen = requested
    if chosen not in measured:
        return None
    text = (
        f"{source}: config {cell.config}'s class ({cell.dtype}), cuDNN's {chosen} at {measured[chosen]:.2f}x the xla "
        f"implementation's time"
    )
    return Estimate(chosen, measured[chosen], text)


def fastest(problem: algorithm.Problem, device: algorithm.DeviceInfo, tuned: Measured | None = None) -> str | None:
    """The algorithm measured fastest in ``problem``'s class on ``device``'s kind (``rnn(algorithm=None)``'s), or None
    where no cell covers it (then the heuristic's runs)."""
    found = estimate(problem, algorithm.MEASURED, device, tuned)
    return None if found is None else found.algorithm
