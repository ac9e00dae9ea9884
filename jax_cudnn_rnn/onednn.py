"""The oneDNN backend's public names (its code: jax_cudnn_rnn/backends/onednn/)."""

from jax_cudnn_rnn import _deprecated
from jax_cudnn_rnn.backends.onednn import backend as _backend
from jax_cudnn_rnn.backends.onednn.backend import (
    cpu_choice,
    unsupported_reason,
)
from jax_cudnn_rnn.backends.onednn.extension import (
    cpu_runtime,
    extension_error,
    extension_loaded,
    release_scratch,
)

__all__ = [
    "CPU_TABLE",
    "DTYPES",
    "TABLE_MEASURED",
    "cpu_choice",
    "cpu_runtime",
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
#: What ``implementation=None`` runs on the CPU, per (mode, dtype): rows of (step multiply-adds below which the row
#: applies, the implementation undifferentiated, the implementation under jax.grad); read by ``cpu_choice``.
CPU_TABLE = _backend.CPU_TABLE
#: Where and how ``CPU_TABLE`` was measured.
TABLE_MEASURED = _backend.TABLE_MEASURED
