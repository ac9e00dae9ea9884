"""implementation="cudnn": cuDNN's fused RNN kernels through the FFI targets of ``jax_cudnn_rnn._cudnn_rnn``.

``rnn_cudnn`` is a ``jax.custom_vjp``: called without differentiation it runs cuDNN's inference forward (no reserve
space); under ``jax.grad``/``jax.vjp`` it runs the training forward, which returns cuDNN's reserve space, and the
backward pass runs backward data (dx, dh0, dc0) then backward weights (dparams). Both backward passes update the
reserve space in place, so each returns it aliased to its input, which also orders backward weights after backward
data.

Plan. Each call is planned once, while it is traced (``Plan``): the algorithm (jax_cudnn_rnn/algorithm.py), chosen
for the batch one device runs on the call's GPU (jax_cudnn_rnn/placement.py says what tracing knows of both), and for
a differentiated call the reserve rows. The training forward hands its plan to the backward with its residuals, so
both passes run the same algorithm whatever another thread tunes meanwhile.

Sizes. The reserve space is an output of the training forward, so its size must be known when tracing. cuDNN only
tells it through ``cudnnGetRNNTempSpaceSizes`` on a live handle, so at trace time this module asks the extension's
``temp_space_sizes`` (on the call's GPU by CUDA ordinal, or on one GPU of each model this process has when tracing
does not know the call's, ``_planning_devices``; for full-length sequences [T, B]) and caches the answer per
(config, T, B, allow_tf32, algorithm, device). Tracing a differentiated call therefore needs a GPU, like
jax.experimental.rnn. At run time each handler asks again for the actual lengths and fails clearly if the buffer is
too small. The workspace is never an output: each handler takes it from XLA's scratch allocator.

Sharding. Every call is ``partitioning.batch_partitioned``: under ``jax.jit`` with the batch split over a mesh,
each device runs cuDNN on its own rows, the weights replicated and their gradient summed across the shards. The
reserve space travels as a [B, row_bytes] array whose rows split with the batch (``_reserve_row_bytes``), and the
backward call splits the batch exactly as the reserve space it receives is split, so each device hands cuDNN the
buffer its own forward wrote.

Dropout. cuDNN's own dropout is never used (its masks cannot match the CPU implementation). With ``dropout_key``, the
network runs layer by layer, each layer a single-layer cuDNN call over its own slice of the opaque buffer, and layer
l's output is multiplied by ``dropout.dropout_masks(key, ...)[l]`` before entering layer l + 1, as the xla
implementation does; gradients flow back to the full buffer through the slicing.

What cuDNN cannot do itself, ``backend`` and its callers build around these calls in ordinary JAX: an x longer than
``MAX_TIME_STEPS`` runs as time chunks with the state carried and a length of 0 as an empty sequence
(jax_cudnn_rnn/chunking.py); ``rnn(..., resets=...)`` runs every segment as a row of its own
(jax_cudnn_rnn/segments.py).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Sequence
from typing import Any

import jax
import jax.export
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax.interpreters import batching as jax_batching
from jax.interpreters import mlir

from jax_cudnn_rnn import _extension, algorithm, batching, chunking, dropout, layout, partitioning, placement, stacking
from jax_cudnn_rnn.config import RNNConfig


def _attributes(config: RNNConfig, allow_tf32: bool, algo: str) -> dict[str, Any]:
    """The handlers' attributes (cuda/descriptors.h RnnAttrs), with the types the C++ side decodes."""
    return dict(
        mode=config.mode,
        num_layers=np.int64(config.num_layers),
        num_units=np.int64(config.num_units),
        input_size=np.int64(config.input_size),
        proj_size=np.int64(config.proj_size),
        direction=config.direction,
        input_mode=config.input_mode,
        bias_mode=config.bias_mode,
        cell_clip=np.float64(config.cell_clip or 0.0),  # 0 means no clipping (cell_clip=None)
        allow_tf32=np.bool_(allow_tf32),
        algo=algo,
    )


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Plan:
    """The static decisions of one cuDNN call, made once when the call is traced and shared by its forward and its
    backward passes (the backward receives the forward's plan with its residuals: cuDNN forbids running a backward
    with another algorithm than the forward that wrote the reserve space).

    algorithm: the cuDNN algorithm every pass of the call runs (jax_cudnn_rnn/algorithm.py).
    device: CUDA ordinal in this process on which cuDNN was asked at trace time (-1: nothing was asked); the first of
      several when tracing did not know the call's GPU and the process has GPUs of several models.
    row_bytes: training only: bytes per batch row of the reserve-space array [B, row_bytes].
    local_batches: training only: the per-device batch sizes the reserve rows fit; a split of the batch into any
      other size runs the call whole (jax_cudnn_rnn/partitioning.py).
    """

    algorithm: str
    device: int = -1
    row_bytes: int = 0
    local_batches: tuple[int, ...] = ()


