"""Deprecated in 0.2.0 (CHANGELOG.md): time chunks are how the fused backends run long sequences, not a public
interface (``rnn()`` runs them itself); this module's names warn and will be removed in 0.3.0."""

from jax_cudnn_rnn import _deprecated

__all__: list[str] = []

__getattr__ = _deprecated.module_getattr(
    "jax_cudnn_rnn.chunking",
    {
        name: ("jax_cudnn_rnn._positional", name, "jax_cudnn_rnn.rnn, which runs time chunks itself")
        for name in ("allow_empty", "reverse_rows", "run_chunked")
    },
)
