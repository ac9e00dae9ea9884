"""implementation="cudnn": cuDNN's fused kernels wired into JAX: differentiation, planning, sharding, vmap.

``rnn(call, inputs)`` runs a prepared call (jax_cudnn_rnn/backends/call.py) as the fused kit builds it
(jax_cudnn_rnn/backends/fused/compose.py: resets, time chunks of at most ``MAX_TIME_STEPS``, dropout layer by layer)
around one kernel, ``_rnn``: a ``jax.custom_vjp`` (jax_cudnn_rnn/backends/fused/vjp.py). Called without
differentiation it runs cuDNN's inference forward (no reserve space); under ``jax.grad``/``jax.vjp`` it runs the
training forward, which also returns cuDNN's reserve space with the call's plan, and the backward pass runs backward
data (dx, dh0, dc0) then backward weights (dparams) over them (jax_cudnn_rnn/backends/cudnn/kernels.py).

Plans. Each call is planned once, while it is traced (jax_cudnn_rnn/backends/cudnn/plan.py), for the batch one device
runs, on the GPU the call's placement names; a differentiated call plans in its training forward and hands the plan
to its backward with the residuals.

Sharding. Every kernel call is ``partitioning.batch_partitioned``: under ``jax.jit`` with the batch split over a mesh,
each device runs cuDNN on its own rows, the weights replicated and their gradient summed across the shards. The
reserve space travels as a [B, row_bytes] array whose rows split with the batch, and the backward call splits the
batch exactly as the reserve space it receives is split, so each device hands cuDNN the buffer its own forward wrote.

Dropout: cuDNN's own dropout is never used (its masks cannot match the other implementations'); the fused kit runs
the network layer by layer with ``ops.rnn``'s masks instead.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.cudnn import algorithm, exporting, extension, fallback, gpu_rule, kernels, plan, tuned
from jax_cudnn_rnn.backends.fused import compose, convention, vjp
from jax_cudnn_rnn.backends.fused.batching import sequential_vmap
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.sharding import partitioning, placement

MAX_TIME_STEPS = 65535
"""The most time steps one cuDNN call is given; a longer x runs as time chunks with the state carried
(``chunking.run_chunked``). PyTorch's cuDNN LSTM fails with CUDNN_STATUS_NOT_SUPPORTED at 65,536 steps and runs
65,535 (pytorch issue 133751, PyTorch 2.4). Not yet measured with this library's calls on a GPU:
tests/cudnn/test_cudnn_gpu.py runs one call of MAX_TIME_STEPS steps and a chunked call of one step more."""


@dataclasses.dataclass(frozen=True)
class Static:
    """What a cuDNN kernel call is specialised on besides its arrays' shapes (the custom_vjp's static argument)."""

    config: RNNConfig
    allow_tf32: bool
    algorithm: str  # requested: "measured", "heuristic", "autotune" or an algorithm's name
    placement: placement.Placement = placement.UNKNOWN


class Reserve(NamedTuple):
    """What cuDNN's training forward leaves its backward: the reserve space [B, row_bytes] and the plan it ran."""

    space: jax.Array
    plan: plan.Plan


def _time_algorithm(problem: algorithm.Problem, chosen: str, device: jax.Device | None = None) -> float:
    """Seconds for one call of ``problem`` under algorithm ``chosen`` on zero-mean random data (autotune's
    measurement) on ``device`` (default: JAX's default device): the inference forward, or forward and both backward
    passes when ``problem.training``, after at least 0.1 s of warm-up. Runs eagerly even when called while a
    ``jax.jit`` is tracing (autotune chooses at trace time)."""
    config = problem.config
    with jax.ensure_compile_time_eval(), jax.default_device(device):
        keys = jax.random.split(jax.random.key(0), 4)
        params = layout.init_params(keys[0], config)
        x = jax.random.normal(keys[1], (problem.max_time, problem.batch, config.input_size)).astype(config.dtype)
        h0 = jnp.zeros(config.state_shape(problem.batch), config.dtype)
        c0 = jnp.zeros(config.cell_shape(problem.batch), config.dtype) if config.has_cell_state else None
        lengths = jnp.full((problem.batch,), problem.max_time, jnp.int32) if problem.padded else None
        static = Static(config, problem.allow_tf32, chosen)

        def run(params, x):
            return _rnn(vjp.KernelArrays(params, x, h0, c0), lengths, static)[0]

        if problem.training:
            step = jax.jit(jax.grad(lambda p, x: jnp.sum(run(p, x).astype(jnp.float32)), argnums=(0, 1)))
        else:
            step = jax.jit(run)
        return algorithm.median_seconds(lambda: jax.block_until_ready(step(params, x)), warmup_seconds=0.1)


