"""The implementations ``rnn()`` can run, and the one place that decides among them.

Each implementation is a ``Backend``: a name, the lowering platforms it runs on, its priority for
``rnn(implementation=None)``, what it supports (``Supports``, stated once: modes, dtypes, lengths, resets, clipping,
plus the rules only it has), whether it can run in this process, and ``run(call, inputs)``, which receives the call
``ops.rnn`` prepared (jax_cudnn_rnn/backends/call.py). Everything that needs to know what runs where asks here:
``rnn()`` (``run``), ``implementation_for`` (``jax-cudnn-rnn info``, the bench), ``why_not`` (the frontends' errors,
the bench's skipped contenders) and the fallback warning a backend gives when the default passes it over
(``Backend.passed_over``: cuDNN on CUDA).

``rnn(implementation=None)`` runs, per platform, the available backend of highest priority that supports the call and
prefers it (``Backend.prefers``: oneDNN declines the calls its measured table gives to the xla implementation), with
its ``run_default`` (oneDNN's table may pick its forward and its training step separately).

The platform is the one the computation is lowered for, not ``jax.default_backend()``. When tracing knows it (an eager
call's arrays, a traced array's mesh, ``jax.default_device``: jax_cudnn_rnn/sharding/placement.py), the chosen backend
runs directly; otherwise, when the platforms' choices differ, every choice is staged out with
``lax.platform_dependent`` and lowering keeps the one for its platform, so one jitted function serves every platform it
is lowered for (``.lower(lowering_platforms=...)``, ``jax.export(..., platforms=...)``, CPU- or GPU-committed inputs).
Under ``jax.grad`` such a function carries both branches' residuals; XLA drops the unused branch's (zeros) when the
forward and backward are compiled together, as in ``jax.jit(jax.grad(...))``.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.extend
from jax.interpreters import ad, mlir
from jax.interpreters import batching as jax_batching

from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.cells import activations
from jax_cudnn_rnn.sharding import placement

DEFAULT = "default"  # the choice for platforms without one of their own
Outputs = tuple[Any, Any, Any]  # (y, h_n, c_n or None)


@dataclasses.dataclass(frozen=True)
class Supports:
    """What a backend runs, stated once; ``why_not(call)`` says what a call needs that it lacks.

    label: how messages name what lacks a feature ("oneDNN's RNN primitives").
    modes, dtypes: the modes and dtype names it runs; None for every one.
    seq_lengths, resets, cell_clip: whether it runs calls with per-sequence lengths, with resets, with a clipped cell.
    activations: whether it runs other activations than the cells' own (``RNNConfig.activation``,
      ``recurrent_activation``).
    recurrent_dropout: whether it runs calls that apply recurrent dropout (``Call.recurrent_dropout``).
    other: the rules only this backend has (``other(call)``: what the call lacks, or None).
    """

    label: str
    modes: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    seq_lengths: bool = True
    resets: bool = True
    cell_clip: bool = True
    activations: bool = True
    recurrent_dropout: bool = True
    other: Callable[[Call], str | None] = lambda call: None

    def why_not(self, call: Call) -> str | None:
        """What ``call`` needs that these do not give, or None. A call without a config (``implementation_for``
        asking about a platform in general) is only checked for what it says."""
        if call.resets and not self.resets:
            return f"no resets ({self.label} cannot zero the state mid-sequence)"
        if call.seq_lengths and not self.seq_lengths:
            return f"no per-sequence lengths (seq_lengths), which {self.label} do not take"
        if call.recurrent_dropout and not self.recurrent_dropout:
            return (
                f"no recurrent dropout in training (recurrent_dropout > 0 with is_training=True), which {self.label} "
                "do not have"
            )
        config = call.config
        if config is None:
            return None
        if self.modes is not None and config.mode not in self.modes:
            return f"mode {' or '.join(map(repr, self.modes))}: {self.label} do not run {config.mode!r}"
        if self.dtypes is not None and config.dtype.name not in self.dtypes:
            return f"{' or '.join(self.dtypes)}: {self.label} do not run {config.dtype.name}"
        if config.cell_clip is not None and not self.cell_clip:
            return f"no cell clipping (cell_clip), which {self.label} do not have"
        if not config.default_activations and not self.activations:
            given = [
                f"{name}={activations.activation_name(value)}"
                for name in ("activation", "recurrent_activation")
                if (value := getattr(config, name)) is not None
            ]
            own = "the cell's own activations (activation=None, recurrent_activation=None)"
            return f"{own}: {self.label} do not run {', '.join(given)}"
        return self.other(call)


@dataclasses.dataclass(frozen=True)
class Backend:
    """One implementation of ``rnn()``.

    name: ``rnn(implementation=name)``.
    platforms: the lowering platforms it runs on ("cpu", "cuda", ...); None for every platform.
    priority: ``rnn(implementation=None)`` tries the highest first; None: only when asked for by name.
    supports: what it runs (``Supports``).
    unavailable: what it needs that this process lacks ("the cuDNN extension, which is not loaded: ..."), or None.
    run: ``run(call, inputs) -> (y, h_n, c_n)`` for a call it is available for and supports.
    prefers: whether it is the faster choice for a call it runs (``implementation=None`` passes it over otherwise).
    run_default: what runs when ``implementation=None`` chose it (None: ``run``).
    passed_over: the warning to give when ``implementation=None`` runs another backend on one of its platforms
      (a GPU user expects cuDNN), or None to stay silent.
    public: whether it is documented and listed (``names``); an internal one runs only when asked for by name.
    """

    name: str
    platforms: tuple[str, ...] | None
    priority: int | None
    supports: Supports
    unavailable: Callable[[], str | None]
    run: Callable[[Call, Inputs], Outputs]
    prefers: Callable[[Call], bool] = lambda call: True
    run_default: Callable[[Call, Inputs], Outputs] | None = None
    passed_over: Callable[[Call], Warning | None] | None = None
    public: bool = True


_BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> None:
    """Adds ``backend`` (replacing one of the same name)."""
    _BACKENDS[backend.name] = backend


def names() -> tuple[str, ...]:
    """The public implementations' names (what ``rnn(implementation=...)`` documents besides None)."""
    return tuple(name for name, backend in _BACKENDS.items() if backend.public)


