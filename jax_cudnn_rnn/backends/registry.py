"""The implementations ``rnn()`` can run, and the one place that decides among them.

A backend declares what it is and nothing more (``Backend``): its name, the lowering platforms it runs on, what it
supports (``Supports``), what this process lacks for it (``unavailable``), how it runs a prepared call
(``run(call, inputs)``, jax_cudnn_rnn/backends/call.py), the variants it offers for one side or both (``Variant``:
oneDNN's training step whose backward reads plain weights), and what a call costs on it (``cost``: an estimate relative
to the xla implementation's time, or None where it has none). Everything that needs to know what runs where asks here:
``rnn()`` (``run``), ``implementation_for`` (``jax-cudnn-rnn info``, the bench, the demo), ``decide`` (the same with
what decided), ``why_not`` (the frontends' errors, the bench's skipped contenders), ``fallback`` (cuDNN's resets
beyond ``max_segments``), and the warning a backend gives when the default passes it over (``Backend.passed_over``).

Sides. A call runs either undifferentiated (``FORWARD``: inference) or under ``jax.grad`` (``TRAINING``: the training
forward and its backward pass); ``rnn(implementation=None)`` chooses each side separately, per lowering platform
(``decide``): the candidate of lowest estimated cost, where a variant must be more than ``TIE`` faster than its
backend's own run and the two sides run one implementation unless running two is more than ``TIE`` faster on a side.
Where the sides differ the registry runs them as one ``hybrid`` (jax_cudnn_rnn/backends/hybrid.py).

Names (``rnn(implementation=...)``, what ``implementation_for`` returns, the bench's contenders):

* ``"backend"``: the backend's own run on both sides ("xla", "cudnn", "onednn");
* ``"backend:variant"``: the variant on the sides it offers, the backend's own run on the others ("onednn:plain": its
  inference forward undifferentiated, its backward on plain weights under jax.grad);
* ``"forward+training"``: one name per side, each offered on its side ("onednn+xla": oneDNN undifferentiated, the xla
  implementation under jax.grad).

A pair is named in its shortest form (``name``), so that ``implementation_for``'s answer, passed back as
``implementation``, runs exactly what the default ran.

The platform is the one the computation is lowered for, not ``jax.default_backend()``. When tracing knows it (an eager
call's arrays, a traced array's mesh, ``jax.default_device``: jax_cudnn_rnn/sharding/placement.py), the chosen
implementation runs directly; otherwise, when the platforms' choices differ, every choice is staged out with
``lax.platform_dependent`` and lowering keeps the one for its platform, so one jitted function serves every platform it
is lowered for. Under ``jax.grad`` such a function carries both branches' residuals; XLA drops the unused branch's
(zeros) when the forward and backward are compiled together, as in ``jax.jit(jax.grad(...))``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from jax_cudnn_rnn._buffer import Pieces
from jax_cudnn_rnn.backends import staging
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.declaration import (  # noqa: F401 - what backends declare, re-exported for them
    FORWARD,
    PREFERRED,
    SIDES,
    TRAINING,
    UNIT,
    Backend,
    Cost,
    Outputs,
    Run,
    Variant,
)
from jax_cudnn_rnn.backends.hybrid import hybrid
from jax_cudnn_rnn.backends.supports import Supports
from jax_cudnn_rnn.sharding import placement

DEFAULT = "default"  # the choice for platforms without one of their own
BASELINE = "xla"
"""The implementation every estimate is relative to (its cost is ``UNIT``), which runs every call on every platform:
what runs where nothing else can."""
TIE = 1.05
"""Estimates within 5 % are a tie (the spread between processes of one measurement): a variant runs only where it is
estimated more than this much faster than its backend's own run, and a call runs two implementations only where that
is more than this much faster on one side than running one of them on both."""


def packing(run: Run, oriented: bool = False) -> Run:
    """``run`` for a backend that takes the buffer only: a frontend's ``Pieces`` packed into it first; ``oriented``:
    for one that takes ``Pieces`` in their slots' orientation only (``Pieces.canonical``). One function per (run,
    oriented), however they are passed."""
    return _packing(run, bool(oriented))


@functools.cache
def _packing(run: Run, oriented: bool) -> Run:
    def given(call: Call, inputs: Inputs):
        params = inputs.params
        if isinstance(params, Pieces):
            params = params.canonical() if oriented else params.buffer()
        return run(call, inputs._replace(params=params))

    return given


_BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> None:
    """Adds ``backend`` (replacing one of the same name)."""
    _BACKENDS[backend.name] = backend


def names() -> tuple[str, ...]:
    """The backends' names (what ``rnn(implementation=...)`` documents besides None and the forms of the module
    docstring)."""
    return tuple(_BACKENDS)


def backend(name: str) -> Backend:
    """The registered backend ``name``."""
    return _BACKENDS[name]


def sides_of(name: str) -> tuple[str, ...]:
    """The sides a single name ("backend", "backend:variant") is offered for: a backend's own run both, a variant
    those it declares."""
    backend_name, _, variant = name.partition(":")
    return _BACKENDS[backend_name].variants[variant].sides if variant else SIDES


def implementations(platform: str | None = None, by_default: bool = False) -> tuple[str, ...]:
    """Every single name ("backend", "backend:variant") of the backends that run on ``platform`` (None: any), what the
    bench and ``jax-cudnn-rnn tune`` time one by one; ``by_default``: only those with a cost, which the default may
    choose."""
    found = []
    for entry in _BACKENDS.values():
        if platform is not None and entry.platforms is not None and platform not in entry.platforms:
            continue
        if by_default and entry.cost is None:
            continue
        found += [entry.name, *(f"{entry.name}:{variant}" for variant in entry.variants)]
    return tuple(found)


# ---------------------------------------------------------------------------------------------- names


class _Run(NamedTuple):
    """One side's implementation: its backend, its variant ("" for the backend's own) and what runs it."""

    backend: Backend
    variant: str

    @property
    def name(self) -> str:
        return f"{self.backend.name}:{self.variant}" if self.variant else self.backend.name

    @property
    def run(self) -> Run:
        own = self.backend.variants[self.variant] if self.variant else self.backend
        return own.run if own.takes_pieces and own.takes_transposed else packing(own.run, own.takes_pieces)

    @property
    def supports(self) -> Supports:
        variant = self.backend.variants.get(self.variant)
        return variant.supports if variant is not None and variant.supports is not None else self.backend.supports

    def offers(self, side: str) -> bool:
        return not self.variant or side in self.backend.variants[self.variant].sides

    def on(self, side: str) -> _Run:
        """What runs on ``side`` when this is asked for by its single name: itself where offered, else the backend's
        own run."""
        return self if self.offers(side) else _Run(self.backend, "")


def _expected_names() -> str:
    return (
        f"None or one of {list(implementations())}, or 'forward+training' (one of those for each side of jax.grad, "
        f"e.g. 'onednn+xla')"
    )


def _single(name: str, implementation: str) -> _Run:
    backend_name, _, variant = name.partition(":")
    entry = _BACKENDS.get(backend_name)
    if entry is None or (variant and variant not in entry.variants):
        raise ValueError(f"implementation is {implementation!r}; expected {_expected_names()}")
    return _Run(entry, variant)


def _parse(implementation: str) -> tuple[_Run, _Run]:
    """(forward, training) of a name (see the module docstring); ValueError for a name that is not one."""
    if not isinstance(implementation, str):
        raise TypeError(f"implementation must be None or a str, got {type(implementation).__name__} {implementation!r}")
    parts = implementation.split("+")
    if len(parts) == 1:
        one = _single(parts[0], implementation)
        return one.on(FORWARD), one.on(TRAINING)
    if len(parts) != 2:
        raise ValueError(f"implementation is {implementation!r}; expected {_expected_names()}")
    forward, training = (_single(part, implementation) for part in parts)
    for side, run in ((FORWARD, forward), (TRAINING, training)):
        if not run.offers(side):
            offered = " and ".join(run.backend.variants[run.variant].sides)
            raise ValueError(
                f"implementation is {implementation!r}, but {run.name!r} runs only on the {offered} side, not the "
                f"{side} side (name it alone, {run.name!r}, for {run.backend.name!r} on the other side)"
            )
    return forward, training


def _name(forward: _Run, training: _Run) -> str:
    """A pair's shortest name: one name where that name alone runs both sides, else "forward+training"."""
    if training.on(FORWARD) == forward:
        return training.name
    if forward.on(TRAINING) == training:
        return forward.name
    return f"{forward.name}+{training.name}"


