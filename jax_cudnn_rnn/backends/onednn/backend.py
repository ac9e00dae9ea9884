"""implementation="onednn": oneDNN's fused RNN primitives on the CPU, over the same opaque buffer as cuDNN.

The FFI targets (jax_cudnn_rnn/backends/onednn/kernels.py) run the network layer by layer, each layer one oneDNN
primitive over both directions: ``lstm_forward``/``lstm_backward`` (with projection), ``lbr_gru`` (cuDNN's GRU, whose
new gate keeps its recurrent bias inside the reset product) and ``vanilla_rnn`` with tanh or relu, in float32 and
bfloat16.

``rnn`` is the fused kit's custom_vjp (jax_cudnn_rnn/backends/fused/vjp.py), as cuDNN's is: undifferentiated it runs
oneDNN's inference forward; under ``jax.grad`` the training forward, which also returns a reserve space (oneDNN's
workspace per layer and the outputs of all but the last layer), and the backward pass runs oneDNN's backward over it.
``rnn_plain`` (the variant "onednn:plain", offered for the training side) is the same with the backward on the weights
in the plain ldgoi layout (another oneDNN kernel, faster at some shapes: onednn/plan.cc). ``rnn_gemm`` (the variant
"onednn:gemm", both sides) is the network as GEMMs on oneDNN's matmul primitive, the recurrence's steps in C++
(jax_cudnn_rnn/backends/onednn/gemm.py). Dropout runs layer by layer through the fused kit
(jax_cudnn_rnn/backends/fused/compose.py).

The backend decides nothing: it declares its cost (``cost``: the CPU rule's estimate against the xla implementation,
jax_cudnn_rnn/backends/onednn/cpu_rule.py) and the registry chooses per side, running a hybrid where the sides differ
(jax_cudnn_rnn/backends/hybrid.py).

oneDNN's primitives take no per-sequence lengths: calls with ``seq_lengths`` run every row for all T steps, arranged by
the fused kit (jax_cudnn_rnn/backends/fused/lengths.py) so that the results are exactly those of lengths; "onednn:gemm"
runs them in its recurrence handlers (``rnn_gemm``). What oneDNN
lacks stays on the xla implementation (``SUPPORTS``): resets, ``cell_clip``, float16 and float64, bfloat16 with
projection (wrong in oneDNN 3.2), and what oneDNN has no kernels for on this CPU (bfloat16 below AVX-512:
``_runs_here``). Every bias mode runs (an absent bias is zero), and skip input runs with identity input matrices.
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.fused import compose, convention, vjp
from jax_cudnn_rnn.backends.fused.batching import sequential_vmap
from jax_cudnn_rnn.backends.onednn import cpu_rule, extension, gemm, kernels, tuned
from jax_cudnn_rnn.config import RNNConfig

DTYPES = ("float32", "bfloat16")


MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
"""The cells oneDNN's primitives run: lstm_forward/backward, lbr_gru (cuDNN's GRU), vanilla_rnn with tanh or relu."""


@functools.cache
def _runs_here(mode: str, dtype: str, bidirectional: bool, projection: bool) -> str | None:
    """None where oneDNN has kernels on this CPU for such layers (training included), else why not: its primitives
    exist per instruction set (no bfloat16 RNN below AVX-512), so a tiny layer's plan is built once per kind and
    asked. Without the extension there is nothing to ask (``unavailable`` says why it cannot run)."""
    if not extension.extension_loaded():
        return None
    config = RNNConfig(
        mode,
        1,
        2,
        2,
        direction="bidirectional" if bidirectional else "unidirectional",
        proj_size=1 if projection else 0,
        dtype=dtype,
    )
    try:
        kernels.buffer_sizes(config, 1, 1, True)
    except Exception as e:  # noqa: BLE001 - oneDNN's error says what it lacks; the call falls back
        isa = extension.effective_cpu_isa()
        return f"a CPU on which oneDNN has {mode} kernels in {dtype}, which it lacks for this CPU's {isa} ({e})"
    return None


def _own_rules(call: Call) -> str | None:
    config = call.config
    if config is not None and (
        reason := _runs_here(config.mode, config.dtype.name, config.num_directions == 2, config.proj_size > 0)
    ):
        return reason
    # oneDNN 3.2's bf16 projection LSTM: the forward's outputs are wrong (0.4-0.7 off on a unit-scale test) and its
    # backward fails to execute.
    if config is not None and config.proj_size and config.dtype.name == "bfloat16":
        return "no bfloat16 LSTM with projection, which oneDNN 3.2 computes wrong"
    # Lengths are arranged around the kernel with per-row gathers (fused/lengths.py), which XLA's partitioner runs on
    # the whole batch: over a batch that may be split across devices, the xla implementation keeps every row local.
    if call.seq_lengths and call.placement.batch_axes != () and any(size > 1 for _, size in call.placement.mesh_axes):
        return "no per-sequence lengths on a batch split across devices (the lengths' gathers would gather the batch)"
    return None


SUPPORTS = registry.Supports(
    "oneDNN's RNN primitives",
    modes=MODES,
    dtypes=DTYPES,
    resets=False,
    cell_clip=False,
    activations=False,
    recurrent_dropout=False,
    other=_own_rules,
)
"""What oneDNN runs: the rest stays on the xla implementation (the registry asks ``SUPPORTS.why_not``)."""


def unsupported_reason(config: RNNConfig, seq_lengths: Any = None) -> str | None:
    """Why oneDNN cannot run a call of ``config`` (with ``seq_lengths`` when not None), or None if it can:
    ``SUPPORTS``'s answer, as the registry gives it."""
    return SUPPORTS.why_not(Call(config, seq_lengths=seq_lengths is not None))


