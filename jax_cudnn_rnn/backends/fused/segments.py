"""Mid-sequence resets on a fused backend that cannot zero the state inside a sequence (cuDNN): one row per segment.

``resets[t, b]`` starts a new segment at step t of row b, and segments are independent sequences
(docs/architecture.md, "Resets"). A fused kernel (``convention.Runner``) runs independent sequences, each from its own
initial state and up to its own length, so ``rnn_segmented`` repacks the batch:

1. ``plan_segments`` numbers the segments row by row: a segment starts at step 0 and at every valid step whose reset
   is set; positions past a row's length belong to none, and a row of length 0 has none.
2. ``pack`` moves segment s to row s of a packed batch [T, S] starting at time 0 (zero past its length). The packed
   initial state of a segment is h0/c0's forward entries for the first segment of a row (zero if the row resets at
   step 0), h0/c0's backward entries for the last segment of a row, and zero otherwise.
3. The backend runs the packed batch once with the segments' lengths; ``unpack`` gathers the outputs back to [T, B]
   and the final states from the last segment (forward entries) and the first segment (backward entries) of each row.

S = ``max_segments`` is static. A batch with more segments than that runs ``fallback`` (the registry's next choice
for the call: the xla implementation, which masks resets inside its scan) through ``lax.cond``: results are the same
either way, only the speed differs. The packed batch is S rows of T steps, so memory grows with S; the default,
``default_max_segments``, is 2 B (on average one reset per row inside the window). Under ``jax.vmap`` the condition
is batched and both branches run.

Everything here is ordinary JAX (integer bookkeeping, gathers) around one backend call, so it composes with the
backend's custom_vjp and with ``chunking.run_chunked`` for long windows. Segment gathers cross batch rows: under batch
sharding they gather across devices.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.fused.convention import Runner, part

Array = jax.Array


def default_max_segments(batch: int) -> int:
    """The static bound on the number of segments used when ``rnn``'s ``max_segments`` is None: 2 * batch."""
    return 2 * batch


class SegmentPlan(NamedTuple):
    """Where every segment of a batch lives. T steps, B rows, S = max_segments packed rows.

    segment_of: int32 [T, B], the segment holding step t of row b (meaningless where ``valid`` is False).
    valid: bool [T, B], t < seq_lengths[b].
    row, start, length: int32 [S], segment s is steps [start, start + length) of row ``row``; length 0 marks an unused
      packed row.
    count: int32 scalar, the number of segments (the packed batch holds them when count <= S).
    """

    segment_of: Array
    valid: Array
    row: Array
    start: Array
    length: Array
    count: Array


def plan_segments(resets: Array, seq_lengths: Array | None, max_segments: int) -> SegmentPlan:
    """The segments of ``resets`` (bool [T, B]) under ``seq_lengths`` (int32 [B] or None = all T), numbered row by
    row in time order, for a packed batch of ``max_segments`` rows (segments beyond it are dropped; see ``count``)."""
    num_steps, batch = resets.shape
    steps = jnp.arange(num_steps, dtype=jnp.int32)[:, None]
    rows = jnp.arange(batch, dtype=jnp.int32)[None, :]
    valid = jnp.ones((num_steps, batch), bool) if seq_lengths is None else steps < seq_lengths[None, :]
    starts = valid & (resets | (steps == 0))
    # Row-major numbering (row b's segments before row b + 1's): a running count over [B, T].
    segment_of = (jnp.cumsum(starts.T.reshape(-1).astype(jnp.int32)) - 1).reshape(batch, num_steps).T
    at_start = jnp.where(starts, segment_of, max_segments)  # out of range: dropped by the scatters
    zeros = jnp.zeros((max_segments,), jnp.int32)
    row = zeros.at[at_start].set(jnp.broadcast_to(rows, starts.shape), mode="drop")
    start = zeros.at[at_start].set(jnp.broadcast_to(steps, starts.shape), mode="drop")
    length = zeros.at[jnp.where(valid, segment_of, max_segments)].add(1, mode="drop")
    return SegmentPlan(segment_of, valid, row, start, length, jnp.sum(starts, dtype=jnp.int32))


def pack(a: Array, plan: SegmentPlan) -> Array:
    """a [T, B, ...] as the packed batch [T, S, ...]: packed[tau, s] = a[start[s] + tau, row[s]] for tau < length[s],
    zero after."""
    num_steps = a.shape[0]
    tau = jnp.arange(num_steps, dtype=jnp.int32)[:, None]
    source = jnp.minimum(plan.start[None, :] + tau, num_steps - 1)
    inside = (tau < plan.length[None, :]).reshape((num_steps, -1) + (1,) * (a.ndim - 2))
    return jnp.where(inside, a[source, plan.row[None, :]], jnp.zeros((), a.dtype))