def _runner(forward: _Run, training: _Run) -> Run:
    """What runs a pair: one implementation's own run where one name runs both sides, else the hybrid."""
    if training.on(FORWARD) == forward:
        return training.run
    if forward.on(TRAINING) == training:
        return forward.run
    return hybrid(forward.run, training.run, training.backend.mapped_by_jvp and not training.variant)


# ---------------------------------------------------------------------------------------------- deciding

_DEVICE_NAMES = {"cuda": "CUDA", "rocm": "ROCm", "cpu": "CPU", "tpu": "TPU"}


def _why_not_run(run: _Run, platform: str | None, call: Call) -> str | None:
    entry = run.backend
    if platform is not None and entry.platforms is not None and platform not in entry.platforms:
        wanted = " or ".join(_DEVICE_NAMES.get(p, p) for p in entry.platforms)
        return f"the arrays on a {wanted} device, but this call runs on {_DEVICE_NAMES.get(platform, platform)}"
    return entry.unavailable() or run.supports.why_not(call)


def why_not(name: str, platform: str | None, call: Call) -> str | None:
    """What implementation ``name`` (any form of the module docstring) needs that ``call`` lacks when lowered for
    ``platform`` (None: not known), or None when it can run it."""
    for run in dict.fromkeys(_parse(name)):
        reason = _why_not_run(run, platform, call)
        if reason is not None:
            return reason
    return None