def _forward(arrays: vjp.KernelArrays, seq_lengths, static, training: bool, plain_backward_weights: bool):
    """(y, h_n, c_n or None, reserve or None), with the fused kit's vmap rule
    (jax_cudnn_rnn/backends/fused/convention.py). ``seq_lengths`` is always None here (``_runner``); ``static`` is
    (the config, the call's ``input_channel``)."""
    del seq_lengths
    config, channel = static
    lstm = config.has_cell_state
    operands, batch_axes = convention.forward_operands(arrays.x, arrays.h0, arrays.params, arrays.c0, None)
    call = functools.partial(
        kernels.forward,
        config=config,
        training=training,
        plain_backward_weights=plain_backward_weights,
        channel=channel,
    )
    call = convention.with_params(call, arrays.params)
    return convention.forward_outputs(convention.vmapped(call, batch_axes, lstm, training)(*operands), lstm, training)


def _backward(static, res: vjp.Residuals, cotangents, plain_backward_weights: bool) -> vjp.KernelArrays:
    """Every gradient of the kernel's arrays, once per mapped element under ``jax.vmap``; the params' gradient like
    the params (the buffer's, or its ``Pieces``'; none for the input channel's constant weights)."""
    config, channel = static
    dy, dh_n, dc_n = cotangents
    lstm = config.has_cell_state
    arrays = res.arrays
    leaves, tree = jax.tree.flatten(arrays.params)

    def call(*operands):
        # The params' leaves travel as operands of their own (the vmap rules take arrays), their gradients likewise.
        dparams, *rest = kernels.backward(
            jax.tree.unflatten(tree, operands[: len(leaves)]),
            *operands[len(leaves) :],
            config=config,
            plain_backward_weights=plain_backward_weights,
            channel=channel,
        )
        return (*jax.tree.leaves(dparams), *rest)

    outputs = sequential_vmap(call)(
        *leaves,
        arrays.x,
        arrays.h0,
        res.y,
        res.h_n,
        dy,
        dh_n,
        res.reserve,
        *([arrays.c0, res.c_n, dc_n] if lstm else []),
    )
    dx, dh0, *dc0 = outputs[len(leaves) :]
    dparams = jax.tree.unflatten(tree, outputs[: len(leaves)])
    return vjp.KernelArrays(dparams, dx, dh0, dc0[0] if lstm else None)


def _fused(plain_backward_weights: bool):
    """oneDNN's kernels as the fused kit's custom_vjp, specialised on the config and the input channel."""
    return vjp.fused_rnn(
        functools.partial(_forward, plain_backward_weights=plain_backward_weights),
        functools.partial(_backward, plain_backward_weights=plain_backward_weights),
    )