def _plan(static: Static, x_shape, seq_lengths, training: bool) -> plan.Plan:
    return plan.plan(
        static.config,
        x_shape,
        seq_lengths is not None,
        static.allow_tf32,
        static.algorithm,
        static.placement,
        training,
        _time_algorithm,
    )


def _forward(arrays: vjp.KernelArrays, seq_lengths, static: Static, training: bool, call_plan: plan.Plan | None = None):
    """One cuDNN forward: (y, h_n, c_n or None, Reserve or None), run per batch shard under sharding. The training
    forward runs under its plan (made here unless given) once per mapped element of ``jax.vmap``; the inference
    forward folds ``jax.vmap`` into its batch and plans for that batch."""
    config, lstm = static.config, static.config.has_cell_state
    operands, batch_axes = convention.forward_operands(arrays.x, arrays.h0, arrays.params, arrays.c0, seq_lengths)
    out_axes = convention.output_axes(lstm, training)
    if training and call_plan is None:
        call_plan = _plan(static, arrays.x.shape, seq_lengths, training=True)

    def call(*operands):
        this_plan = call_plan or _plan(static, operands[0].shape, seq_lengths, training=False)
        local = functools.partial(
            kernels.forward, plan=this_plan, config=config, allow_tf32=static.allow_tf32, training=training
        )
        # The training forward splits the batch as its reserve space is split, which the backward call follows.
        follow = ("out", len(out_axes) - 1) if training else None
        return partitioning.batch_partitioned(
            local, batch_axes, out_axes, follow, this_plan.local_batches if training else None
        )(*operands)

    outputs = exporting.guard(*convention.vmapped(call, batch_axes, lstm, training)(*operands))
    y, h_n, c_n, space = convention.forward_outputs(outputs, lstm, training)
    return y, h_n, c_n, (Reserve(space, call_plan) if training else None)


def _backward_sharded(res: vjp.Residuals, space, cotangents, *, static: Static, call_plan: plan.Plan):
    """The backward passes of one call, per batch shard: (dparams, dx, dh0, dc0 or None, reserve space). ``space`` is
    the reserve space apart from the other residuals (``res.reserve`` is not read), so that an eager call can donate
    it alone."""
    (dy, dh_n, dc_n), arrays = cotangents, res.arrays
    lstm = static.config.has_cell_state
    operands, batch_axes = [arrays.params, arrays.x, arrays.h0, res.y, dy, dh_n, space], [None, 1, 1, 1, 1, 1, 0]
    if lstm:
        operands += [arrays.c0, dc_n]
        batch_axes += [1, 1]
    if res.seq_lengths is not None:
        operands.append(res.seq_lengths)
        batch_axes.append(0)
    local = functools.partial(kernels.backward, plan=call_plan, config=static.config, allow_tf32=static.allow_tf32)
    # dparams sums over the batch: per shard a partial sum, added up across the shards. The split follows the
    # reserve space's under the forward's rule (only into planned local batches): where the forward ran whole
    # against XLA's propagated split, the backward then asks for the whole buffer back instead of slices of it.
    sharded = partitioning.batch_partitioned(
        local, batch_axes, [None, 1, 1] + [1] * lstm + [0], follow=("in", 6), local_batches=call_plan.local_batches
    )
    dparams, dx, dh0, *rest = sequential_vmap(sharded)(*operands)
    return dparams, dx, dh0, (rest[0] if lstm else None), rest[-1]


# Called eagerly (the backward of an eager jax.vjp), the backward donates the reserve space: cuDNN updates it in
# place, and without donation XLA would copy the whole buffer first to keep the residual intact.
_backward_donating = jax.jit(_backward_sharded, static_argnames=("static", "call_plan"), donate_argnums=(1,))


def _is_concrete(*values) -> bool:
    return all(not isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(values))


