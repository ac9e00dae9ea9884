"""The cells, one file each, and the one place that lists them.

A mode at the pure-JAX level is a ``Cell`` (jax_cudnn_rnn/cells/spec.py) in a file of its own, added to ``CELLS``
below: ``RNNConfig`` accepts it, the layout gives it its gates' tensors, the xla and reference implementations run it,
and the native backends, which list the modes their kernels run, refuse it by name (docs/extending.md).
"""

from __future__ import annotations

from jax_cudnn_rnn.cells import activations, elman, gru, gru_reset_before, lstm
from jax_cudnn_rnn.cells.spec import Cell

__all__ = ["CELLS", "MODES", "Cell", "activations"]

#: Every cell by its mode: cuDNN's four in the order cuDNN lists them, then the ones only the pure-JAX
#: implementations run.
CELLS: dict[str, Cell] = {
    cell.mode: cell for cell in (lstm.CELL, gru.CELL, elman.TANH, elman.RELU, gru_reset_before.CELL)
}
#: The values of ``RNNConfig.mode``.
MODES = tuple(CELLS)