def _runner(fused) -> registry.Run:
    """The registry's ``run`` over ``fused``: the call with what the fused kit adds (lengths, which oneDNN's
    primitives do not take, and dropout layer by layer)."""

    def kernel(call: Call, inputs: Inputs):
        # inputs.seq_lengths is always None: the fused kit runs lengths around the kernel (takes_lengths=False); their
        # padding channel comes as call.input_channel, whose weights the handlers write (takes_channel=True).
        arrays = vjp.KernelArrays(inputs.params, inputs.x, inputs.h0, inputs.c0)
        return fused(arrays, None, (call.config, call.input_channel))

    return _composed(kernel, takes_channel=True)


def _composed(kernel, takes_channel: bool = False) -> registry.Run:
    """``kernel`` (the whole network without lengths or dropout) with what the fused kit adds around it;
    ``takes_channel``: ``kernel`` reads ``call.input_channel`` (else lengths widen its buffer)."""

    def run(call: Call, inputs: Inputs) -> tuple[Any, Any, Any]:
        return compose.run(kernel, call, inputs, takes_lengths=False, takes_channel=takes_channel)

    return run


rnn = _runner(_fused(False))
"""implementation="onednn": its inference forward undifferentiated, its training forward and backward under jax.grad."""
rnn_plain = _runner(_fused(True))
"""implementation="onednn:plain": the same, its backward reading the weights in the plain ldgoi layout (another
oneDNN kernel, faster at some shapes: onednn/plan.cc); undifferentiated it is ``rnn`` (the inference forward)."""


def rnn_gemm(call: Call, inputs: Inputs) -> tuple[Any, Any, Any]:
    """implementation="onednn:gemm": the network as GEMMs on oneDNN's matmul primitive (jax_cudnn_rnn/backends/onednn/
    gemm.py), forward and backward, its own custom_vjp per layer and direction; dropout by the fused kit. Lengths run
    in the recurrence handlers where ``gemm.takes_lengths`` (no padding channel, no widened buffer: the fused kit's
    arrangement cost an LSTM's training step 1.13x at T=25 B=64 H=1024 in bfloat16, quiet 2-core Zen 4), around them
    otherwise."""
    kernel = lambda call, inputs: gemm.rnn(  # noqa: E731
        inputs.params, inputs.x, inputs.h0, inputs.c0, call.config, inputs.seq_lengths
    )
    return compose.run(kernel, call, inputs, takes_lengths=gemm.takes_lengths(call.config))


def unavailable() -> str | None:
    """What implementation="onednn" needs that this process lacks, or None."""
    if extension.extension_loaded():
        return None
    return f"the oneDNN extension, which is not loaded: {extension.extension_error()}"


# Under ``jax.vmap`` (``call.mapped``) oneDNN's training forward and backward run once per mapped element (JAX wants a
# weight gradient per element under ``vmap(grad)``), where the xla implementation's mapped path, which JAX itself
# differentiates, takes the mapped axis into its products: below this many rows per element the xla implementation
# trains faster. rnn() of an LSTM under jax.vmap, its gradient, oneDNN's time / the xla implementation's (a process
# each, Intel AMX, 2 threads, 2026-11-30): H=256, T=50, float32: 4.0 (B=1, 32 mapped), 1.31 (B=8, 8), 1.06-1.14
# (B=16, 4), 1.06-1.19 (B=64, 4); H=512, T=25, bfloat16: 3.87 (B=4, 8), 0.66 (B=64, 2).
MAPPED_TRAINING_MIN_BATCH = 16


