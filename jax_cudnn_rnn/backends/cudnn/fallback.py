"""A GPU user expects cuDNN: ``rnn(implementation=None)`` lowered for CUDA runs the xla implementation where cuDNN
cannot run the call, and says so once per process and reason (``CudnnFallbackWarning``): without a loaded cuDNN
extension, and for a call cuDNN does not support there (``wiring.unsupported``: bfloat16 on a GPU older than Ampere or
with a libcudnn older than 9.13).

``note_fallback`` is called by ``ops.rnn`` for every call: it warns at once when tracing knows the call runs on CUDA;
when the platform is not known yet (``jax.jit`` over uncommitted arrays), it marks ``x`` with an identity primitive
that lowers to nothing anywhere and warns when lowered for CUDA.
"""

from __future__ import annotations

import functools
import threading
import warnings

import jax
import jax.extend
from jax.interpreters import ad, mlir
from jax.interpreters import batching as jax_batching

from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.cudnn import extension, wiring


class CudnnFallbackWarning(UserWarning):
    """``rnn(implementation=None)`` runs on CUDA without cuDNN (the extension is not loaded, or cuDNN does not support
    the call there): the xla implementation runs instead. Pass ``implementation="xla"`` to choose it on purpose."""


_warned: set[str] = set()
_lock = threading.Lock()


def _warn(message: str) -> None:
    """Warns ``message``, once per process: a reason that holds for one call holds for the process's next ones."""
    with _lock:
        if message in _warned:
            return
        _warned.add(message)
    warnings.warn(CudnnFallbackWarning(message), stacklevel=4)


def _missing_extension() -> str:
    return (f"rnn(implementation=None) runs the xla implementation on CUDA, not cuDNN, because the cuDNN extension is "
            f"not loaded: {extension.extension_error()}. To run cuDNN, fix that as it says (the README's GPU install: "
            f"`pip install \"jax[cuda13]\"`, then this package with its `cuda` extra; `jax-cudnn-rnn info` shows the "
            f"result); to run the xla implementation on purpose, pass implementation='xla'. Said once per process.")


def _fallback_message(call: Call) -> str | None:
    """What to tell a user whose ``call`` with implementation=None runs the xla implementation when lowered for CUDA,
    or None when cuDNN runs it or this process sees no GPU (then lowering for CUDA is an export, not a fallback on the
    user's GPU). Where cuDNN cannot run the call, its backend says why (``wiring.unsupported``)."""
    if not extension.extension_loaded():
        return _missing_extension()
    if wiring.unavailable() is not None:
        return None
    reason = wiring.unsupported(call)
    if reason is None:
        return None
    return (f"rnn(implementation=None) runs the xla implementation on CUDA for this call, not cuDNN, which needs "
            f"{reason}. Said once per process.")


_fallback_p = jax.extend.core.Primitive("jax_cudnn_rnn_cudnn_fallback")
_fallback_p.multiple_results = True
_fallback_p.def_impl(lambda *args, message: args)
_fallback_p.def_abstract_eval(lambda *avals, message: avals)
ad.primitive_jvps[_fallback_p] = lambda primals, tangents, message: (_fallback_p.bind(*primals, message=message),
                                                                     tangents)
ad.primitive_transposes[_fallback_p] = lambda cotangents, *args, message: cotangents
jax_batching.primitive_batchers[_fallback_p] = lambda args, dims, message: (_fallback_p.bind(*args, message=message),
                                                                            dims)


def _lower(ctx, *args, message: str, warn: bool):
    if warn:
        _warn(message)
    return args


mlir.register_lowering(_fallback_p, functools.partial(_lower, warn=False))
mlir.register_lowering(_fallback_p, functools.partial(_lower, warn=True), platform="cuda")


def note_fallback(implementation: str | None, call: Call, x: jax.Array) -> jax.Array:
    """``x`` for ``call``, after making sure that ``implementation=None`` does not run the xla implementation silently
    on CUDA (``_fallback_message``): it warns now when the call is known to run on CUDA, and when the platform is not
    known yet, returns ``x`` marked so that lowering for CUDA warns."""
    if implementation is not None or call.placement.platform not in ("cuda", None):
        return x
    message = _fallback_message(call)
    if message is None:
        return x
    if call.placement.platform == "cuda":
        _warn(message)
    else:
        (x,) = _fallback_p.bind(x, message=message)
    return x
