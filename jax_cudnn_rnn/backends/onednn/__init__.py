"""implementation="onednn": oneDNN's fused RNN primitives on the CPU (C++ in onednn/).

``extension`` loads the native module, ``kernels`` is the only caller of its FFI targets, ``backend`` makes them a
differentiable, vmappable backend, says where it is the faster one, and registers it. ``jax_cudnn_rnn.onednn`` is this
package's public face.
"""

from jax_cudnn_rnn.backends.onednn import backend  # noqa: F401  (registers the backend)
