"""The implementations ``rnn()`` can run, and the one place that chooses among them.

Each implementation is a ``Backend``: a name, the lowering platforms it runs on, whether it can run in this process
(an extension loaded, a device present), which calls it supports, and ``run(call, inputs)``, which receives the call
``ops.rnn`` prepared (jax_cudnn_rnn/backends/call.py) and computes it. Backends register themselves (``register``)
when jax_cudnn_rnn/backends/__init__.py imports them; ``CANDIDATES`` lists, per lowering platform, the names
``rnn(implementation=None)`` tries in order (a chooser function may stand in the list where the choice depends on the
call's shape); the first that is available and supports the call runs.

The platform is the one the computation is lowered for, not ``jax.default_backend()``. When tracing knows it (an eager
call's arrays, a traced array's mesh, ``jax.default_device``: jax_cudnn_rnn/sharding/placement.py), the chosen backend
runs directly; otherwise, when the platforms' choices differ, every choice is staged out with
``lax.platform_dependent`` and lowering keeps the one for its platform, so one jitted function serves every platform it
is lowered for (``.lower(lowering_platforms=...)``, ``jax.export(..., platforms=...)``, CPU- or GPU-committed inputs).
Under ``jax.grad`` such a function carries both branches' residuals; XLA drops the unused branch's (zeros) when the
forward and backward are compiled together, as in ``jax.jit(jax.grad(...))``.

``implementation_for`` says what ``rnn()`` picks on a platform; ``jax-cudnn-rnn info`` reports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend
from jax.interpreters import mlir

from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.sharding import placement

DEFAULT = "default"  # the CANDIDATES entry for platforms without their own
Outputs = tuple[Any, Any, Any]  # (y, h_n, c_n or None)


@dataclasses.dataclass(frozen=True)
class Backend:
    """One implementation of ``rnn()``.

    name: ``rnn(implementation=name)``.
    platforms: the lowering platforms it runs on ("cpu", "cuda", ...); None for every platform.
    unavailable: what it needs that this process lacks ("the cuDNN extension, which is not loaded: ..."), or None.
    unsupported: what it needs that a call lacks, or None when it can run the call.
    run: ``run(call, inputs) -> (y, h_n, c_n)`` for a call it is available for and supports.
    """

    name: str
    platforms: tuple[str, ...] | None
    unavailable: Callable[[], str | None]
    unsupported: Callable[[Call], str | None]
    run: Callable[[Call, Inputs], Outputs]


_BACKENDS: dict[str, Backend] = {}
CANDIDATES: dict[str, list[str | Callable[[Call], str]]] = {}


def register(backend: Backend, candidate_for: Sequence[str] = (), before: str | None = None,
             chooser: Callable[[Call], str] | None = None) -> None:
    """Adds ``backend`` (replacing one of the same name) and lists it as a candidate for the platforms
    ``candidate_for`` (``DEFAULT`` for every platform without a list of its own), ahead of ``before`` where that is
    listed, else last. With ``chooser``, the list gets that function instead of the name: it picks, per call, between
    this backend and another candidate (``chooser(call)`` returns a name)."""
    _BACKENDS[backend.name] = backend
    entry = chooser or backend.name
    for platform in candidate_for:
        names = CANDIDATES.setdefault(platform, list(CANDIDATES.get(DEFAULT, ())))
        if entry in names:
            names.remove(entry)
        names.insert(names.index(before) if before in names else len(names), entry)


def names() -> tuple[str, ...]:
    """Every registered implementation's name (what ``rnn(implementation=...)`` accepts besides None)."""
    return tuple(_BACKENDS)


_DEVICE_NAMES = {"cuda": "CUDA", "rocm": "ROCm", "cpu": "CPU", "tpu": "TPU"}


def why_not(name: str, platform: str | None, call: Call) -> str | None:
    """What backend ``name`` needs that ``call`` lacks when lowered for ``platform`` (None: not known), or None when
    it can run it."""
    entry = _BACKENDS[name]
    if platform is not None and entry.platforms is not None and platform not in entry.platforms:
        wanted = " or ".join(_DEVICE_NAMES.get(p, p) for p in entry.platforms)
        return f"the arrays on a {wanted} device, but this call runs on {_DEVICE_NAMES.get(platform, platform)}"
    return entry.unavailable() or entry.unsupported(call)


