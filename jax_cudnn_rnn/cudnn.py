"""The cuDNN backend's own public names: its length limit, its library and targets (its code:
jax_cudnn_rnn/backends/cudnn/; whether it is loaded: ``jax_cudnn_rnn.extension_loaded()``; exporting a function with
cuDNN calls, or any other: ``jax_cudnn_rnn.export``)."""

from jax_cudnn_rnn import _deprecated
from jax_cudnn_rnn.backends.cudnn import backend as _backend
from jax_cudnn_rnn.backends.cudnn import exporting as _exporting
from jax_cudnn_rnn.backends.cudnn.extension import cudnn_library_path, registered_targets

__all__ = ["EXPORT_ADVICE", "MAX_TIME_STEPS", "cudnn_library_path", "registered_targets"]

# One path each: whether the cuDNN extension is loaded is jax_cudnn_rnn.extension_loaded()/extension_error(); exporting
# is jax_cudnn_rnn.export, for every implementation (this one kept CUDA as its default platform).
__getattr__ = _deprecated.module_getattr(
    "jax_cudnn_rnn.cudnn",
    {
        **{
            name: ("jax_cudnn_rnn.backends.cudnn.extension", name, f"jax_cudnn_rnn.{name}")
            for name in ("extension_loaded", "extension_error")
        },
        "export": ("jax_cudnn_rnn.backends.exporting", "cudnn_export", "jax_cudnn_rnn.export(fn, platforms=['cuda'])"),
    },
)

#: What to do instead, in the error that ``jax.export`` of a computation with a cuDNN call raises.
EXPORT_ADVICE = _exporting.EXPORT_ADVICE
#: The most time steps one cuDNN call is given, 65,535 (PyTorch's cuDNN LSTM fails at 65,536: pytorch issue 133751;
#: not yet measured with this library's calls): ``rnn`` runs a longer x as time chunks with the state carried.
MAX_TIME_STEPS = _backend.MAX_TIME_STEPS
