"""A GPU user expects cuDNN: ``rnn(implementation=None)`` lowered for CUDA runs the xla implementation where cuDNN
cannot run the call, and says so once per process and reason (``CudnnFallbackWarning``): without a loaded cuDNN
extension, and for a call cuDNN does not support there (jax_cudnn_rnn/backends/cudnn/backend.py ``unsupported``:
bfloat16 on a GPU older than Ampere or with a libcudnn older than 9.13). The registry decides when to give it
(jax_cudnn_rnn/backends/registry.py, ``Backend.passed_over``); ``passed_over`` says what it says.
"""

from __future__ import annotations

from collections.abc import Callable

from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.cudnn import extension


class CudnnFallbackWarning(UserWarning):
    """``rnn(implementation=None)`` runs on CUDA without cuDNN (the extension is not loaded, or cuDNN does not support
    the call there): the xla implementation runs instead. Pass ``implementation="xla"`` to choose it on purpose."""


def passed_over(
    call: Call, unavailable: Callable[[], str | None], unsupported: Callable[[Call], str | None]
) -> CudnnFallbackWarning | None:
    """What to tell a user whose ``call`` with implementation=None runs the xla implementation when lowered for CUDA,
    or None when this process sees no GPU (lowering for CUDA is then an export, not a fallback on the user's GPU).
    ``unavailable``/``unsupported``: the cuDNN backend's own answers."""
    if not extension.extension_loaded():
        return CudnnFallbackWarning(
            f"rnn(implementation=None) runs the xla implementation on CUDA, not cuDNN, because the cuDNN extension is "
            f"not loaded: {extension.extension_error()}. To run cuDNN, fix that as it says (the README's GPU install: "
            f'`pip install "jax[cuda13]"`, then this package with its `cuda` extra; `jax-cudnn-rnn info` shows the '
            f"result); to run the xla implementation on purpose, pass implementation='xla'. Said once per process."
        )
    if unavailable() is not None:
        return None
    reason = unsupported(call)
    if reason is None:
        return None
    return CudnnFallbackWarning(
        f"rnn(implementation=None) runs the xla implementation on CUDA for this call, not "
        f"cuDNN, which needs {reason}. Said once per process."
    )
