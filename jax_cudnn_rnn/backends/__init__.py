"""The implementations of ``rnn()`` and the registry that chooses among them.

``call`` is the prepared call every backend receives; ``registry`` decides (``hybrid`` runs two sides' choices as
one, ``staging`` what is staged out for lowering); ``xla`` and ``reference`` are pure JAX
over the cells (jax_cudnn_rnn/cells/) and the layer loop (``layers``); ``fused/`` is the kit both native backends are
built from; ``cudnn/`` and ``onednn/`` are those backends.
Importing this package registers every backend (each module registers itself with what it supports and costs; the
registry decides, so the order of import does not matter).
"""

from jax_cudnn_rnn.backends import cudnn, onednn, reference, xla  # noqa: F401  (each registers its backend)