def cost(call: Call, side: str, variant: str) -> registry.Cost | None:
    """What ``call`` costs on ``side`` run by ``variant`` ("" for oneDNN's own run), relative to the xla implementation,
    on this CPU: the rule's estimate (jax_cudnn_rnn/backends/onednn/cpu_rule.py), from this machine's tuned table where
    there is one (jax_cudnn_rnn/backends/onednn/tuned.py); None where nothing measured covers the call (then the xla
    implementation runs), and where the batch is not known. A call of at most ``gemm.IN_PLACE_STEPS`` steps runs
    "onednn:gemm", which reads the weights where they lie, in the opaque buffer or in a frontend's tensors
    (``cpu_rule.short_call``: a GRU step on the buffer, B=1, H=512, 0.16 ms against oneDNN's 2.7 and Flax's cell's 0.21,
    Zen 3; a frontend's GRU step, B=4, H=512: 0.24-0.30 ms against 0.34-0.49 on the xla step, which reads each tensor
    where it lies as Flax's cells do, and Flax's cell's 0.42, Intel AMX), where oneDNN's own run reorders the weights at
    every call (2026-11-29, Zen 3: a one-step GRU, B=1, H=512, 0.21 ms against 6.3; issue 60); except in a loop over
    which the weights do not change (``call.loop_invariant_weights``), where oneDNN's preparation of the weights, a call
    of its own on the params alone, leaves the loop (a decoding loop, 100 steps of a 2-layer LSTM, H=512: B=64 491-544
    ms against the gemm's 632-668; config G with the named 2-layer LSTM, B=64, an Intel AMX CPU: 199 ms on oneDNN
    against 285 on the xla step and 253 for Flax's nn.scan of cells) and the call is estimated as any; and except a
    frontend's step of a projected LSTM (whose layers run on the buffer), which the xla step runs. Longer calls as the
    rule decides. The training side of a call under ``jax.vmap`` with fewer than ``MAPPED_TRAINING_MIN_BATCH`` rows per
    mapped element (an Equinox module's sequence) is the xla implementation's, which JAX differentiates itself there;
    its inference forward folds the mapped rows into one call (a frontend's step too: ``kernels.gemm_forward``) and is
    estimated at the rows of every mapped element."""
    if call.config is None or call.batch is None:
        return None
    if call.mapped and side == registry.TRAINING and call.batch < MAPPED_TRAINING_MIN_BATCH:
        return None
    implementation = f"onednn:{variant}" if variant else "onednn"
    short = call.max_time is not None and call.max_time <= gemm.IN_PLACE_STEPS
    if call.mapped and variant == "gemm" and not short:
        return None  # its weights packed for one element's rows, the gemm would run once per mapped element
    if short and not call.loop_invariant_weights:
        if call.pieces and call.config.proj_size:
            return None  # a projected LSTM's layers are gemm_scan's, on the buffer (a copy of the tensors)
        found = cpu_rule.short_call(side, implementation)
        return None if found is None else registry.Cost(*found)
    # Under vmap the inference forward is one call over every mapped element's rows (``convention.vmapped``), as the
    # xla implementation's program takes them all in its products: estimated at that batch.
    batch = call.batch * call.mapped if call.mapped and side != registry.TRAINING else call.batch
    found = cpu_rule.estimate(
        call.config, batch, side, implementation, isa=extension.effective_cpu_isa(), tuned=tuned.this_machine()
    )
    return None if found is None else registry.Cost(*found)


def scratch_bytes(call: Call, side: str, variant: str) -> int | None:
    """The memory oneDNN's calls for ``call`` on ``side`` take from the extension's scratch pool (outside XLA's
    buffers): the largest of the weights call's, the forward's and (training) the backward's."""
    if call.config is None or call.max_time is None or call.batch is None:
        return None
    if unavailable() is not None:
        return 0  # nothing of oneDNN runs
    training = side == registry.TRAINING
    if variant == "gemm":
        return gemm.pool_bytes(call.config, call.max_time, call.batch, training)
    sizes = kernels.buffer_sizes(call.config, call.max_time, call.batch, training, variant == "plain")
    return max(sizes["weights_scratch"], sizes["forward_scratch"], sizes["backward_scratch"])


registry.register(
    registry.Backend(
        "onednn",
        ("cpu",),
        supports=SUPPORTS,
        unavailable=lambda: unavailable(),
        run=rnn,
        cost=lambda call, side, variant: cost(call, side, variant),
        variants={
            "plain": registry.Variant(rnn_plain, sides=(registry.TRAINING,), takes_pieces=True),
            # Both sides; estimated where cpu_measurements.json has cells of it (bfloat16, native bfloat16 kernels).
            "gemm": registry.Variant(rnn_gemm, takes_pieces=True, takes_transposed=True),
        },
        scratch_bytes=lambda call, side, variant: scratch_bytes(call, side, variant),
        # The weights and backward handlers read a frontend's named tensors and write their gradients in place.
        takes_pieces=True,
    )
)
