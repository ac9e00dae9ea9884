"""The oneDNN backend's public names (its code: jax_cudnn_rnn/backends/onednn/)."""

from jax_cudnn_rnn.backends.onednn.extension import (
           cpu_runtime,
           extension_error,
           extension_loaded,
           module,
)
from jax_cudnn_rnn.backends.onednn.wiring import (
           DTYPES,
           faster_than_xla,
           unsupported_reason,
)

__all__ = ["DTYPES", "cpu_runtime", "extension_error", "extension_loaded", "faster_than_xla", "module",
           "unsupported_reason"]
