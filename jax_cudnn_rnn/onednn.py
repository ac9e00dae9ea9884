"""The oneDNN backend's public names (its code: jax_cudnn_rnn/backends/onednn/)."""

from jax_cudnn_rnn.backends.onednn.extension import (
           cpu_runtime,
           extension_error,
           extension_loaded,
           module,
           release_scratch,
)
from jax_cudnn_rnn.backends.onednn.wiring import (
           CPU_TABLE,
           DTYPES,
           TABLE_MEASURED,
           cpu_choice,
           unsupported_reason,
)

__all__ = ["CPU_TABLE", "DTYPES", "TABLE_MEASURED", "cpu_choice", "cpu_runtime", "extension_error",
           "extension_loaded", "module", "release_scratch", "unsupported_reason"]