@functools.lru_cache(maxsize=None)
def temp_space_sizes(problem: algorithm.Problem, algo: str, device: int = -1) -> tuple[int, int]:
    """(workspace bytes, reserve-space bytes) that cuDNN asks for ``problem``'s forward under ``algo`` (the training
    forward when ``problem.training``, whose workspace also serves both backward passes; the reserve is 0 for
    inference), for full-length sequences, asked on CUDA device ``device`` of this process (-1: the current one).
    Needs a GPU."""
    config = problem.config
    attrs = _attributes(config, problem.allow_tf32, algo)
    workspace, reserve = _extension.module().temp_space_sizes(
        mode=attrs["mode"], num_layers=config.num_layers, num_units=config.num_units, input_size=config.input_size,
        proj_size=config.proj_size, direction=config.direction, input_mode=config.input_mode,
        bias_mode=config.bias_mode, cell_clip=float(attrs["cell_clip"]), dtype=config.dtype.name,
        allow_tf32=problem.allow_tf32, algo=algo, max_time=problem.max_time, batch=problem.batch,
        padded=problem.padded, training=problem.training, device=device)
    return int(workspace), int(reserve)


@functools.lru_cache(maxsize=None)
def reserve_space_size(problem: algorithm.Problem, algo: str, device: int = -1) -> int:
    """Bytes of cuDNN reserve space for the training forward of ``problem`` (full-length sequences) under ``algo``,
    asked on CUDA device ``device`` (-1: the current one): needs a GPU."""
    return temp_space_sizes(dataclasses.replace(problem, training=True), algo, device)[1]


def _problem(config: RNNConfig, x_shape, seq_lengths, allow_tf32: bool, training: bool) -> algorithm.Problem:
    return algorithm.Problem(config, int(x_shape[0]), int(x_shape[1]), seq_lengths is not None, training, allow_tf32)


def _time_algorithm(problem: algorithm.Problem, algo: str, device: jax.Device | None = None) -> float:
    """Seconds for one call of ``problem`` under ``algo`` on zero-mean random data (autotune's measurement) on
    ``device`` (default: JAX's default device): the inference forward, or forward and both backward passes when
    ``problem.training``, after at least 0.1 s of warm-up (each candidate is compiled first, and the GPU idles
    meanwhile). Runs eagerly even when called while a ``jax.jit`` is tracing (autotune chooses at trace time)."""
    config = problem.config
    with jax.ensure_compile_time_eval(), jax.default_device(device):
        keys = jax.random.split(jax.random.key(0), 4)
        params = layout.init_params(keys[0], config)
        x = jax.random.normal(keys[1], (problem.max_time, problem.batch, config.input_size)).astype(config.dtype)
        h0 = jnp.zeros(config.state_shape(problem.batch), config.dtype)
        c0 = jnp.zeros(config.cell_shape(problem.batch), config.dtype) if config.has_cell_state else None
        lengths = jnp.full((problem.batch,), problem.max_time, jnp.int32) if problem.padded else None

        def run(params, x):
            return _rnn(params, x, h0, c0, lengths, config, problem.allow_tf32, algo)[0]

        if problem.training:
            step = jax.jit(jax.grad(lambda p, x: jnp.sum(run(p, x).astype(jnp.float32)), argnums=(0, 1)))
        else:
            step = jax.jit(run)
        return algorithm.median_seconds(lambda: jax.block_until_ready(step(params, x)), warmup_seconds=0.1)


