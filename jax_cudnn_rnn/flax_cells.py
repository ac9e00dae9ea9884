"""The plain-Flax cell stack's public path (its code: jax_cudnn_rnn/interop/flax_cells.py)."""

from jax_cudnn_rnn.interop.flax_cells import FlaxCellStack, make_cell

__all__ = ["FlaxCellStack", "make_cell"]
