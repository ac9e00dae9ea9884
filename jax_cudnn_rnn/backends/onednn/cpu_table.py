"""What ``rnn(implementation=None)`` runs on the CPU where oneDNN can run the call: the tables measured per oneDNN
instruction set (``cpu_table.json`` beside this file, each with the CPU it was measured on) and the one that applies
on this CPU.

A CPU differs from the one a table was measured on first in what its kernels can use: oneDNN picks its kernels by its
effective instruction set (AVX2, AVX-512, AVX-512 with bfloat16 instructions, AMX, ...), and so does the comparison with
the xla implementation. A CPU takes the table of the most capable instruction set it has (oneDNN's instruction sets
nest: each includes the ones below it); on a CPU below every measured one, the xla implementation runs. Core counts
and cache sizes are recorded with each table, not ruled on: no measurement so far showed a choice that turns on them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any

from jax_cudnn_rnn.backends.onednn import extension
from jax_cudnn_rnn.config import RNNConfig

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

Rows = tuple[tuple[float, str, str], ...]


@dataclasses.dataclass(frozen=True)
class Table:
    """One measured table. isa: the instruction set it was measured with; measured: where and how (date, cpu, cores,
    software, how); rows: {(mode, dtype): ((largest step in multiply-adds, undifferentiated, under jax.grad), ...)}."""

    isa: str
    measured: dict[str, Any]
    rows: dict[tuple[str, str], Rows]

    def describe(self) -> str:
        m = self.measured
        return f"{m['date']} on a {m['cores']}-core {m['cpu']} ({self.isa}), {m['software']}; {m['how']}"


def _load() -> tuple[Table, ...]:
    data = json.loads((pathlib.Path(__file__).parent / "cpu_table.json").read_text(encoding="utf-8"))
    return tuple(
        Table(
            table["isa"],
            table["measured"],
            {
                tuple(key.split("/")): tuple(
                    (math.inf if bound is None else float(bound), inference, training)
                    for bound, inference, training in rows
                )
                for key, rows in table["rows"].items()
            },
        )
        for table in data["tables"]
    )


TABLES = _load()


def table_for(isa: str | None) -> Table | None:
    """The table a CPU whose oneDNN instruction set is ``isa`` uses: the measured one of the most capable instruction
    set that ``isa`` includes, or None (none does, or ``isa`` is None or unknown)."""
    bits = ISA_BITS.get(isa or "")
    if bits is None:
        return None
    covered = [table for table in TABLES if ISA_BITS[table.isa] & bits == ISA_BITS[table.isa]]
    return max(covered, key=lambda table: ISA_BITS[table.isa], default=None)


TABLE = table_for(extension.effective_cpu_isa())
"""The table this CPU uses (None without the extension, or on a CPU below every measured instruction set)."""
CPU_TABLE: dict[tuple[str, str], Rows] = dict(TABLE.rows) if TABLE is not None else {}
"""``TABLE``'s rows, which ``cpu_choice`` reads."""
TABLE_MEASURED = TABLE.describe() if TABLE is not None else "no table: this CPU is below every measured one"
"""Where and how ``CPU_TABLE`` was measured."""


def step_macs(config: RNNConfig, batch: int) -> int:
    """Multiply-adds of one step of the first layer and direction: B * G * H * (I + hidden)."""
    return batch * config.num_gates * config.num_units * (config.input_size + config.hidden_size)


def cpu_choice(config: RNNConfig, batch: int | None) -> tuple[str, str]:
    """(what runs undifferentiated, what runs under jax.grad) on the CPU for ``config`` at ``batch`` sequences, from
    ``CPU_TABLE``: "xla" for what the table does not cover, and where the batch is not known."""
    rows = CPU_TABLE.get((config.mode, config.dtype.name), ()) if batch is not None else ()
    macs = step_macs(config, batch) if batch is not None else 0
    return next(((inference, training) for bound, inference, training in rows if macs <= bound), ("xla", "xla"))