def _known_gpu(where: placement.Placement) -> jax.Device | None:
    """The call's GPU when tracing knows it: a device of the call, else ``jax.default_device``'s when it is a GPU."""
    for device in (where.device, jax.config.jax_default_device):
        if device is not None and not isinstance(device, str) and device.platform == "gpu":
            return device
    return None


def _target_device(where: placement.Placement) -> jax.Device | None:
    """The GPU of this process that trace-time questions about a call placed at ``where`` go to first: the call's GPU
    when tracing knows it (``_known_gpu``), else this process's first GPU (where uncommitted arrays run)."""
    known = _known_gpu(where)
    if known is not None:
        return known
    try:
        return jax.local_devices(backend="gpu")[0]
    except RuntimeError:
        return None


def _planning_devices(where: placement.Placement) -> tuple[jax.Device | None, ...]:
    """The GPUs cuDNN is asked on to plan a call placed at ``where``: ``_target_device``, and when tracing does not
    know the call's GPU, also one GPU of each other model (compute capability, SM count, kind) this process has.

    Under ``jax.jit`` over arrays committed to one GPU the placement is unknown, and one trace serves every device the
    arguments are later committed to (JAX caches the trace by abstract values, not by device), so the plan must hold
    on any of this process's GPUs. cuDNN's answers (reserve size, the heuristic's facts) are taken to depend on the GPU
    model, not on which GPU of a model is asked, so asking one of each model answers for the call's GPU, whichever it
    is (docs/lowering.md)."""
    first = _target_device(where)
    if first is None or _known_gpu(where) is not None:
        return (first,)
    models = {dataclasses.replace(algorithm.device_info(first), ordinal=-1): first}
    try:
        gpus = jax.local_devices(backend="gpu")
    except RuntimeError:  # no GPU backend: nothing else to ask
        gpus = []
    for device in gpus:
        models.setdefault(dataclasses.replace(algorithm.device_info(device), ordinal=-1), device)
    return tuple(models.values())


def _check_processes_agree() -> None:
    """Every process traces the same program, and a cuDNN call's plan (its algorithm, its reserve size) depends on the
    GPU model: refuse a multi-process run over different GPU models, where the processes could disagree."""
    if jax.process_count() == 1:
        return
    kinds = sorted({device.device_kind for device in jax.devices() if device.platform == "gpu"})
    if len(kinds) > 1:
        raise ValueError(f"implementation='cudnn' with {jax.process_count()} JAX processes needs one GPU model in all "
                         f"of them (each process plans the call for its own GPU, and every process must run the same "
                         f"program), but the processes have {', '.join(kinds)}; use implementation='xla'")


