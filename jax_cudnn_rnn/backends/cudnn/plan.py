"""The plan of one cuDNN call: the algorithm it runs and the reserve rows it needs, decided once while it is traced.

The plan is made for the batch one device is expected to run (the per-shard batch under batch sharding,
``Placement.local_batches``) and asked of the GPU the call runs on, or, when tracing does not know it, of one GPU of
each model this process has (``planning_devices``). The training forward hands its plan to the backward
with its residuals, so both passes run the same algorithm whatever another thread tunes meanwhile (cuDNN forbids a
backward under another algorithm than the forward that wrote the reserve space).

Sizes. The reserve space is an output of the training forward, so its size must be known when tracing. cuDNN only tells
it through ``cudnnGetRNNTempSpaceSizes`` on a live handle, so at trace time this module asks the extension (on the
call's GPU by CUDA ordinal, for full-length sequences [T, B]) and caches the answer per (problem, algorithm, device).
Tracing a differentiated call therefore needs a GPU, like jax.experimental.rnn. At run time each handler asks again
for the actual lengths and fails clearly if the buffer is too small. The workspace is never an output: each handler
takes it from XLA's scratch allocator.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax

from jax_cudnn_rnn.backends.cudnn import algorithm, gpu_rule, kernels, tuned
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.sharding import placement

# seconds(problem, algorithm, device) -> one timed run (autotune's measurement)
Timer = Callable[[algorithm.Problem, str, "jax.Device | None"], float]


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Plan:
    """The static decisions of one cuDNN call, shared by its forward and its backward passes.

    algorithm: the cuDNN algorithm every pass of the call runs (jax_cudnn_rnn/backends/cudnn/algorithm.py).
    device: CUDA ordinal in this process on which cuDNN was asked at trace time (-1: nothing was asked); the first of
      several when tracing did not know the call's GPU and the process has GPUs of several models.
    row_bytes: training only: bytes per batch row of the reserve-space array [B, row_bytes].
    local_batches: training only: the per-device batch sizes the reserve rows fit; a split of the batch into any
      other size runs the call whole (jax_cudnn_rnn/sharding/partitioning.py).
    """

    algorithm: str
    device: int = -1
    row_bytes: int = 0
    local_batches: tuple[int, ...] = ()


@functools.cache
def temp_space_sizes(problem: algorithm.Problem, chosen: str, device: int = -1) -> tuple[int, int]:
    """(workspace bytes, reserve-space bytes) cuDNN asks for ``problem``'s forward under algorithm ``chosen`` (the
    training forward when ``problem.training``, whose workspace also serves both backward passes; the reserve is 0 for
    inference), for full-length sequences, on CUDA device ``device`` of this process (-1: the current one). Needs a
    GPU; cached."""
    return kernels.temp_space_sizes(
        problem.config,
        problem.max_time,
        problem.batch,
        problem.padded,
        problem.training,
        problem.allow_tf32,
        chosen,
        device,
    )


def reserve_space_size(problem: algorithm.Problem, chosen: str, device: int = -1) -> int:
    """Bytes of cuDNN reserve space for the training forward of ``problem`` (full-length sequences) under algorithm
    ``chosen``, asked on CUDA device ``device`` (-1: the current one): needs a GPU."""
    return temp_space_sizes(dataclasses.replace(problem, training=True), chosen, device)[1]


def problem(config: RNNConfig, x_shape, padded: bool, allow_tf32: bool, training: bool) -> algorithm.Problem:
    return algorithm.Problem(config, int(x_shape[0]), int(x_shape[1]), padded, training, allow_tf32)


def known_gpu(where: placement.Placement) -> jax.Device | None:
    """The call's GPU when tracing knows it: a device of the call, else ``jax.default_device``'s when it is a GPU."""
    for device in (where.device, jax.config.jax_default_device):
        if device is not None and not isinstance(device, str) and device.platform == "gpu":
            return device
    return None


def target_device(where: placement.Placement) -> jax.Device | None:
    """The GPU of this process that trace-time questions about a call placed at ``where`` go to first: the call's GPU
    when tracing knows it (``known_gpu``), else this process's first GPU (where uncommitted arrays run)."""
    known = known_gpu(where)
    if known is not None:
        return known
    try:
        return jax.local_devices(backend="gpu")[0]
    except RuntimeError:
        return None


def planning_devices(where: placement.Placement) -> tuple[jax.Device | None, ...]:
    """The GPUs cuDNN is asked on to plan a call placed at ``where``: ``target_device``, and when tracing does not
    know the call's GPU, also one GPU of each other model (compute capability, SM count, kind) this process has.

    Under ``jax.jit`` over arrays committed to one GPU the placement is unknown, and one trace serves every device the
    arguments are later committed to (JAX caches the trace by abstract values, not by device), so the plan must hold
    on any of this process's GPUs. cuDNN's answers (reserve size, the heuristic's facts) are taken to depend on the GPU
    model, not on which GPU of a model is asked, so asking one of each model answers for the call's GPU, whichever it
    is (docs/lowering.md)."""
    first = target_device(where)
    if first is None or known_gpu(where) is not None:
        return (first,)
    models = {dataclasses.replace(algorithm.device_info(first), ordinal=-1): first}
    try:
        gpus = jax.local_devices(backend="gpu")
    except RuntimeError:  # no GPU backend: nothing else to ask
        gpus = []
    for device in gpus:
        models.setdefault(dataclasses.replace(algorithm.device_info(device), ordinal=-1), device)
    return tuple(models.values())