@dataclasses.dataclass(frozen=True)
class Choice:
    """What runs a call on one platform: ``forward`` undifferentiated, ``training`` under jax.grad (single names),
    and what decided each side (``sources``: a ``Cost.source`` per side, or why it was the only choice)."""

    forward: str
    training: str
    sources: tuple[str, str]

    @property
    def name(self) -> str:
        """The pair's name, which ``rnn(implementation=...)`` takes to run exactly this."""
        return _name(*(_parse(name)[i] for i, name in enumerate((self.forward, self.training))))


Estimates = dict[str, dict[str, Cost]]
"""{side: {single name: its estimate}} for the candidates of one call on one platform."""


def pick(estimates: Estimates, own: Callable[[str], str] = lambda name: name.partition(":")[0]) -> tuple[str, str]:
    """(forward, training) from the candidates' estimates (the decision, apart from what can run where): per side the
    lowest estimate, a variant only where more than ``TIE`` faster than its backend's own run (``own(name)``), then
    one implementation on both sides unless two are more than ``TIE`` faster on one side. Both sides need a
    candidate."""
    chosen = {}
    for side in SIDES:
        costs = estimates[side]
        best = min(costs, key=lambda name: costs[name].relative)
        base = own(best)
        if base != best and base in costs and costs[base].relative <= TIE * costs[best].relative:
            best = base
        chosen[side] = best
    forward, training = chosen[FORWARD], chosen[TRAINING]
    if own(forward) != own(training):
        # How much slower each side gets by running the other side's implementation (inf: it cannot).
        bend = {}
        for side, other in ((FORWARD, training), (TRAINING, forward)):
            costs, mine = estimates[side], chosen[side]
            candidate = other if other in costs else own(other)
            if candidate in costs:
                bend[side] = (costs[candidate].relative / max(costs[mine].relative, 1e-12), candidate)
        side = min(bend, key=lambda s: bend[s][0], default=None)
        if side is not None and bend[side][0] <= TIE:
            chosen[side] = bend[side][1]
    return chosen[FORWARD], chosen[TRAINING]