def _backward(static: Static, res: vjp.Residuals, cotangents) -> vjp.KernelArrays:
    """Every gradient of the kernel's arrays from the training forward's residuals."""
    space, call_plan = res.reserve
    backward = _backward_sharded
    if _is_concrete(res, cotangents):
        if space.is_deleted():
            # This vjp function ran before and its backward consumed the reserve space: write it again.
            space = _forward(res.arrays, res.seq_lengths, static, True, call_plan)[3].space
        backward = _backward_donating
    # The residuals travel without the reserve (its space is an argument of its own, its plan static) and without the
    # final states, which cuDNN's backward does not read.
    needed = res._replace(h_n=None, c_n=None, reserve=None)
    dparams, dx, dh0, dc0, _ = backward(needed, space, cotangents, static=static, call_plan=call_plan)
    return vjp.KernelArrays(dparams, dx, dh0, dc0)


_rnn = vjp.fused_rnn(_forward, _backward)


def kernel_for(call: Call) -> compose.Kernel:
    """cuDNN as the fused kit's kernel for ``call``'s options: its precision, requested algorithm and placement."""
    static = dict(
        allow_tf32=call.precision == "tensorfloat32", algorithm=call.cudnn.algorithm, placement=call.placement
    )

    def run(part: Call, inputs: Inputs):  # the call or a part of it (a layer, a chunk, the packed segments)
        arrays = vjp.KernelArrays(inputs.params, inputs.x, inputs.h0, inputs.c0)
        return _rnn(arrays, inputs.seq_lengths, Static(part.config, **static))

    return run


def rnn(call: Call, inputs: Inputs) -> tuple[Any, Any, Any]:
    """The registry's ``run``: ``call`` on cuDNN; resets beyond max_segments run the registry's next choice for the
    call (``registry.fallback``: one with resets of its own)."""
    next_choice = None if inputs.resets is None else registry.fallback("cudnn", call)
    return compose.run(
        kernel_for(call),
        call,
        inputs,
        max_time_steps=MAX_TIME_STEPS,
        fallback=next_choice,
    )


def unavailable() -> str | None:
    """What cuDNN needs that this process lacks (the extension, a CUDA GPU), or None when it can run here."""
    if not extension.extension_loaded():
        return f"the cuDNN extension, which is not loaded: {extension.extension_error()}"
    if not any(placement.lowering_platform(d) == "cuda" for d in jax.local_devices()):
        # Tracing a differentiated call asks cuDNN for its reserve-space size, which needs a live GPU.
        return (
            f"a CUDA GPU, but this process sees none (JAX's devices: "
            f"{', '.join(sorted({d.platform for d in jax.local_devices()}))}); install jax[cuda13] on a machine "
            "with an NVIDIA GPU, or use implementation='xla'"
        )
    return None


BFLOAT16_CUDNN_VERSION = 91300
"""The first cuDNN whose RNNs accept bfloat16 data, as cudnnGetVersion() reads it: cuda/descriptors.h's
kBfloat16RnnCudnnVersion, which the kernels check again (where no Python stands in front of them)."""
BFLOAT16_COMPUTE_CAPABILITY = (8, 0)
"""The oldest GPUs (Ampere) on which cuDNN's RNNs run bfloat16 data here. PyTorch's rule: it runs bfloat16 RNNs on cuDNN
only with cuDNN >= 9.13 and a compute capability major >= 8 (``supportsBFloat16RNNWithCuDNN``,
aten/src/ATen/cuda/detail/CUDAHooks.cpp), else its own implementation. The rule is applied in Python because
``rnn(implementation=None)`` must choose before any kernel runs; what cuDNN itself does with bfloat16 on an older GPU
has not been seen on this project's machines (lab/gpu-verification.md)."""


def _compute_capability(device: Any) -> tuple[int, int] | None:
    """``device.compute_capability`` ("7.5" on a CUDA device) as (7, 5); None where the device does not say."""
    major, _, minor = str(getattr(device, "compute_capability", "")).partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() and (minor or "0").isdigit() else None


