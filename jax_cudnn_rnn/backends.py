"""The implementations ``rnn()`` can run, and the one place that chooses among them.

Each implementation is a ``Backend``: a name, the lowering platforms it runs on, whether it can run in this process
(an extension loaded, a device present) and which calls it supports, and how to run it. ``CANDIDATES`` lists, per
lowering platform, the names ``rnn(implementation=None)`` tries in order; the first backend that is available and
supports the call runs. A new backend registers itself (``register``) and takes its place in the lists; a platform
whose choice depends on the call's shape can put a chooser function in the list instead of a name.

The platform is the one the computation is lowered for, not ``jax.default_backend()``. When tracing knows it (an eager
call's arrays, a traced array's mesh, ``jax.default_device``: jax_cudnn_rnn/placement.py), the chosen backend is
called directly; otherwise, when the platforms' choices differ, every choice is staged out with
``lax.platform_dependent`` and lowering keeps the one for its platform, so one jitted function serves every platform it
is lowered for (``.lower(lowering_platforms=...)``, ``jax.export(..., platforms=...)``, CPU- or GPU-committed inputs).
Under ``jax.grad`` such a function carries both branches' residuals; XLA drops the unused branch's (zeros) when the
forward and backward are compiled together, as in ``jax.jit(jax.grad(...))``.

``implementation_for`` says what ``rnn()`` picks on a platform; ``jax-cudnn-rnn info`` reports it.

A GPU user expects cuDNN: ``implementation=None`` on CUDA without a loaded cuDNN extension runs the xla implementation
and says so once per process (``CudnnFallbackWarning``, from ``note_missing_cudnn``), when the call is traced for a
known CUDA placement, else when the computation is lowered for CUDA.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend
from jax.interpreters import ad, mlir
from jax.interpreters import batching as jax_batching

from jax_cudnn_rnn import _extension, cudnn, dropout, onednn, placement, segments, xla
from jax_cudnn_rnn.config import RNNConfig

DEFAULT = "default"  # the CANDIDATES entry for platforms without their own


@dataclasses.dataclass(frozen=True)
class Call:
    """What a backend's support may depend on: the network and the call's shape and options (None: not known, as
    when asking what a platform picks in general)."""

    config: RNNConfig | None = None
    max_time: int | None = None
    batch: int | None = None
    seq_lengths: bool = False
    is_training: bool = False
    resets: bool = False


@dataclasses.dataclass(frozen=True)
class Backend:
    """One implementation of ``rnn()``.

    name: ``rnn(implementation=name)``.
    platforms: the lowering platforms it runs on ("cpu", "cuda", ...); None for every platform.
    unavailable: what it needs that this process lacks ("the cuDNN extension, which is not loaded: ..."), or None.
    unsupported: what it needs that a call lacks, or None when it can run the call.
    run: ``run(params, x, h0, c0, seq_lengths, dropout_key, *, config, is_training, precision, algorithm)`` ->
      (y, h_n, c_n), with arguments as ``rnn()`` after validation (precision "float32" or "tensorfloat32", dropout_key
      None unless inter-layer dropout applies); for a call with resets (``Call.resets``) also the keywords ``resets``
      (bool [T, B]) and ``max_segments``. A fused backend without resets of its own runs them through
      ``segments.rnn_segmented``, as cuDNN does; one that cannot says so in ``unsupported``.
    """

    name: str
    platforms: tuple[str, ...] | None
    unavailable: Callable[[], str | None]
    unsupported: Callable[[Call], str | None]
    run: Callable[..., tuple[Any, Any, Any]]


def _dropout_masks(dropout_key, config: RNNConfig, x) -> list[Any] | None:
    """``dropout.masks_for`` x; None without a key."""
    return None if dropout_key is None else dropout.masks_for(dropout_key, config, x.shape)


def _run_xla(implementation: Callable[..., Any]) -> Callable[..., tuple[Any, Any, Any]]:
    def run(params, x, h0, c0, seq_lengths, dropout_key, *, config, is_training, precision, algorithm, resets=None,
            max_segments=None):
        del is_training, algorithm, max_segments  # dropout_key is given exactly when dropout applies
        return implementation(params, x, h0, c0, config, seq_lengths=seq_lengths,
                              dropout_masks=_dropout_masks(dropout_key, config, x), precision=precision,
                              resets=resets)

    return run


def _run_cudnn(params, x, h0, c0, seq_lengths, dropout_key, *, config, is_training, precision, algorithm,
               resets=None, max_segments=None):
    allow_tf32 = precision == "tensorfloat32"
    if resets is None:
        return cudnn.rnn_cudnn(params, x, h0, c0, config, seq_lengths=seq_lengths, is_training=is_training,
                               dropout_key=dropout_key, allow_tf32=allow_tf32, algorithm_policy=algorithm)
    # cuDNN cannot zero the state mid-sequence: every segment becomes a row of its own, xla beyond max_segments.
    fallback = functools.partial(xla.rnn_xla, precision=precision)
    return segments.rnn_segmented(cudnn.backend(allow_tf32, algorithm), fallback, params, x, h0, c0, config,
                                  seq_lengths, resets, _dropout_masks(dropout_key, config, x), max_segments)


def _run_onednn(params, x, h0, c0, seq_lengths, dropout_key, *, config, is_training, precision, algorithm,
                resets=None, max_segments=None):
    # oneDNN's float32 is strict and it has no algorithms to choose; a call with resets never comes here
    # (_onednn_unsupported).
    del is_training, precision, algorithm, resets, max_segments
    return onednn.rnn_onednn(params, x, h0, c0, config, seq_lengths=seq_lengths, dropout_key=dropout_key)


def _onednn_unsupported(call: Call) -> str | None:
    if call.resets:
        return "no resets (oneDNN's RNN primitives cannot zero the state mid-sequence)"
    return None if call.config is None else onednn.unsupported_reason(call.config, True if call.seq_lengths else None)


def _onednn_where_faster(call: Call) -> str:
    """The CPU's first candidate: "onednn" where it is measured faster than "xla" for the call's network and batch
    (``onednn.faster_than_xla``), else "xla"."""
    return "onednn" if call.config is not None and onednn.faster_than_xla(call.config, call.batch) else "xla"


_BACKENDS: dict[str, Backend] = {}
CANDIDATES: dict[str, list[str | Callable[[Call], str]]] = {}


def register(backend: Backend, candidate_for: Sequence[str] = (), before: str | None = None) -> None:
    """Adds ``backend`` (replacing one of the same name) and lists it as a candidate for the platforms
    ``candidate_for`` (``DEFAULT`` for every platform without a list of its own), ahead of ``before`` where that is
    listed, else last."""
    _BACKENDS[backend.name] = backend
    for platform in candidate_for:
        names = CANDIDATES.setdefault(platform, list(CANDIDATES.get(DEFAULT, ())))
        if backend.name in names:
            names.remove(backend.name)
        names.insert(names.index(before) if before in names else len(names), backend.name)


def _always(call: Call) -> None:
    return None


register(Backend("xla", None, lambda: None, _always, _run_xla(xla.rnn_xla)), candidate_for=(DEFAULT,))
register(Backend("reference", None, lambda: None, _always, _run_xla(xla.rnn_reference)))
register(Backend("cudnn", ("cuda",), lambda: cudnn.unavailable(), _always, _run_cudnn), candidate_for=("cuda",),
         before="xla")
register(Backend("onednn", ("cpu",), lambda: onednn.unavailable(), _onednn_unsupported, _run_onednn))
CANDIDATES.setdefault("cpu", list(CANDIDATES[DEFAULT])).insert(0, _onednn_where_faster)


def names() -> tuple[str, ...]:
    """Every registered implementation's name (what ``rnn(implementation=...)`` accepts besides None)."""
    return tuple(_BACKENDS)


