"""The oneDNN backend's public names (its code: jax_cudnn_rnn/backends/onednn/)."""

from jax_cudnn_rnn.backends.onednn import wiring as _wiring
from jax_cudnn_rnn.backends.onednn.extension import (
           extension_error,
           extension_loaded,
           module,
           openmp_wait_policy,
)
from jax_cudnn_rnn.backends.onednn.wiring import (
           faster_than_xla,
           unsupported_reason,
)

__all__ = ["DTYPES", "ONEDNN_MIN_STEP_MACS", "extension_error", "extension_loaded", "faster_than_xla", "module",
           "openmp_wait_policy", "unsupported_reason"]

#: The dtypes ``implementation="onednn"`` runs (names as ``np.dtype(...).name``).
DTYPES = _wiring.DTYPES
#: The multiply-adds of the first layer's step (B·G·H·(I+hidden)) from which ``faster_than_xla`` picks oneDNN for a
#: float32 LSTM: below it oneDNN's per-call floor loses to the xla implementation (docs/BENCHMARKS.md, the sweep).
ONEDNN_MIN_STEP_MACS = _wiring.ONEDNN_MIN_STEP_MACS