def unsupported(call: Call) -> str | None:
    """What cuDNN needs that ``call`` lacks (the registry's question), or None.

    bfloat16 needs the loaded libcudnn to be >= 9.13 (``BFLOAT16_CUDNN_VERSION``) and each GPU the call may run on to
    have compute capability >= 8.0 (``BFLOAT16_COMPUTE_CAPABILITY``): the call's GPU when tracing knows it, else one
    GPU of each model this process has (``plan.planning_devices``, as the plan must hold on each). Asked while the call
    is traced, before it is planned or any kernel is called, so that ``rnn(implementation=None)`` runs the xla
    implementation there (``fallback.passed_over`` warns) and ``implementation="cudnn"`` is refused with the fix,
    instead of failing inside cuDNN on the GPU."""
    if call.config is None or call.config.dtype.name != "bfloat16":
        return None
    use_instead = "use float32 or float16, or implementation='xla'"
    version = extension.cudnn_version()
    if version is not None and version < BFLOAT16_CUDNN_VERSION:
        wanted = extension.format_cudnn_version(BFLOAT16_CUDNN_VERSION)
        return (
            f"cuDNN >= {wanted} for bfloat16 RNNs, but the loaded libcudnn is "
            f"{extension.format_cudnn_version(version)}: install a newer one (`pip install "
            f'"nvidia-cudnn-cu13>={wanted}"`), or {use_instead}'
        )
    for device in plan.planning_devices(call.placement):
        capability = _compute_capability(device)
        if capability is not None and capability < BFLOAT16_COMPUTE_CAPABILITY:
            return (
                f"a GPU of compute capability >= {'.'.join(map(str, BFLOAT16_COMPUTE_CAPABILITY))} for bfloat16 "
                f"RNNs (Ampere or newer, as PyTorch's supportsBFloat16RNNWithCuDNN), but "
                f"{device.device_kind} (CUDA device {algorithm.device_info(device).ordinal}), where this call "
                f"may run, has compute capability {'.'.join(map(str, capability))}: {use_instead}"
            )
    return None


def _one_kind(call: Call) -> algorithm.DeviceInfo | None:
    """The facts of the GPU ``call`` is planned on, where its plan's GPUs are of one kind (else None: their
    measurements could disagree, and the plan falls back to the standard algorithm)."""
    infos = {algorithm.device_info(device) for device in plan.planning_devices(call.placement)}
    return infos.pop() if len({info.kind for info in infos}) == 1 else None


def cost(call: Call, side: str, variant: str) -> registry.Cost:
    """The registry's estimate for ``call`` on ``side``: where the GPU rule's measurements of the call's GPU kind
    cover its shape class (jax_cudnn_rnn/backends/cudnn/gpu_rule.py), the time over the xla implementation's of the
    algorithm it runs there; elsewhere ``registry.PREFERRED``, the platform's own library wherever it runs."""
    del variant  # cuDNN has none
    device = _one_kind(call)
    batch = None if call.batch is None else call.placement.local_batches(call.batch)[0]
    problem = gpu_rule.measured_problem(call, side, batch)
    if device is None or not device.kind or problem is None:
        return registry.PREFERRED
    found = gpu_rule.estimate(problem, call.cudnn.algorithm, device, tuned.for_kind(device.kind))
    return registry.PREFERRED if found is None else registry.Cost(found.relative, found.source)


def workspace_bytes(call: Call, side: str, variant: str) -> int | None:
    """The workspace cuDNN asks for ``call`` on ``side`` under the algorithm its plan runs for ``algorithm=None``
    (taken from XLA's scratch allocator, outside XLA's memory analysis), or None where it cannot be asked (no GPU) or
    the call is not known."""
    del variant  # cuDNN has none
    if call.config is None or call.max_time is None or call.batch is None:
        return None
    problem = algorithm.Problem(
        call.config,
        call.max_time,
        call.batch,
        padded=call.seq_lengths,
        training=side == registry.TRAINING,
        allow_tf32=call.precision == "tensorfloat32",
    )
    try:
        # autotune's choice is not known before it times the call: the heuristic's stands in for it.
        requested = algorithm.HEURISTIC if call.cudnn.algorithm == algorithm.AUTOTUNE else call.cudnn.algorithm
        chosen = algorithm.choose(requested, problem, None, algorithm.device_info(), plan.measured)
        return plan.temp_space_sizes(problem, chosen)[0]
    except Exception:  # noqa: BLE001 - then the bench's memory column is unknown rather than wrong
        return None


MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
"""The cells cuDNN's RNN kernels run (cudnnRNNMode_t); another mode is refused by name before any kernel."""

registry.register(
    registry.Backend(
        "cudnn",
        ("cuda",),
        supports=registry.Supports(
            "cuDNN's RNN kernels",
            modes=MODES,
            activations=False,
            recurrent_dropout=False,
            other=lambda call: unsupported(call),
        ),
        unavailable=lambda: unavailable(),
        run=rnn,
        # The GPU rule's estimate where the GPU's kind was measured, else wherever it runs the call on CUDA; its
        # algorithm is chosen inside it (algorithm.py, from the same measurements for algorithm=None).
        cost=lambda call, side, variant: cost(call, side, variant),
        passed_over=lambda call: fallback.passed_over(call, unavailable, unsupported),
        scratch_bytes=workspace_bytes,
    )
)
