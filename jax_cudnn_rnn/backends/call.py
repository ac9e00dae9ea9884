"""The prepared call: what ``ops.rnn`` decided once, and every backend receives instead of deciding again.

``Call`` holds the static facts of one validated call (the network, its shape, its options, where it runs);
``Inputs`` holds its arrays, the dropout masks among them (drawn once by ``ops.rnn``, None when dropout does not
apply). The registry (jax_cudnn_rnn/backends/registry.py) chooses a backend from the ``Call``; the chosen backend's
``run(call, inputs)`` computes the result and recomputes none of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax

from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.sharding.placement import UNKNOWN, Placement


@dataclasses.dataclass(frozen=True)
class CudnnOptions:
    """What ``rnn()`` takes for cuDNN alone, and only the cuDNN backend reads (the others accept and ignore it, so that
    code runs unchanged on a CPU).

    algorithm: the algorithm requested: "measured" (``rnn(algorithm=None)``), "heuristic", "autotune" or an
      algorithm's name (jax_cudnn_rnn/backends/cudnn/algorithm.py).
    max_segments: the packed batch's rows for resets (None: 2 * batch).
    """

    algorithm: str = "measured"
    max_segments: int | None = None


@dataclasses.dataclass(frozen=True)
class Call:
    """The static facts of one ``rnn()`` call (hashable: backends key their caches and custom_vjps on it).

    config: the network; None when only asking what a platform picks in general (``implementation_for``).
    max_time, batch: x's T and B (None: not known).
    seq_lengths, resets: whether the call has per-sequence lengths / mid-sequence resets.
    is_training: ``rnn``'s is_training (dropout applies when the inputs carry masks).
    precision: "float32" or "tensorfloat32" (``ops.resolve_precision``), resolved once.
    placement: what tracing knows of where the call runs (jax_cudnn_rnn/sharding/placement.py).
    cudnn: the options only the cuDNN backend reads (``CudnnOptions``).
    recurrent_dropout: whether the call applies recurrent dropout (``config.recurrent_dropout`` > 0 in training).
    input_channel: None, or (a part of a call with lengths, for a kernel that takes it: jax_cudnn_rnn/backends/fused/
      lengths.py) x is wider than ``config.input_size``: zeros, then a padding channel in its last column whose input
      weights per gate (in gate order) are these constants, which the params, ``config``'s, hold no weights for.
    pieces: whether the params are a frontend's named tensors (``_buffer.Pieces``) rather than the opaque buffer.
    loop_invariant_weights: whether the call is a step of a loop being traced over which the params do not change
      (jax_cudnn_rnn/backends/loops.py): XLA then computes what depends on them alone once, before the loop.
    mapped: how many elements ``jax.vmap`` maps x over where the call is traced, 0 where it is not mapped
      (``loops.mapped``): an Equinox module's per-sequence call under the user's vmap; ``batch`` is one element's.
    """

    config: RNNConfig | None = None
    max_time: int | None = None
    batch: int | None = None
    seq_lengths: bool = False
    is_training: bool = False
    resets: bool = False
    precision: str = "float32"
    placement: Placement = UNKNOWN
    cudnn: CudnnOptions = CudnnOptions()
    recurrent_dropout: bool = False
    input_channel: tuple[float, ...] | None = None
    pieces: bool = False
    loop_invariant_weights: bool = False
    mapped: int = 0


class Inputs(NamedTuple):
    """The arrays of one call, as ``rnn`` takes them after validation (time-major).

    params [params_size(config)]; x [T, B, I]; h0 [L*D, B, hidden]; c0 [L*D, B, H] (LSTM) or None; seq_lengths
    int32 [B] in [0, T] or None; resets bool [T, B] or None; dropout_masks: None, or L-1 arrays [T, B, D*hidden] in
    ``dropout.compute_dtype`` (layer l's output times mask l enters layer l + 1); recurrent_masks: None, or
    [L*D, G, B, hidden] in ``dropout.compute_dtype`` (``dropout.recurrent_masks``: where gate k of layer l, direction
    d reads h_{t-1}, it reads h_{t-1} * recurrent_masks[l*D + d, k]).
    """

    params: jax.Array
    x: jax.Array
    h0: jax.Array
    c0: jax.Array | None
    seq_lengths: jax.Array | None
    resets: jax.Array | None
    dropout_masks: list[Any] | None
    recurrent_masks: jax.Array | None = None
