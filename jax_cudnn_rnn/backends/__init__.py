"""The implementations of ``rnn()`` and the registry that chooses among them.

``call`` is the prepared call every backend receives; ``registry`` chooses; ``xla`` and ``reference`` are pure JAX over
``cells``; ``fused/`` is the kit both native backends are built from; ``cudnn/`` and ``onednn/`` are those backends.
Importing this package registers every backend (each module registers itself; the order sets the candidates' order).
"""

from jax_cudnn_rnn.backends import cudnn, onednn, reference, xla  # noqa: F401  (the pure-JAX backends register first: the fallback)  # noqa: F401