def backend(name: str) -> Backend:
    """The registered backend ``name``."""
    return _BACKENDS[name]


_DEVICE_NAMES = {"cuda": "CUDA", "rocm": "ROCm", "cpu": "CPU", "tpu": "TPU"}


def why_not(name: str, platform: str | None, call: Call) -> str | None:
    """What backend ``name`` needs that ``call`` lacks when lowered for ``platform`` (None: not known), or None when
    it can run it."""
    entry = _BACKENDS[name]
    if platform is not None and entry.platforms is not None and platform not in entry.platforms:
        wanted = " or ".join(_DEVICE_NAMES.get(p, p) for p in entry.platforms)
        return f"the arrays on a {wanted} device, but this call runs on {_DEVICE_NAMES.get(platform, platform)}"
    return entry.unavailable() or entry.supports.why_not(call)


def _candidates(platform: str) -> list[Backend]:
    """The backends ``implementation=None`` may run on ``platform`` (``DEFAULT``: one without backends of its own),
    highest priority first."""
    on = [
        b
        for b in _BACKENDS.values()
        if b.priority is not None and (b.platforms is None or (platform != DEFAULT and platform in b.platforms))
    ]
    return sorted(on, key=lambda b: -b.priority)


def _default_for(platform: str, call: Call) -> str:
    for candidate in _candidates(platform):
        if why_not(candidate.name, None if platform == DEFAULT else platform, call) is None and candidate.prefers(call):
            return candidate.name
    return "xla"