def _plan(config: RNNConfig, x_shape, seq_lengths, allow_tf32: bool, policy: str, where: placement.Placement,
          training: bool) -> Plan:
    """The call's plan: the algorithm chosen for the batch one device is expected to run (the per-shard batch under
    batch sharding, ``where.local_batches``), on the call's device; for training also the reserve rows, sized for
    every local batch the call may run with. When tracing does not know the call's GPU and this process has GPUs of
    several models, the plan holds on each (``_planning_devices``): the algorithm their choices agree on, else the
    standard one, and reserve rows that fit every model's size."""
    _check_processes_agree()
    devices = _planning_devices(where)
    infos = [algorithm.device_info(device) for device in devices]
    local_batches = where.local_batches(int(x_shape[1]))
    problem = _problem(config, (x_shape[0], local_batches[0]), seq_lengths, allow_tf32, training)
    choices = {algorithm.choose(policy, problem, functools.partial(_time_algorithm, problem, device=device), info)
               for device, info in zip(devices, infos, strict=True)}
    algo = choices.pop() if len(choices) == 1 else algorithm.STANDARD
    if not training:
        return Plan(algo, infos[0].ordinal)
    row_bytes, fitting = 0, set(local_batches)
    for info in infos:
        rows, fits = _reserve_row_bytes(_problem(config, x_shape, seq_lengths, allow_tf32, True), algo,
                                        local_batches, info.ordinal)
        row_bytes, fitting = max(row_bytes, rows), fitting & set(fits)
    if not fitting:
        raise ValueError(f"implementation='cudnn' cannot plan this call for every GPU model of this process: cuDNN "
                         f"refuses each of the local batches {local_batches} on one of them; commit the arrays to a "
                         f"NamedSharding or set jax.default_device so that tracing knows the call's GPU")
    return Plan(algo, infos[0].ordinal, row_bytes, tuple(b for b in local_batches if b in fitting))


