"""What a backend declares to the registry (jax_cudnn_rnn/backends/registry.py, the one place that decides): what it
is (``Backend``), the other ways it runs a call (``Variant``), and what a call costs on it (``Cost``, relative to the
xla implementation's time), per side of ``jax.grad`` (``FORWARD``: undifferentiated, ``TRAINING``: under
``jax.grad``). The registry re-exports every name here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.supports import Supports

FORWARD, TRAINING = "forward", "training"
SIDES = (FORWARD, TRAINING)
Outputs = tuple[Any, Any, Any]  # (y, h_n, c_n or None)
Run = Callable[[Call, Inputs], Outputs]


class Cost(NamedTuple):
    """An estimate of what a call costs on one side: ``relative``, its time over the xla implementation's for the same
    call and side (the xla implementation's is ``UNIT``), and ``source``, what the number rests on."""

    relative: float
    source: str


UNIT = Cost(1.0, "the xla implementation, the unit of every estimate (none estimated faster)")
"""The cost of the registry's baseline (the xla implementation), by definition."""
PREFERRED = Cost(
    0.0, "the platform's own library, run wherever it supports the call (a user of that platform expects it)"
)
"""What a backend declares that runs wherever it can on its platform, whatever the others estimate: cuDNN on CUDA (a
GPU user expects cuDNN; its algorithm is chosen inside it, jax_cudnn_rnn/backends/cudnn/algorithm.py)."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """Another way a backend runs a call: ``implementation="backend:name"``.

    run: as ``Backend.run``. On the sides it is not offered for it must run as the backend's own ``run`` does (oneDNN's
      plain-weights variant: undifferentiated it is oneDNN's inference forward).
    sides: the sides it is offered for (``FORWARD``, ``TRAINING``).
    supports: what it runs, where that is less than its backend's (None: the backend's ``supports``).
    takes_pieces, takes_transposed: as ``Backend``'s.
    """

    run: Run
    sides: tuple[str, ...] = SIDES
    supports: Supports | None = None
    takes_pieces: bool = False
    takes_transposed: bool = False


@dataclasses.dataclass(frozen=True, eq=False)  # one object per registered backend: compared by identity
class Backend:
    """One implementation of ``rnn()``.

    name: ``rnn(implementation=name)``.
    platforms: the lowering platforms it runs on ("cpu", "cuda", ...); None for every platform.
    supports: what it runs (``Supports``).
    unavailable: what it needs that this process lacks ("the cuDNN extension, which is not loaded: ..."), or None.
    run: ``run(call, inputs) -> (y, h_n, c_n)`` for a call it is available for and supports.
    cost: ``cost(call, side, variant) -> Cost | None``: the estimate for ``call`` on ``side`` run by ``variant`` (""
      for its own run), or None where it has none (then that run is not chosen by default). None: the backend runs
      only when asked for by name.
    variants: {name: ``Variant``}, its other runs.
    passed_over: the warning to give when ``implementation=None`` runs another backend on one of its platforms
      (a GPU user expects cuDNN), or None to stay silent.
    scratch_bytes: ``scratch_bytes(call, side, variant) -> int | None``, the memory its kernels take for a call outside
      the buffers XLA allocates (cuDNN's workspace, oneDNN's scratch pool), for the bench's memory column; None: none.
    takes_pieces: whether ``run`` takes ``inputs.params`` as a frontend's named tensors (``_buffer.Pieces``) too;
      else it gets them packed into the buffer (``packing``).
    takes_transposed: whether ``run`` takes such pieces with matrices transposed as they came (the ``transposed``
      flags of ``Pieces``: a Flax cell's kernels, [in, H]); else it gets them in their slots' orientation
      (``Pieces.canonical``).
    mapped_by_jvp: whether ``run`` of a call under ``jax.vmap`` (``Call.mapped``) takes JAX's forward mode (no
      custom_vjp in it): a hybrid whose differentiated side it is then differentiates such a call by it
      (jax_cudnn_rnn/backends/hybrid.py).
    """

    name: str
    platforms: tuple[str, ...] | None
    supports: Supports
    unavailable: Callable[[], str | None]
    run: Run
    cost: Callable[[Call, str, str], Cost | None] | None = None
    variants: Mapping[str, Variant] = dataclasses.field(default_factory=dict)
    passed_over: Callable[[Call], Warning | None] | None = None
    scratch_bytes: Callable[[Call, str, str], int | None] | None = None
    takes_pieces: bool = False
    takes_transposed: bool = False
    mapped_by_jvp: bool = False