def unpack(packed: Array, plan: SegmentPlan) -> Array:
    """The packed batch [T, S, ...] back as [T, B, ...]: out[t, b] = packed[t - start[s], s] for the segment s that
    holds step t of row b, zero at invalid steps."""
    max_segments = packed.shape[1]
    num_steps = packed.shape[0]
    segment = jnp.clip(plan.segment_of, 0, max_segments - 1)
    tau = jnp.clip(jnp.arange(num_steps, dtype=jnp.int32)[:, None] - plan.start[segment], 0, num_steps - 1)
    valid = plan.valid.reshape(plan.valid.shape + (1,) * (packed.ndim - 2))
    return jnp.where(valid, packed[tau, segment], jnp.zeros((), packed.dtype))


def _packed_states(state: Array, plan: SegmentPlan, resets: Array, seq_lengths: Array, num_directions: int) -> Array:
    """h0 or c0 [L*D, B, ...] as the packed initial states [L*D, S, ...] (see the module docstring)."""
    used = plan.length > 0
    first = used & (plan.start == 0) & ~resets[0, plan.row]
    last = used & (plan.start + plan.length == seq_lengths[plan.row])
    keep = jnp.stack([first, last][:num_directions])  # [D, S]
    keep = jnp.tile(keep, (state.shape[0] // num_directions, 1))[:, :, None]
    return jnp.where(keep, state[:, plan.row], jnp.zeros((), state.dtype))


def _final_states(packed: Array, initial: Array, plan: SegmentPlan, seq_lengths: Array, num_directions: int) -> Array:
    """Final states [L*D, B, ...] from the packed ones [L*D, S, ...]: forward entries from each row's last segment,
    backward entries from its first; a row without segments (length 0) keeps its initial state."""
    max_segments = packed.shape[1]
    rows = jnp.arange(plan.segment_of.shape[1], dtype=jnp.int32)
    last_step = jnp.clip(seq_lengths - 1, 0, plan.segment_of.shape[0] - 1)
    first = jnp.clip(plan.segment_of[0], 0, max_segments - 1)
    last = jnp.clip(plan.segment_of[last_step, rows], 0, max_segments - 1)
    source = jnp.tile(jnp.stack([last, first][:num_directions]), (packed.shape[0] // num_directions, 1))
    gathered = jnp.take_along_axis(packed, source[:, :, None], axis=1)
    return jnp.where((seq_lengths > 0)[None, :, None], gathered, initial)


def rnn_segmented(run: Runner, fallback: Runner, call: Call, inputs: Inputs):
    """``rnn`` with ``inputs.resets`` (bool [T, B]) through a fused backend that has no resets of its own (see the
    module docstring).

    Args:
      run: the fused kernel with masks (``convention.Runner``), called once on the packed batch [T, S] with lengths in
        [1, T] and no resets.
      fallback: an implementation with resets of its own (``convention.Runner``), run on the whole call when the batch
        has more than ``call.cudnn.max_segments`` segments (None: ``default_max_segments(B)``).
      call, inputs: the prepared call (jax_cudnn_rnn/backends/call.py); seq_lengths int32 [B] in [0, T] or None (all
        T); dropout_masks None or L-1 arrays [T, B, D*hidden], applied to each segment's rows.

    Returns:
      (y [T, B, D*hidden], h_n like h0, c_n like c0 or None), as ``rnn`` with resets.
    """
    x, resets, seq_lengths = inputs.x, inputs.resets, inputs.seq_lengths
    num_steps, batch, _ = x.shape
    max_segments = call.cudnn.max_segments
    max_segments = default_max_segments(batch) if max_segments is None else max_segments
    lengths = jnp.full((batch,), num_steps, jnp.int32) if seq_lengths is None else jnp.clip(seq_lengths, 0, num_steps)
    plan = plan_segments(resets, lengths, max_segments)
    directions = call.config.num_directions

    def packed_run(inputs: Inputs):
        h0, c0, masks = inputs.h0, inputs.c0, inputs.dropout_masks
        packed = inputs._replace(
            x=pack(inputs.x, plan),
            h0=_packed_states(h0, plan, resets, lengths, directions),
            c0=None if c0 is None else _packed_states(c0, plan, resets, lengths, directions),
            seq_lengths=jnp.maximum(plan.length, 1),
            resets=None,
            dropout_masks=None if masks is None else [pack(mask, plan) for mask in masks],
        )
        y, h_n, c_n = run(part(call, packed), packed)
        return (
            unpack(y, plan),
            _final_states(h_n, h0, plan, lengths, directions),
            None if c_n is None else _final_states(c_n, c0, plan, lengths, directions),
        )

    def fallback_run(inputs: Inputs):
        return fallback(call, inputs)

    return lax.cond(plan.count <= max_segments, packed_run, fallback_run, inputs)