def _reserve_row_bytes(problem: algorithm.Problem, algo: str, local_batches: tuple[int, ...],
                       device: int = -1) -> tuple[int, tuple[int, ...]]:
    """(bytes per batch row of the reserve-space array [B, row_bytes] of ``problem``'s training forward, the local
    batches those rows fit).

    cuDNN's reserve space is one opaque buffer per call, sized by cuDNN per (T, batch) and not proportional to the
    batch. It travels as a [B, row_bytes] array so that when the batch is split over n devices
    (jax_cudnn_rnn/partitioning.py) each device's rows hold its own call's buffer: row_bytes is the largest per-row
    share over the local batches the call may run with (``placement.Placement.local_batches``: only the actual split
    when tracing knows it), so each of them fits, and unsplit B * row_bytes exceeds cuDNN's size by less than B bytes.
    A local batch cuDNN refuses under ``algo`` is left out (the call would fail there anyway).
    """
    row_bytes, fitting, error = 0, [], None
    for local in local_batches:
        try:
            size = reserve_space_size(dataclasses.replace(problem, batch=local), algo, device)
        except RuntimeError as e:
            error = e
            continue
        row_bytes = max(row_bytes, -(-size // local))
        fitting.append(local)
    if not fitting:
        raise error
    return row_bytes, tuple(fitting)


def _forward_call(x, h0, params, *rest, plan: Plan, config: RNNConfig, allow_tf32: bool, training: bool):
    """One cuDNN forward on (local) arrays: (y, h_n, [c_n: lstm], [reserve_space [B, row_bytes]: training])."""
    num_steps, batch, _ = x.shape
    out_types = [jax.ShapeDtypeStruct((num_steps, batch, config.output_size), x.dtype),
                 jax.ShapeDtypeStruct(h0.shape, x.dtype)]
    if config.has_cell_state:
        out_types.append(jax.ShapeDtypeStruct(rest[0].shape, x.dtype))
    if training:
        out_types.append(jax.ShapeDtypeStruct((batch * plan.row_bytes,), jnp.uint8))
    outs = jax.ffi.ffi_call(_extension.FORWARD_TARGET, out_types)(
        x, h0, params, *rest, training=np.bool_(training), **_attributes(config, allow_tf32, plan.algorithm))
    if training:
        outs = (*outs[:-1], outs[-1].reshape(batch, plan.row_bytes))
    return tuple(outs)


# --- jax.export -----------------------------------------------------------------------------------------------------
# The cuDNN FFI targets are not on JAX's list of custom calls with compatibility guarantees, and a batch-sharded call's
# custom_partitioning callback lives in the exporting process. A marker on every forward makes exporting them a clear
# error at lowering time, unless ``export`` below asked for it (single-device, with JAX's check disabled for the
# targets).
_exporting = threading.local()

_export_guard_p = jax.extend.core.Primitive("jax_cudnn_rnn_export_guard")
_export_guard_p.multiple_results = True
_export_guard_p.def_impl(lambda *args: args)
_export_guard_p.def_abstract_eval(lambda *avals: avals)
jax_batching.primitive_batchers[_export_guard_p] = lambda args, dims: (_export_guard_p.bind(*args), dims)

EXPORT_ADVICE = ("use implementation='xla' (it exports for every platform), or jax_cudnn_rnn.cudnn.export(...) for "
                 "a single-device cuDNN function (docs/lowering.md)")


def _export_guard_lowering(ctx, *args):
    if ctx.module_context.lowering_parameters.for_export:
        context = ctx.module_context.axis_context
        devices = getattr(context, "device_assignment", None) or ()
        if len(devices) > 1:
            raise ValueError(
                f"jax.export of a cuDNN RNN call over {len(devices)} devices is not supported: its batch "
                "partitioning is a custom_partitioning callback that exists only in this process; export the "
                f"per-device function (inside jax.shard_map), or {EXPORT_ADVICE}")
        if not getattr(_exporting, "allowed", False):
            raise ValueError(
                "jax.export of a cuDNN RNN call: its FFI targets (jax_cudnn_rnn_forward, ..._backward_data, "
                "..._backward_weights) are not among the custom calls JAX guarantees to stay compatible, and a "
                "differentiated call's reserve-space size was asked of this machine's GPU and cuDNN; "
                f"{EXPORT_ADVICE}")
    return args


mlir.register_lowering(_export_guard_p, _export_guard_lowering)


def export(fn, *, platforms: Sequence[str] = ("cuda",), disabled_checks: Sequence[Any] = (), **kwargs):
    """``jax.export.export(fn, ...)`` for a jitted function whose ``rnn()`` calls run cuDNN on one device.

    It disables JAX's compatibility check for this library's FFI targets only. The result runs where this library is
    imported (that registers the targets) with a cuDNN and a GPU model like the exporting machine's: the reserve-space
    size of a differentiated call is fixed at export (the handlers check it at run time and fail with the sizes).
    Calls sharded over several devices cannot be exported (ValueError): export the per-device function.

    Returns the function that ``jax.export.export`` returns (call it with the arguments or their shapes).
    """
    checks = [*disabled_checks, *(jax.export.DisabledSafetyCheck.custom_call(target)
                                  for target in (_extension.FORWARD_TARGET, _extension.BACKWARD_DATA_TARGET,
                                                 _extension.BACKWARD_WEIGHTS_TARGET))]
    exporter = jax.export.export(fn, platforms=platforms, disabled_checks=checks, **kwargs)

    def run(*args, **call_kwargs):
        _exporting.allowed = True
        try:
            return exporter(*args, **call_kwargs)
        finally:
            _exporting.allowed = False

    return run


def _forward(params, x, h0, c0, seq_lengths, config: RNNConfig, allow_tf32: bool, plan: Plan | None,
             training: bool, policy: str = algorithm.HEURISTIC, where: placement.Placement = placement.UNKNOWN):
    """One cuDNN forward: (y, h_n, c_n or None, reserve_space or None), run per batch shard under sharding
    (``partitioning.batch_partitioned``). The training forward runs under ``plan`` and once per mapped element of
    ``jax.vmap``; the inference forward (``plan`` None) folds ``jax.vmap`` into its batch (``batching.fold_vmap``) and
    plans for that batch under ``policy``."""
    lstm = config.has_cell_state
    args, in_axes = [x, h0, params], [1, 1, None]  # batch axes; params are shared by the batch
    if lstm:
        args.append(c0)
        in_axes.append(1)
    if seq_lengths is not None:
        args.append(seq_lengths)
        in_axes.append(0)
    out_axes = [1, 1] + [1] * lstm + [0] * training  # the reserve space's rows are the batch

    def kernel(*args):
        call_plan = plan or _plan(config, args[0].shape, seq_lengths, allow_tf32, policy, where, training=False)
        call = functools.partial(_forward_call, plan=call_plan, config=config, allow_tf32=allow_tf32,
                                 training=training)
        # The training forward splits the batch as its reserve space is split, which the backward call follows.
        follow = ("out", len(out_axes) - 1) if training else None
        return partitioning.batch_partitioned(call, in_axes, out_axes, follow,
                                              call_plan.local_batches if training else None)(*args)

    if training:
        y, h_n, *rest = _export_guard_p.bind(*batching.sequential_vmap(kernel)(*args))
    else:
        y, h_n, *rest = _export_guard_p.bind(*batching.fold_vmap(kernel, in_axes, out_axes)(*args))
    c_n = rest.pop(0) if lstm else None
    reserve_space = rest.pop(0) if training else None
    return y, h_n, c_n, reserve_space


def _backward_call(params, x, h0, y, dy, dh_n, reserve_space, *rest, plan: Plan, config: RNNConfig,
                   allow_tf32: bool):
    """cuDNN's backward data then backward weights on (local) arrays; ``rest`` is [c0, dc_n] for an LSTM, then
    seq_lengths if given. Returns (dparams, dx, dh0, [dc0: lstm], reserve_space). Both passes update the reserve space
    in place, so each returns it aliased to its input, which also orders backward weights after backward data; the
    last is returned so that a caller that donates the reserve space lets XLA reuse it without a copy."""
    lstm = config.has_cell_state
    c0, dc_n = rest[:2] if lstm else (None, None)
    seq_lengths = rest[-1:] if len(rest) > 2 * lstm else []
    attributes = _attributes(config, allow_tf32, plan.algorithm)
    rows = reserve_space.shape
    reserve_space = reserve_space.reshape(-1)
    out_types = [jax.ShapeDtypeStruct(x.shape, y.dtype), jax.ShapeDtypeStruct(h0.shape, y.dtype),
                 jax.ShapeDtypeStruct(reserve_space.shape, reserve_space.dtype)]
    if lstm:
        out_types.append(jax.ShapeDtypeStruct(c0.shape, y.dtype))
    dx, dh0, reserve_space, *dc0 = jax.ffi.ffi_call(
        _extension.BACKWARD_DATA_TARGET, out_types, input_output_aliases={5: 2})(
        y, dy, h0, dh_n, params, reserve_space, *([c0, dc_n] if lstm else []), *seq_lengths, **attributes)
    dparams, reserve_space = jax.ffi.ffi_call(
        _extension.BACKWARD_WEIGHTS_TARGET,
        [jax.ShapeDtypeStruct(params.shape, params.dtype), jax.ShapeDtypeStruct(reserve_space.shape, jnp.uint8)],
        input_output_aliases={3: 1})(x, h0, y, reserve_space, *seq_lengths, **attributes)
    return (dparams, dx, dh0, *dc0, reserve_space.reshape(rows))


def _backward(params, x, h0, y, dy, dh_n, reserve_space, c0, dc_n, seq_lengths, *, config: RNNConfig,
              allow_tf32: bool, plan: Plan):
    """The backward passes of one call, per batch shard: (dparams, dx, dh0, dc0 or None, reserve_space)."""
    lstm = config.has_cell_state
    args, in_axes = [params, x, h0, y, dy, dh_n, reserve_space], [None, 1, 1, 1, 1, 1, 0]
    if lstm:
        args += [c0, dc_n]
        in_axes += [1, 1]
    if seq_lengths is not None:
        args.append(seq_lengths)
        in_axes.append(0)
    call = functools.partial(_backward_call, plan=plan, config=config, allow_tf32=allow_tf32)
    # dparams sums over the batch: per shard a partial sum, added up across the shards. The split follows the
    # reserve space's under the forward's rule (only into planned local batches): where the forward ran whole
    # against XLA's propagated split, the backward then asks for the whole buffer back instead of slices of it.
    backward = partitioning.batch_partitioned(call, in_axes, [None, 1, 1] + [1] * lstm + [0], follow=("in", 6),
                                              local_batches=plan.local_batches)
    dparams, dx, dh0, *rest = batching.sequential_vmap(backward)(*args)
    return dparams, dx, dh0, (rest[0] if lstm else None), rest[-1]


# Called eagerly (the backward of an eager jax.vjp), the backward donates the reserve space: cuDNN updates it in
# place, and without donation XLA would copy the whole buffer first to keep the residual intact.
_backward_donating = jax.jit(_backward, static_argnames=("config", "allow_tf32", "plan"), donate_argnums=(6,))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8))
def _rnn(params, x, h0, c0, seq_lengths, config: RNNConfig, allow_tf32: bool, policy: str,
         where: placement.Placement = placement.UNKNOWN):
    y, h_n, c_n, _ = _forward(params, x, h0, c0, seq_lengths, config, allow_tf32, None, False, policy, where)
    return y, h_n, c_n


