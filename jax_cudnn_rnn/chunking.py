"""Time chunks on a fused kernel: the public names (the code: jax_cudnn_rnn/backends/fused/chunking.py)."""

from jax_cudnn_rnn.backends.fused.chunking import allow_empty, reverse_rows, run_chunked

__all__ = ["allow_empty", "reverse_rows", "run_chunked"]
