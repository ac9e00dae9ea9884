"""The oneDNN backend's public names (its code: jax_cudnn_rnn/backends/onednn/)."""

from jax_cudnn_rnn import _deprecated
from jax_cudnn_rnn.backends.onednn import backend as _backend
from jax_cudnn_rnn.backends.onednn import cpu_table as _cpu_table
from jax_cudnn_rnn.backends.onednn.backend import unsupported_reason
from jax_cudnn_rnn.backends.onednn.cpu_table import cpu_choice
from jax_cudnn_rnn.backends.onednn.extension import (
    cpu_runtime,
    effective_cpu_isa,
    extension_error,
    extension_loaded,
    release_scratch,
)

__all__ = [
    "CPU_TABLE",
    "CPU_TABLES",
    "DTYPES",
    "TABLE_MEASURED",
    "cpu_choice",
    "cpu_runtime",
    "effective_cpu_isa",
    "extension_error",
    "extension_loaded",
    "release_scratch",
    "unsupported_reason",
]

# The raw pybind11 module is the backend's own (jax_cudnn_rnn.backends.onednn.extension.module).
__getattr__ = _deprecated.module_getattr(
    "jax_cudnn_rnn.onednn",
    {"module": ("jax_cudnn_rnn.backends.onednn.extension", "module", "onednn.cpu_runtime() and the other names here")},
)

#: The dtypes ``implementation="onednn"`` runs (names as ``np.dtype(...).name``).
DTYPES = _backend.DTYPES
#: What ``implementation=None`` runs on this CPU, per (mode, dtype): rows of (step multiply-adds below which the row
#: applies, the implementation undifferentiated, the implementation under jax.grad); read by ``cpu_choice``. The table
#: of this CPU's oneDNN instruction set (``effective_cpu_isa()``) among those measured (``CPU_TABLES``); empty on a
#: CPU below every measured one (the xla implementation then runs).
CPU_TABLE = _cpu_table.CPU_TABLE
#: Where and how ``CPU_TABLE`` was measured.
TABLE_MEASURED = _cpu_table.TABLE_MEASURED
#: Every measured table, each with its instruction set and the CPU it was measured on (``cpu_table.json``).
CPU_TABLES = _cpu_table.TABLES
