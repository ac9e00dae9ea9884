"""A fused-kernel backend's ``run``: one kernel call, and around it in ordinary JAX what the kernel cannot do itself.

A *kernel* is ``kernel(call, inputs) -> (y, h_n, c_n)`` over the whole network without dropout
(``convention.Kernel``). ``run`` builds the call from the inside out, each step a ``convention.Runner`` (the same with
dropout masks):

1. dropout masks: the network layer by layer, each layer one kernel call (jax_cudnn_rnn/backends/fused/stacking.py);
2. sequences longer than ``max_time_steps``: time chunks with the state carried, and lengths of 0 as empty
   sequences (jax_cudnn_rnn/backends/fused/chunking.py);
3. resets: every segment a row of its own, the ``fallback`` implementation (one with resets of its own) beyond
   ``max_segments`` segments (jax_cudnn_rnn/backends/fused/segments.py).

Before all of them, a kernel that takes no per-sequence lengths gets them from
jax_cudnn_rnn/backends/fused/lengths.py (every row all T steps, arranged so that the valid steps and step T give
exactly what lengths mean). A backend passes only what it has: oneDNN has no length limit, no resets (the registry
never sends it such calls) and no lengths (but its variant "onednn:gemm", which takes them), so steps 0 and 1 apply
there.
"""

from __future__ import annotations

from typing import Any

from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.fused import chunking, lengths, segments, stacking
from jax_cudnn_rnn.backends.fused.convention import Kernel, Runner


def with_masks(kernel: Kernel) -> Runner:
    """``kernel`` extended to dropout masks: without them one call, with them layer by layer."""

    def run(call: Call, inputs: Inputs):
        if not inputs.dropout_masks:
            return kernel(call, inputs)
        return stacking.rnn_with_masks(kernel, call, inputs)

    return run


def run(
    kernel: Kernel,
    call: Call,
    inputs: Inputs,
    *,
    max_time_steps: int | None = None,
    fallback: Runner | None = None,
    takes_lengths: bool = True,
    takes_channel: bool = False,
) -> tuple[Any, Any, Any]:
    """``call`` on ``kernel`` (see the module docstring). ``fallback(call, inputs)`` runs a batch with resets that
    has more segments than ``call.cudnn.max_segments`` (None: twice the batch). ``takes_lengths=False``: ``kernel`` is
    always called with lengths None (``lengths.with_lengths``); ``takes_channel``: it also takes
    ``call.input_channel`` (lengths' padding channel, which it then gets instead of a widened buffer)."""
    layered = with_masks(kernel if takes_lengths else lengths.with_lengths(kernel, takes_channel=takes_channel))

    def chunked(call: Call, inputs: Inputs):
        if max_time_steps is None:
            return layered(call, inputs)
        return chunking.run_chunked(layered, max_time_steps, call, inputs)

    if inputs.resets is None:
        return chunked(call, inputs)
    if fallback is None:
        raise ValueError("resets on a fused kernel need a fallback implementation with resets of its own")
    return segments.rnn_segmented(chunked, fallback, call, inputs)