def implementation_for(where: Any = None, call: Call = Call()) -> str:
    """The implementation ``rnn(implementation=None)`` runs for ``call`` on ``where``: a lowering platform name
    ("cpu", "cuda", "rocm", "tpu", ...), a ``jax.Device``, a concrete ``jax.Array`` (where it lives), or None (JAX's
    default device)."""
    if isinstance(where, jax.Array) and not isinstance(where, jax.core.Tracer):
        where = placement.of_arrays([where], [None]).platform
    if where is None:
        where = jax.config.jax_default_device or jax.devices()[0]
    platform = placement.lowering_platform(where)
    for candidate in CANDIDATES.get(platform, CANDIDATES[DEFAULT]):
        name = candidate(call) if callable(candidate) else candidate
        if why_not(name, platform, call) is None:
            return name
    return "xla"


def _platforms() -> tuple[str, ...]:
    """The platforms with a list of their own (``DEFAULT`` stands for the rest)."""
    return tuple(p for p in CANDIDATES if p != DEFAULT)


def choose(implementation: str | None, call: Call) -> dict[str, str]:
    """{lowering platform (or ``DEFAULT``): implementation name} for ``call``: one entry when its platform is known or
    every platform picks the same. Raises ValueError for an unknown name, and RuntimeError for a requested
    implementation that cannot run where the call is known to run ("" in the result: refused when lowered for a
    platform other than the requested implementation's)."""
    if implementation is not None and implementation not in _BACKENDS:
        raise ValueError(f"implementation is {implementation!r}; expected None or one of {list(names())}")
    platform = call.placement.platform
    if implementation is None:
        if platform is not None:
            return {platform: implementation_for(platform, call)}
        default = implementation_for(DEFAULT, call)
        # Platforms that pick what the rest pick need no branch of their own.
        choices = {p: name for p in _platforms() if (name := implementation_for(p, call)) != default}
        return {**choices, DEFAULT: default}
    reason = why_not(implementation, platform, call)
    if reason is not None:
        where = " there" if platform is not None else ""
        raise RuntimeError(f"implementation={implementation!r} needs {reason}. Use implementation=None to run the "
                           f"best implementation available{where}.")
    platforms = _BACKENDS[implementation].platforms
    if platform is not None or platforms is None:
        return {platform or DEFAULT: implementation}
    return {**dict.fromkeys(platforms, implementation), DEFAULT: ""}


_unavailable_p = jax.extend.core.Primitive("jax_cudnn_rnn_unavailable")
_unavailable_p.multiple_results = True
_unavailable_p.def_abstract_eval(lambda *, out_avals, message: out_avals)


def _refuse_lowering(ctx, *, out_avals, message):
    raise RuntimeError(message)


mlir.register_lowering(_unavailable_p, _refuse_lowering)


def _refusing(message: str) -> Callable[[Call, Inputs], Outputs]:
    """A stand-in staged out for the platforms a requested implementation cannot run on: tracing it costs nothing,
    lowering it raises RuntimeError(``message``)."""

    def run(call: Call, inputs: Inputs) -> Outputs:
        shapes = jax.eval_shape(lambda: _BACKENDS["xla"].run(call, inputs))
        avals = tuple(jax.core.ShapedArray(s.shape, s.dtype) for s in jax.tree.leaves(shapes))
        outs = _unavailable_p.bind(out_avals=avals, message=message)
        return jax.tree.unflatten(jax.tree.structure(shapes), outs)

    return run


def run(implementation: str | None, call: Call, inputs: Inputs) -> Outputs:
    """Runs ``call`` on the implementation ``choose`` picks: directly when there is one choice, else every
    platform's choice under ``lax.platform_dependent``."""
    choices = choose(implementation, call)
    if len(choices) == 1:
        return _BACKENDS[next(iter(choices.values()))].run(call, inputs)
    branches = {}
    for platform, name in choices.items():
        if name:
            branch = _BACKENDS[name].run
        else:
            platforms = ", ".join(_BACKENDS[implementation].platforms)
            branch = _refusing(f"implementation={implementation!r} runs only on {platforms}, but this computation is "
                               f"lowered for another platform; use implementation=None to run the best available "
                               f"implementation on each platform")
        branches[platform] = lambda inputs, branch=branch: branch(call, inputs)
    default = branches.pop(DEFAULT)
    return jax.lax.platform_dependent(inputs, default=default, **branches)
