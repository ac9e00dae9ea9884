"""The oneDNN backend's public names (its code: jax_cudnn_rnn/backends/onednn/)."""

from jax_cudnn_rnn.backends.onednn.extension import (
           extension_error,
           extension_loaded,
           module,
           openmp_wait_policy,
)
from jax_cudnn_rnn.backends.onednn.wiring import (
           DTYPES,
           ONEDNN_MIN_STEP_MACS,
           faster_than_xla,
           unsupported_reason,
)

__all__ = ["DTYPES", "ONEDNN_MIN_STEP_MACS", "extension_error", "extension_loaded", "faster_than_xla", "module",
           "openmp_wait_policy", "unsupported_reason"]
