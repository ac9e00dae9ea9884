"""jax-cudnn-rnn: cuDNN's fused LSTM/GRU/RNN kernels for JAX, with a pure-JAX path over the same parameter bytes.

Quick tour::

    import jax, jax.numpy as jnp
    import jax_cudnn_rnn as jcr

    cfg = jcr.RNNConfig(mode="lstm", num_layers=2, num_units=128, input_size=64)
    params = jcr.init_params(jax.random.key(0), cfg)          # 1-D opaque buffer, cuDNN's weight space
    weights, biases = jcr.params_to_canonical(params, cfg)    # canonical lists (portable)
    y, h_n, c_n = jcr.rnn(params, x, h0, c0, cfg)             # x [T, B, 64] time-major

``export(fn)(*args)`` is ``jax.export`` for functions that use the package, on any implementation (``export_needs``
says what the artifact needs where it runs). ``extension_loaded()``/``extension_error()`` speak of the cuDNN
extension, the one this package is named after; ``jax_cudnn_rnn.onednn`` has the oneDNN extension's.
"""

from jax_cudnn_rnn import _deprecated
from jax_cudnn_rnn.backends.cudnn.extension import extension_error, extension_loaded
from jax_cudnn_rnn.backends.cudnn.fallback import CudnnFallbackWarning
from jax_cudnn_rnn.backends.exporting import export, export_needs
from jax_cudnn_rnn.backends.registry import implementation_for
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.layout import (
    canonical_to_params,
    init_params,
    params_size,
    params_to_canonical,
    params_to_tree,
    tree_to_params,
)
from jax_cudnn_rnn.models import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh
from jax_cudnn_rnn.ops import rnn
from jax_cudnn_rnn.params import RNNParams

__version__ = "0.2.0.dev0"

__all__ = [
    "CudnnFallbackWarning",
    "CudnnGRU",
    "CudnnLSTM",
    "CudnnRNNRelu",
    "CudnnRNNTanh",
    "RNNConfig",
    "RNNParams",
    "canonical_to_params",
    "export",
    "export_needs",
    "extension_error",
    "extension_loaded",
    "implementation_for",
    "init_params",
    "params_size",
    "params_to_canonical",
    "params_to_tree",
    "rnn",
    "tree_to_params",
]

__getattr__ = _deprecated.module_getattr(
    "jax_cudnn_rnn",
    {
        "dropout_masks": ("jax_cudnn_rnn.dropout", "dropout_masks", "jax_cudnn_rnn.dropout.dropout_masks"),
        "param_slots": ("jax_cudnn_rnn.layout", "param_slots", "jax_cudnn_rnn.layout.param_slots"),
    },
)