def _rnn_fwd(params, x, h0, c0, seq_lengths, config: RNNConfig, allow_tf32: bool, policy: str,
             where: placement.Placement):
    plan = _plan(config, x.shape, seq_lengths, allow_tf32, policy, where, training=True)
    y, h_n, c_n, reserve_space = _forward(params, x, h0, c0, seq_lengths, config, allow_tf32, plan, True)
    return (y, h_n, c_n), (params, x, h0, c0, seq_lengths, y, reserve_space, plan)


def _is_concrete(*values) -> bool:
    return all(not isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(values))


def _rnn_bwd(config: RNNConfig, allow_tf32: bool, policy: str, where: placement.Placement, residuals, cotangents):
    params, x, h0, c0, seq_lengths, y, reserve_space, plan = residuals
    dy, dh_n, dc_n = cotangents
    backward = functools.partial(_backward, config=config, allow_tf32=allow_tf32, plan=plan)
    if _is_concrete(residuals, cotangents):
        if reserve_space.is_deleted():
            # This vjp function ran before and its backward consumed the reserve space: write it again.
            reserve_space = _forward(params, x, h0, c0, seq_lengths, config, allow_tf32, plan, True)[3]
        backward = functools.partial(_backward_donating, config=config, allow_tf32=allow_tf32, plan=plan)
    dparams, dx, dh0, dc0, _ = backward(params, x, h0, y, dy, dh_n, reserve_space, c0, dc_n, seq_lengths)
    return dparams, dx, dh0, dc0, None


