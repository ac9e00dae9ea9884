"""The cuDNN backend's public names (its code: jax_cudnn_rnn/backends/cudnn/)."""

from jax_cudnn_rnn.backends.cudnn.exporting import EXPORT_ADVICE, export
from jax_cudnn_rnn.backends.cudnn.extension import (
    cudnn_library_path,
    extension_error,
    extension_loaded,
    registered_targets,
)
from jax_cudnn_rnn.backends.cudnn.wiring import MAX_TIME_STEPS

__all__ = ["EXPORT_ADVICE", "MAX_TIME_STEPS", "cudnn_library_path", "export", "extension_error", "extension_loaded",
           "registered_targets"]
