"""implementation="cudnn": cuDNN's fused RNN kernels as XLA FFI custom calls (C++ in cuda/).

``extension`` loads the native module, ``kernels`` is the only caller of its FFI targets, ``algorithm`` and ``plan``
decide each call's algorithm and reserve space while it is traced, ``backend`` makes the kernels a differentiable,
shardable, vmappable backend and registers it, ``exporting`` guards ``jax.export``. ``jax_cudnn_rnn.cudnn`` is this
package's public face.
"""

from jax_cudnn_rnn.backends.cudnn import backend  # noqa: F401  (registers the backend)
