"""The pure-JAX implementations' public names (their code: jax_cudnn_rnn/backends/xla.py, reference.py)."""

from jax_cudnn_rnn.backends.reference import rnn_reference
from jax_cudnn_rnn.backends.xla import rnn_xla

__all__ = ["rnn_reference", "rnn_xla"]
