"""A GPU user expects cuDNN: ``rnn(implementation=None)`` lowered for CUDA without a loaded cuDNN extension runs the
xla implementation, and says so once per process (``CudnnFallbackWarning``).

``note_missing_cudnn`` is called by ``ops.rnn`` for every call: it warns at once when tracing knows the call runs on
CUDA; when the platform is not known yet (``jax.jit`` over uncommitted arrays), it marks ``x`` with an identity
primitive that lowers to nothing anywhere and warns when lowered for CUDA.
"""

from __future__ import annotations

import functools
import threading
import warnings

import jax
import jax.extend
from jax.interpreters import ad, mlir
from jax.interpreters import batching as jax_batching

from jax_cudnn_rnn.backends.cudnn import extension
from jax_cudnn_rnn.sharding import placement


class CudnnFallbackWarning(UserWarning):
    """``rnn(implementation=None)`` runs on CUDA without cuDNN (the extension is not loaded): the xla implementation
    runs instead. Pass ``implementation="xla"`` to choose it on purpose."""


_warned = False
_lock = threading.Lock()


def _warn() -> None:
    """Warns, once per process, that CUDA runs the xla implementation because the cuDNN extension is not loaded."""
    global _warned
    with _lock:
        if _warned:
            return
        _warned = True
    warnings.warn(CudnnFallbackWarning(
        f"rnn(implementation=None) runs the xla implementation on CUDA, not cuDNN, because the cuDNN extension is not "
        f"loaded: {extension.extension_error()}. To run cuDNN, fix that as it says (the README's GPU install: `pip "
        f"install \"jax[cuda13]\"`, then this package with its `cuda` extra; `jax-cudnn-rnn info` shows the "
        f"result); to run the xla implementation on purpose, pass implementation='xla'. Said once per process."),
        stacklevel=4)


_fallback_p = jax.extend.core.Primitive("jax_cudnn_rnn_cudnn_fallback")
_fallback_p.multiple_results = True
_fallback_p.def_impl(lambda *args: args)
_fallback_p.def_abstract_eval(lambda *avals: avals)
ad.primitive_jvps[_fallback_p] = lambda primals, tangents: (_fallback_p.bind(*primals), tangents)
ad.primitive_transposes[_fallback_p] = lambda cotangents, *args: cotangents
jax_batching.primitive_batchers[_fallback_p] = lambda args, dims: (_fallback_p.bind(*args), dims)


def _lower(ctx, *args, warn: bool):
    if warn:
        _warn()
    return args


mlir.register_lowering(_fallback_p, functools.partial(_lower, warn=False))
mlir.register_lowering(_fallback_p, functools.partial(_lower, warn=True), platform="cuda")


def note_missing_cudnn(implementation: str | None, where: placement.Placement, x: jax.Array) -> jax.Array:
    """``x`` for a call placed at ``where``, after making sure that ``implementation=None`` without the cuDNN
    extension does not run silently on CUDA: it warns now when the call is known to run on CUDA, and when the
    platform is not known yet, returns ``x`` marked so that lowering for CUDA warns."""
    if implementation is not None or extension.extension_loaded():
        return x
    if where.platform == "cuda":
        _warn()
    elif where.platform is None:
        (x,) = _fallback_p.bind(x)
    return x
