"""implementation="onednn": oneDNN's fused RNN primitives on the CPU (C++ in onednn/).

``extension`` loads the native module, ``kernels`` is the only caller of its FFI targets, ``backend`` makes them a
differentiable, vmappable backend and registers it with its cost: ``cpu_rule``'s estimate from the measurements in
``cpu_measurements.json``, or from this machine's own (``tuned``, written by ``jax-cudnn-rnn tune``).
``jax_cudnn_rnn.onednn`` is this package's public face.
"""

from jax_cudnn_rnn.backends.onednn import backend  # noqa: F401  (registers the backend)