def _candidates(platform: str, call: Call, excluded: str | None = None) -> list[_Run]:
    """The runs ``implementation=None`` may choose on ``platform`` (``DEFAULT``: one without backends of its own) for
    ``call``: those of backends with a cost that run there and can run the call."""
    where = None if platform == DEFAULT else platform
    runs = []
    for entry in _BACKENDS.values():
        if entry.cost is None or entry.name == excluded:
            continue
        if entry.platforms is not None and (platform == DEFAULT or platform not in entry.platforms):
            continue
        for variant in ("", *entry.variants):
            run = _Run(entry, variant)
            if _why_not_run(run, where, call) is None:
                runs.append(run)
    return runs


def estimates(platform: str, call: Call, excluded: str | None = None) -> Estimates:
    """{side: {name: Cost}} of every run ``implementation=None`` may choose for ``call`` on ``platform``, with an
    estimate (``Backend.cost``); ``excluded``: a backend left out (``fallback``)."""
    found: Estimates = {side: {} for side in SIDES}
    for run in _candidates(platform, call, excluded):
        for side in SIDES:
            if run.offers(side) and (cost := run.backend.cost(call, side, run.variant)) is not None:
                found[side][run.name] = cost
    return found


def decide(platform: str, call: Call, excluded: str | None = None) -> Choice:
    """What ``rnn(implementation=None)`` runs for ``call`` lowered for ``platform`` (``DEFAULT``: a platform without
    backends of its own), with what decided (``excluded``: a backend left out, for ``fallback``)."""
    found = estimates(platform, call, excluded)
    if not all(found.values()):  # only the baseline has an estimate everywhere; where it has none, it still runs
        return Choice(BASELINE, BASELINE, ("the only implementation left",) * 2)
    forward, training = pick(found)
    return Choice(forward, training, (found[FORWARD][forward].source, found[TRAINING][training].source))


def lowering_platform(where: Any = None) -> str:
    """The lowering platform of ``where``: a platform name ("cpu", "cuda", "rocm", "tpu", ...), a ``jax.Device``, a
    concrete ``jax.Array`` (where it lives), or None (JAX's default device)."""
    if isinstance(where, jax.Array) and not isinstance(where, jax.core.Tracer):
        where = placement.of_arrays([where], [None]).platform
    if where is None:
        where = jax.config.jax_default_device or jax.devices()[0]
    return placement.lowering_platform(where)


def implementation_for(where: Any = None, call: Call = Call()) -> str:
    """The implementation ``rnn(implementation=None)`` runs for ``call`` on ``where`` (``lowering_platform``'s
    argument). The answer names what runs on each side of jax.grad ("onednn", "onednn+xla": see the module
    docstring), and passed back as ``implementation`` runs exactly that."""
    return decide(lowering_platform(where), call).name


def _platforms() -> tuple[str, ...]:
    """The platforms some backend is limited to (``DEFAULT`` stands for the rest)."""
    return tuple(dict.fromkeys(p for b in _BACKENDS.values() if b.platforms for p in b.platforms))