_rnn.defvjp(_rnn_fwd, _rnn_bwd)


def _rnn_with_dropout(params, x, h0, c0, seq_lengths, config: RNNConfig, dropout_key, allow_tf32: bool,
                      policy: str, where: placement.Placement = placement.UNKNOWN):
    masks = dropout.masks_for(dropout_key, config, x.shape)
    return _rnn_with_masks(params, x, h0, c0, seq_lengths, config, masks, allow_tf32, policy, where)


def _rnn_with_masks(params, x, h0, c0, seq_lengths, config: RNNConfig, masks, allow_tf32: bool, policy: str,
                    where: placement.Placement = placement.UNKNOWN):
    """Layer by layer (``stacking.rnn_with_masks``), each layer one cuDNN call."""
    def run_layer(params, x, h0, c0, single: RNNConfig):
        return _rnn(params, x, h0, c0, seq_lengths, single, allow_tf32, policy, where)

    return stacking.rnn_with_masks(run_layer, params, x, h0, c0, config, masks)


def unavailable() -> str | None:
    """What cuDNN needs that this process lacks (the extension, a CUDA GPU), or None when it can run here."""
    if not _extension.extension_loaded():
        return f"the cuDNN extension, which is not loaded: {_extension.extension_error()}"
    if not any(placement.lowering_platform(d) == "cuda" for d in jax.local_devices()):
        # Tracing a differentiated call asks cuDNN for its reserve-space size, which needs a live GPU.
        return (f"a CUDA GPU, but this process sees none (JAX's devices: "
                f"{', '.join(sorted({d.platform for d in jax.local_devices()}))}); install jax[cuda13] on a machine "
                "with an NVIDIA GPU, or use implementation='xla'")
    return None


