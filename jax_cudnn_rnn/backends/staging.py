"""What the registry (jax_cudnn_rnn/backends/registry.py) stages out when tracing does not know the platform a call
is lowered for: a marker that gives a backend's fallback warning when lowered for its platform, and a stand-in that
refuses to be lowered where a requested implementation cannot run. Neither decides anything: the registry says what to
warn and what to refuse.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.extend
from jax.interpreters import ad, mlir
from jax.interpreters import batching as jax_batching

from jax_cudnn_rnn.backends.call import Call, Inputs

Outputs = tuple[Any, Any, Any]  # (y, h_n, c_n or None)

# ---------------------------------------------------------------------------------------------- the fallback warning

_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(warning: Warning) -> None:
    """Gives ``warning`` once per process and message: a reason that holds for one call holds for the next ones."""
    with _warned_lock:
        if str(warning) in _warned:
            return
        _warned.add(str(warning))
    warnings.warn(warning, stacklevel=5)


# Marks x when the platform is not known at trace time: an identity that lowers to nothing and, when lowered for a
# platform whose expected backend was passed over, gives that backend's warning.
_passed_over_p = jax.extend.core.Primitive("jax_cudnn_rnn_passed_over")
_passed_over_p.multiple_results = True
_passed_over_p.def_impl(lambda *args, warning, platform: args)
_passed_over_p.def_abstract_eval(lambda *avals, warning, platform: avals)
ad.primitive_jvps[_passed_over_p] = lambda primals, tangents, **params: (
    _passed_over_p.bind(*primals, **params),
    tangents,
)
ad.primitive_transposes[_passed_over_p] = lambda cotangents, *args, **params: cotangents
jax_batching.primitive_batchers[_passed_over_p] = lambda args, dims, **params: (
    _passed_over_p.bind(*args, **params),
    dims,
)
mlir.register_lowering(_passed_over_p, lambda ctx, *args, warning, platform: args)
_lowering_platforms: set[str] = set()


def _lower_warning(ctx, *args, warning, platform: str):
    del ctx, platform  # registered for that platform only
    warn_once(warning.warning)
    return args


def warn_when_lowered(x: jax.Array, warning: Warning, platform: str) -> jax.Array:
    """``x``, marked so that lowering the computation for ``platform`` gives ``warning`` (once per process)."""
    if platform not in _lowering_platforms:
        mlir.register_lowering(_passed_over_p, _lower_warning, platform=platform)
        _lowering_platforms.add(platform)
    (x,) = _passed_over_p.bind(x, warning=_Hashable(warning), platform=platform)
    return x


@dataclasses.dataclass(frozen=True)
class _Hashable:
    """A warning as a primitive's parameter (parameters must hash)."""

    warning: Warning

    def __hash__(self) -> int:
        return hash((type(self.warning), str(self.warning)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Hashable) and (type(self.warning), str(self.warning)) == (
            type(other.warning),
            str(other.warning),
        )

    def __str__(self) -> str:
        return str(self.warning)


# ---------------------------------------------------------------------------------------------- the refusal

_unavailable_p = jax.extend.core.Primitive("jax_cudnn_rnn_unavailable")
_unavailable_p.multiple_results = True
_unavailable_p.def_abstract_eval(lambda *, out_avals, message: out_avals)


def _refuse_lowering(ctx, *, out_avals, message):
    raise RuntimeError(message)


mlir.register_lowering(_unavailable_p, _refuse_lowering)


def refusing(message: str, shaped_like: Callable[[Call, Inputs], Outputs]) -> Callable[[Call, Inputs], Outputs]:
    """A stand-in staged out for the platforms a requested implementation cannot run on: it has the outputs of
    ``shaped_like`` (traced abstractly: nothing runs), and lowering it raises RuntimeError(``message``)."""

    def run(call: Call, inputs: Inputs) -> Outputs:
        shapes = jax.eval_shape(lambda: shaped_like(call, inputs))
        avals = tuple(jax.core.ShapedArray(s.shape, s.dtype) for s in jax.tree.leaves(shapes))
        outs = _unavailable_p.bind(out_avals=avals, message=message)
        return jax.tree.unflatten(jax.tree.structure(shapes), outs)

    return run