def choose(implementation: str | None, call: Call) -> dict[str, str]:
    """{lowering platform (or ``DEFAULT``): implementation name} for ``call``: one entry when its platform is known or
    every platform picks the same. Raises ValueError for a name that is none, and RuntimeError for a requested
    implementation that cannot run where the call is known to run ("" in the result: refused when lowered for a
    platform other than the requested implementation's)."""
    platform = call.placement.platform
    if implementation is None:
        if platform is not None:
            return {platform: decide(platform, call).name}
        default = decide(DEFAULT, call).name
        # Platforms that pick what the rest pick need no branch of their own.
        choices = {p: name for p in _platforms() if (name := decide(p, call).name) != default}
        return {**choices, DEFAULT: default}
    pair = _parse(implementation)
    reason = why_not(implementation, platform, call)
    if reason is not None:
        where = " there" if platform is not None else ""
        raise RuntimeError(
            f"implementation={implementation!r} needs {reason}. Use implementation=None to run the "
            f"best implementation available{where}."
        )
    limited = [run.backend.platforms for run in pair if run.backend.platforms is not None]
    if platform is not None or not limited:
        return {platform or DEFAULT: implementation}
    platforms = [p for p in limited[0] if all(p in other for other in limited)]
    return {**dict.fromkeys(platforms, implementation), DEFAULT: ""}


def fallback(name: str, call: Call) -> Run:
    """What runs ``call`` where backend ``name``, chosen for it, cannot after all (cuDNN's resets beyond
    ``max_segments`` segments, known only from the data): the registry's next choice for the call on that backend's
    platform."""
    platforms = _BACKENDS[name].platforms
    if platforms is None:
        platform = call.placement.platform or DEFAULT
    else:
        platform = call.placement.platform if call.placement.platform in platforms else platforms[0]
    choice = decide(platform, call, excluded=name)
    return _runner(*(_parse(n)[i] for i, n in enumerate((choice.forward, choice.training))))


def scratch_bytes(implementation: str, call: Call, side: str) -> int | None:
    """The memory the implementation that ``implementation`` runs on ``side`` takes for ``call`` outside XLA's
    buffers (``Backend.scratch_bytes``; 0 for a backend that declares none), or None where it cannot say."""
    run = _parse(implementation)[SIDES.index(side)]
    declared = run.backend.scratch_bytes
    return 0 if declared is None else declared(call, side, run.variant)


# ---------------------------------------------------------------------------------------------- running


def note_passed_over(implementation: str | None, call: Call, x: jax.Array) -> jax.Array:
    """``x`` for ``call`` run with ``implementation``, after the backends ``implementation=None`` passes over where
    they expect to run have given their warnings (``run`` does this itself)."""
    return x if implementation is not None else _note_passed_over(call, choose(None, call), x)


def _backends_of(name: str) -> set[str]:
    return {run.backend.name for run in _parse(name)}


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
            if entry.name in _backends_of(choices.get(platform, choices.get(DEFAULT))):
                continue
            warning = entry.passed_over(call)
            if warning is None:
                continue
            if call.placement.platform == platform:
                staging.warn_once(warning)
            else:
                x = staging.warn_when_lowered(x, warning, platform)
    return x


def _run_named(name: str) -> Run:
    return _runner(*_parse(name))


def run(implementation: str | None, call: Call, inputs: Inputs) -> Outputs:
    """Runs ``call`` on the implementation ``choose`` picks: directly when there is one choice, else every
    platform's choice under ``lax.platform_dependent``. With ``implementation=None``, a backend passed over where it
    expects to run warns (``Backend.passed_over``)."""
    choices = choose(implementation, call)
    if implementation is None:
        inputs = inputs._replace(x=_note_passed_over(call, choices, inputs.x))
    if len(choices) == 1:
        return _run_named(next(iter(choices.values())))(call, inputs)
    branches = {}
    for platform, name in choices.items():
        if name:
            branch = _run_named(name)
        else:
            platforms = ", ".join(p for p in choices if p != DEFAULT)
            branch = staging.refusing(
                f"implementation={implementation!r} runs only on {platforms}, but this computation is "
                f"lowered for another platform; use implementation=None to run the best available "
                f"implementation on each platform",
                packing(_BACKENDS[BASELINE].run),
            )
        branches[platform] = functools.partial(lambda inputs, branch: branch(call, inputs), branch=branch)
    default = branches.pop(DEFAULT)
    return jax.lax.platform_dependent(inputs, default=default, **branches)