_DEVICE_NAMES = {"cuda": "CUDA", "rocm": "ROCm", "cpu": "CPU", "tpu": "TPU"}


def _why_not(name: str, platform: str, call: Call) -> str | None:
    """What ``name`` needs that a call lowered for ``platform`` lacks, or None when it can run it."""
    entry = _BACKENDS[name]
    if entry.platforms is not None and platform not in entry.platforms:
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
        if _why_not(name, platform, call) is None:
            return name
    return "xla"


def _platforms() -> tuple[str, ...]:
    """The platforms with a list of their own (``DEFAULT`` stands for the rest)."""
    return tuple(p for p in CANDIDATES if p != DEFAULT)


_unavailable_p = jax.extend.core.Primitive("jax_cudnn_rnn_unavailable")
_unavailable_p.multiple_results = True
_unavailable_p.def_abstract_eval(lambda *, out_avals, message: out_avals)


def _refuse_lowering(ctx, *, out_avals, message):
    raise RuntimeError(message)


mlir.register_lowering(_unavailable_p, _refuse_lowering)


def _refusing(message: str) -> Callable[..., tuple[Any, Any, Any]]:
    """A stand-in staged out for the platforms a requested implementation cannot run on: tracing it costs nothing,
    lowering it raises RuntimeError(``message``)."""

    def run(params, x, h0, c0, seq_lengths, dropout_key, **options):
        shapes = jax.eval_shape(lambda: _run_xla(xla.rnn_xla)(params, x, h0, c0, seq_lengths, dropout_key, **options))
        avals = tuple(jax.core.ShapedArray(s.shape, s.dtype) for s in jax.tree.leaves(shapes))
        outs = _unavailable_p.bind(out_avals=avals, message=message)
        return jax.tree.unflatten(jax.tree.structure(shapes), outs)

    return run


