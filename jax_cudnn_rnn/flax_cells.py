"""Deprecated in 0.2.0 (CHANGELOG.md): the plain-Flax cell stack is ``jax_cudnn_rnn.interop.flax_cells``; this
module's names warn and will be removed in 0.3.0."""

from jax_cudnn_rnn import _deprecated

__all__: list[str] = []

__getattr__ = _deprecated.module_getattr(
    "jax_cudnn_rnn.flax_cells",
    {
        name: ("jax_cudnn_rnn.interop.flax_cells", name, f"jax_cudnn_rnn.interop.flax_cells.{name}")
        for name in ("FlaxCellStack", "make_cell")
    },
)