def check_processes_agree() -> None:
    """Every process traces the same program, and a cuDNN call's plan (its algorithm, its reserve size) depends on the
    GPU model: refuse a multi-process run over different GPU models, where the processes could disagree."""
    if jax.process_count() == 1:
        return
    kinds = sorted({device.device_kind for device in jax.devices() if device.platform == "gpu"})
    if len(kinds) > 1:
        raise ValueError(
            f"implementation='cudnn' with {jax.process_count()} JAX processes needs one GPU model in all "
            f"of them (each process plans the call for its own GPU, and every process must run the same "
            f"program), but the processes have {', '.join(kinds)}; use implementation='xla'"
        )


def measured(problem: algorithm.Problem, device: algorithm.DeviceInfo) -> str | None:
    """The algorithm the GPU rule measured fastest for ``problem`` on ``device``'s kind (this machine's tuned table
    where it has one, else the shipped measurements), or None where none covers it: ``algorithm="measured"``'s."""
    return gpu_rule.fastest(problem, device, tuned.for_kind(device.kind))


def plan(
    config: RNNConfig,
    x_shape,
    padded: bool,
    allow_tf32: bool,
    requested: str,
    where: placement.Placement,
    training: bool,
    seconds: Timer,
) -> Plan:
    """The call's plan: the algorithm ``requested`` resolves to for the batch one device is expected to run
    (``where.local_batches``), on the call's device (``seconds`` times one algorithm, for autotune; ``measured`` reads
    the GPU rule, for "measured"); for training also
    the reserve rows, sized for every local batch the call may run with. When tracing does not know the call's GPU and
    this process has GPUs of several models, the plan holds on each (``planning_devices``): the algorithm their choices
    agree on, else the standard one, and reserve rows that fit every model's size."""
    check_processes_agree()
    devices = planning_devices(where)
    infos = [algorithm.device_info(device) for device in devices]
    local_batches = where.local_batches(int(x_shape[1]))
    local = problem(config, (x_shape[0], local_batches[0]), padded, allow_tf32, training)
    choices = {
        algorithm.choose(
            requested, local, lambda candidate, device=device: seconds(local, candidate, device), info, measured
        )
        for device, info in zip(devices, infos, strict=True)
    }
    chosen = choices.pop() if len(choices) == 1 else algorithm.STANDARD
    if not training:
        return Plan(chosen, infos[0].ordinal)
    row_bytes, fitting = 0, set(local_batches)
    for info in infos:
        rows, fits = reserve_row_bytes(
            problem(config, x_shape, padded, allow_tf32, True), chosen, local_batches, info.ordinal
        )
        row_bytes, fitting = max(row_bytes, rows), fitting & set(fits)
    if not fitting:
        raise ValueError(
            f"implementation='cudnn' cannot plan this call for every GPU model of this process: cuDNN "
            f"refuses each of the local batches {local_batches} on one of them; commit the arrays to a "
            f"NamedSharding or set jax.default_device so that tracing knows the call's GPU"
        )
    return Plan(chosen, infos[0].ordinal, row_bytes, tuple(b for b in local_batches if b in fitting))


def reserve_row_bytes(
    whole: algorithm.Problem, chosen: str, local_batches: tuple[int, ...], device: int = -1
) -> tuple[int, tuple[int, ...]]:
    """(bytes per batch row of the reserve-space array [B, row_bytes] of ``whole``'s training forward, the local
    batches those rows fit).

    cuDNN's reserve space is one opaque buffer per call, sized by cuDNN per (T, batch) and not proportional to the
    batch. It travels as a [B, row_bytes] array so that when the batch is split over n devices
    (jax_cudnn_rnn/sharding/partitioning.py) each device's rows hold its own call's buffer: row_bytes is the largest
    per-row share over the local batches the call may run with (only the actual split when tracing knows it), so each
    of them fits, and unsplit B * row_bytes exceeds cuDNN's size by less than B bytes. A local batch cuDNN refuses
    under ``chosen`` is left out (the call would fail there anyway).
    """
    row_bytes, fitting, error = 0, [], None
    for local in local_batches:
        try:
            size = reserve_space_size(dataclasses.replace(whole, batch=local), chosen, device)
        except RuntimeError as e:
            error = e
            continue
        row_bytes = max(row_bytes, -(-size // local))
        fitting.append(local)
    if not fitting:
        raise error
    return row_bytes, tuple(fitting)