def resolve(implementation: str | None, call: Call, where: placement.Placement) -> dict[str, str]:
    """{lowering platform (or ``DEFAULT``): implementation name} for a call placed at ``where``: one entry when the
    platform is known or every platform picks the same; raises for an unknown name, and (RuntimeError) for a requested
    implementation that cannot run where the call is known to run."""
    if implementation is not None and implementation not in _BACKENDS:
        raise ValueError(f"implementation is {implementation!r}; expected None or one of {list(names())}")
    if where.platform is not None:
        if implementation is None:
            return {where.platform: implementation_for(where.platform, call)}
        reason = _why_not(implementation, where.platform, call)
        if reason is not None:
            raise RuntimeError(f"implementation={implementation!r} needs {reason}. Use implementation=None to run the "
                               "best implementation available there.")
        return {where.platform: implementation}
    if implementation is not None:
        entry = _BACKENDS[implementation]
        reason = entry.unavailable() or entry.unsupported(call)
        if reason is not None:
            raise RuntimeError(f"implementation={implementation!r} needs {reason}. Use implementation=None to run "
                               "the best implementation available.")
        if entry.platforms is None:
            return {DEFAULT: implementation}
        return {**{p: implementation for p in entry.platforms}, DEFAULT: ""}  # "": refused when lowered elsewhere
    default = implementation_for(DEFAULT, call)
    # Platforms that pick what the rest pick need no branch of their own.
    choices = {p: name for p in _platforms() if (name := implementation_for(p, call)) != default}
    return {**choices, DEFAULT: default}


class CudnnFallbackWarning(UserWarning):
    """``rnn(implementation=None)`` runs on CUDA without cuDNN (the extension is not loaded): the xla implementation
    runs instead. Pass ``implementation="xla"`` to choose it on purpose."""


_fallback_warned = False
_fallback_lock = threading.Lock()


def _warn_cudnn_fallback() -> None:
    """Warns, once per process, that CUDA runs the xla implementation because the cuDNN extension is not loaded."""
    global _fallback_warned
    with _fallback_lock:
        if _fallback_warned:
            return
        _fallback_warned = True
    warnings.warn(CudnnFallbackWarning(
        f"rnn(implementation=None) runs the xla implementation on CUDA, not cuDNN, because the cuDNN extension is not "
        f"loaded: {_extension.extension_error()}. To run cuDNN, fix that as it says (the README's GPU install: `pip "
        f"install \"jax[cuda13]\"`, then this package with its `cuda` extra; `jax-cudnn-rnn info` shows the "
        f"result); to run the xla implementation on purpose, pass implementation='xla'. Said once per process."),
        stacklevel=4)


# Marks a call that runs without cuDNN where the platform is not known at trace time: an identity on its operands
# whose CUDA lowering warns (_warn_cudnn_fallback) and which lowers to nothing anywhere.
_cudnn_fallback_p = jax.extend.core.Primitive("jax_cudnn_rnn_cudnn_fallback")
_cudnn_fallback_p.multiple_results = True
_cudnn_fallback_p.def_impl(lambda *args: args)
_cudnn_fallback_p.def_abstract_eval(lambda *avals: avals)
ad.primitive_jvps[_cudnn_fallback_p] = lambda primals, tangents: (_cudnn_fallback_p.bind(*primals), tangents)
ad.primitive_transposes[_cudnn_fallback_p] = lambda cotangents, *args: cotangents
jax_batching.primitive_batchers[_cudnn_fallback_p] = lambda args, dims: (_cudnn_fallback_p.bind(*args), dims)


def _lower_cudnn_fallback(ctx, *args, warn: bool):
    if warn:
        _warn_cudnn_fallback()
    return args


mlir.register_lowering(_cudnn_fallback_p, functools.partial(_lower_cudnn_fallback, warn=False))
mlir.register_lowering(_cudnn_fallback_p, functools.partial(_lower_cudnn_fallback, warn=True), platform="cuda")


def note_missing_cudnn(implementation: str | None, where: placement.Placement, x):
    """``x`` for a call placed at ``where``, after making sure that ``implementation=None`` without the cuDNN
    extension does not run silently on CUDA: it warns now when the call is known to run on CUDA, and when the
    platform is not known yet, returns ``x`` marked so that lowering for CUDA warns."""
    if implementation is not None or _extension.extension_loaded():
        return x
    if where.platform == "cuda":
        _warn_cudnn_fallback()
    elif where.platform is None:
        (x,) = _cudnn_fallback_p.bind(x)
    return x


def run(choices: dict[str, str], requested: str | None, params, x, h0, c0, seq_lengths, dropout_key,
        **options) -> tuple[Any, Any, Any]:
    """Runs the call: the one choice directly, or every platform's choice under ``lax.platform_dependent``."""
    if len(choices) == 1:
        return _BACKENDS[next(iter(choices.values()))].run(params, x, h0, c0, seq_lengths, dropout_key, **options)
    branches = {}
    for platform, name in choices.items():
        if name:
            branch = _BACKENDS[name].run
        else:
            platforms = ", ".join(_BACKENDS[requested].platforms)
            branch = _refusing(f"implementation={requested!r} runs only on {platforms}, but this computation is "
                               f"lowered for another platform; use implementation=None to run the best available "
                               f"implementation on each platform")
        branches[platform] = lambda *operands, branch=branch: branch(*operands, **options)
    default = branches.pop(DEFAULT)
    return jax.lax.platform_dependent(params, x, h0, c0, seq_lengths, dropout_key, default=default, **branches)
