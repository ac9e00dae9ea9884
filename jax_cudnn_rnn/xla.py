"""Deprecated in 0.2.0 (CHANGELOG.md): the pure-JAX implementations are ``rnn(implementation="xla")`` and
``rnn(implementation="reference")``; this module's names warn and will be removed in 0.3.0."""

from jax_cudnn_rnn import _deprecated

__all__: list[str] = []

__getattr__ = _deprecated.module_getattr(
    "jax_cudnn_rnn.xla",
    {
        "rnn_xla": ("jax_cudnn_rnn._positional", "rnn_xla", 'jax_cudnn_rnn.rnn(..., implementation="xla")'),
        "rnn_reference": (
            "jax_cudnn_rnn._positional",
            "rnn_reference",
            'jax_cudnn_rnn.rnn(..., implementation="reference")',
        ),
    },
)