def implementation_for(where: Any = None, call: Call = Call()) -> str:
    """The implementation ``rnn(implementation=None)`` runs for ``call`` on ``where``: a lowering platform name
    ("cpu", "cuda", "rocm", "tpu", ...), a ``jax.Device``, a concrete ``jax.Array`` (where it lives), or None (JAX's
    default device)."""
    if isinstance(where, jax.Array) and not isinstance(where, jax.core.Tracer):
        where = placement.of_arrays([where], [None]).platform
    if where is None:
        where = jax.config.jax_default_device or jax.devices()[0]
    return _default_for(placement.lowering_platform(where), call)


def _platforms() -> tuple[str, ...]:
    """The platforms some backend is limited to (``DEFAULT`` stands for the rest)."""
    return tuple(dict.fromkeys(p for b in _BACKENDS.values() if b.platforms for p in b.platforms))


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
            return {platform: _default_for(platform, call)}
        default = _default_for(DEFAULT, call)
        # Platforms that pick what the rest pick need no branch of their own.
        choices = {p: name for p in _platforms() if (name := _default_for(p, call)) != default}
        return {**choices, DEFAULT: default}
    reason = why_not(implementation, platform, call)
    if reason is not None:
        where = " there" if platform is not None else ""
        raise RuntimeError(
            f"implementation={implementation!r} needs {reason}. Use implementation=None to run the "
            f"best implementation available{where}."
        )
    platforms = _BACKENDS[implementation].platforms
    if platform is not None or platforms is None:
        return {platform or DEFAULT: implementation}
    return {**dict.fromkeys(platforms, implementation), DEFAULT: ""}


# ---------------------------------------------------------------------------------------------- the fallback warning

_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn(warning: Warning) -> None:
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
    _warn(warning.warning)
    return args


def note_passed_over(implementation: str | None, call: Call, x: jax.Array) -> jax.Array:
    """``x`` for ``call`` run with ``implementation``, after the backends ``implementation=None`` passes over where
    they expect to run have given their warnings (``run`` does this itself)."""
    return x if implementation is not None else _note_passed_over(call, choose(None, call), x)


def _note_passed_over(call: Call, choices: dict[str, str], x: jax.Array) -> jax.Array:
    """``x``, after each backend that ``implementation=None`` passed over on a platform where it expects to run has
    given its warning: now when the call's platform is known, else when the computation is lowered for that platform
    (``x`` marked)."""
    for entry in _BACKENDS.values():
        if entry.passed_over is None or entry.platforms is None:
            continue
        for platform in entry.platforms:
            if call.placement.platform not in (platform, None):
                continue
            if choices.get(platform, choices.get(DEFAULT)) == entry.name:
                continue
            warning = entry.passed_over(call)
            if warning is None:
                continue
            if call.placement.platform == platform:
                _warn(warning)
                continue
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


# ---------------------------------------------------------------------------------------------- running


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
    platform's choice under ``lax.platform_dependent``. With ``implementation=None``, a backend passed over where it
    expects to run warns (``Backend.passed_over``)."""
    choices = choose(implementation, call)
    if implementation is None:
        inputs = inputs._replace(x=_note_passed_over(call, choices, inputs.x))

    def runner(name: str) -> Callable[[Call, Inputs], Outputs]:
        entry = _BACKENDS[name]
        return (entry.run_default or entry.run) if implementation is None else entry.run

    if len(choices) == 1:
        return runner(next(iter(choices.values())))(call, inputs)
    branches = {}
    for platform, name in choices.items():
        if name:
            branch = runner(name)
        else:
            platforms = ", ".join(_BACKENDS[implementation].platforms)
            branch = _refusing(
                f"implementation={implementation!r} runs only on {platforms}, but this computation is "
                f"lowered for another platform; use implementation=None to run the best available "
                f"implementation on each platform"
            )
        branches[platform] = functools.partial(lambda inputs, branch: branch(call, inputs), branch=branch)
    default = branches.pop(DEFAULT)
    return jax.lax.platform_dependent(inputs, default=default, **branches)