def check_available() -> None:
    """Raises RuntimeError saying why cuDNN cannot run here and how to get it."""
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(f"implementation='cudnn' needs {reason}")


def call_placement(params, x, h0, c0, seq_lengths) -> placement.Placement:
    """What tracing knows about where a call on these arrays runs (``placement.of_arrays`` with their batch axes)."""
    return placement.of_arrays([x, h0, c0, seq_lengths, params], [1, 1, 1, 0, None])


MAX_TIME_STEPS = 65535
"""The most time steps one cuDNN call is given; a longer x runs as time chunks with the state carried
(``chunking.run_chunked``). PyTorch's cuDNN LSTM fails with CUDNN_STATUS_NOT_SUPPORTED at 65,536 steps and runs
65,535 (pytorch issue 133751, PyTorch 2.4). Not yet measured with this library's calls on a GPU:
tests/test_cudnn_gpu.py runs one call of MAX_TIME_STEPS steps and a chunked call of one step more."""


def backend(allow_tf32: bool = False, algorithm_policy: str | None = None) -> chunking.Backend:
    """cuDNN as a fused backend (``chunking.Backend``): ``run(params, x, h0, c0, config, seq_lengths, dropout_masks)``
    with lengths in [0, T] (0: an empty sequence) and any T (time chunks of at most ``MAX_TIME_STEPS``, read at each
    call); dropout masks run the network layer by layer. ``allow_tf32`` and ``algorithm_policy`` as ``rnn_cudnn``'s."""
    check_available()
    allow_tf32 = bool(allow_tf32)
    policy = algorithm.check_policy(algorithm_policy)

    def call(params, x, h0, c0, config: RNNConfig, seq_lengths, dropout_masks):
        where = call_placement(params, x, h0, c0, seq_lengths)
        if dropout_masks:
            return _rnn_with_masks(params, x, h0, c0, seq_lengths, config, dropout_masks, allow_tf32, policy, where)
        return _rnn(params, x, h0, c0, seq_lengths, config, allow_tf32, policy, where)

    def run(params, x, h0, c0, config: RNNConfig, seq_lengths, dropout_masks):
        return chunking.run_chunked(call, MAX_TIME_STEPS, params, x, h0, c0, config, seq_lengths, dropout_masks)

    return run


def rnn_cudnn(params, x, h0, c0, config: RNNConfig, seq_lengths=None, is_training: bool = False, dropout_key=None,
              allow_tf32: bool = False, algorithm_policy: str | None = None):
    """cuDNN's stacked LSTM/GRU/RNN. Arguments as ``jax_cudnn_rnn.rnn`` after validation:

    params 1-D ``params_size(config)`` of config.dtype; x [T, B, input_size] (any T: see ``MAX_TIME_STEPS``); h0
    [L*D, B, hidden_size]; c0 [L*D, B, num_units] (LSTM) or None; seq_lengths int32 [B] in [0, T] or None (0 is an
    empty sequence; a length above T fails the call on the device, naming seq_lengths); dropout_key: a PRNG key when
    inter-layer dropout applies (is_training and config.dropout > 0), else None; allow_tf32: let float32 GEMMs use
    TF32 tensor cores; algorithm_policy: ``rnn``'s ``algorithm`` (see jax_cudnn_rnn/algorithm.py). The algorithm is
    chosen once per cuDNN call, while it is traced, for the batch each device runs and on the call's GPU
    (``call_placement``).

    Returns (y [T, B, D*hidden_size], h_n like h0, c_n like c0 or None).
    """
    run = backend(allow_tf32, algorithm_policy)
    masks = None
    if dropout_key is not None and is_training and config.dropout > 0 and config.num_layers > 1:
        masks = dropout.masks_for(dropout_key, config, x.shape)
    return run(params, x, h0, c0, config, seq_lengths, masks)
