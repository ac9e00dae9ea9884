"""Which cuDNN RNN algorithm runs a call: by default the one measured fastest on the GPU's kind for the call's shape
class where measurements cover it (``MEASURED``: jax_cudnn_rnn/backends/cudnn/gpu_rule.py, from the shipped table or
this machine's, ``jax-cudnn-rnn tune``), else PyTorch's heuristic; an explicit choice; or timed in this process
(autotune).

cuDNN's standard algorithm launches a GEMM and a pointwise kernel per time step. The persistent algorithms keep the
recurrent weights on chip and run all steps in one kernel, which wins by far when the per-step work is small: on an
H100 (docs/BENCHMARKS.md, config F, LSTM H128 B32 T1000) PyTorch's forward takes 2.6 ms in one
``RNN_blockPersist_fp_LSTM`` kernel where the standard algorithm takes 16-21 ms in 2,000 launches.

Limits (cuDNN's documentation of cudnnRNNAlgo_t and cudnnSetRNNDescriptor_v8): no persistent algorithm supports
per-sequence lengths, projection or float64; nor, as seen on an H200 with cuDNN 9.19 (cudnnSetRNNDescriptor_v8
answers CUDNN_STATUS_NOT_SUPPORTED), a single-bias weight space (the Flax and Equinox modules' own
parameterizations), so only double bias, the one mode seen to run (PyTorch's), runs persistent.
PERSIST_STATIC_SMALL_H needs a small hidden size (smaller still for the backward pass); cuDNN says not to mix
algorithms between the forward and the backward of one training step, so a differentiated call chooses with the
backward limits and both passes use that choice. Cell clipping stays on the standard algorithm: the clipping
semantics were verified only there.

The weight space is the same for every algorithm, so a choice never changes ``params``.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import threading
import time
from collections.abc import Callable

import jax

from jax_cudnn_rnn.config import RNNConfig

STANDARD = "standard"
PERSIST_STATIC = "persist_static"
PERSIST_STATIC_SMALL_H = "persist_static_small_h"
ALGORITHMS = (STANDARD, PERSIST_STATIC, PERSIST_STATIC_SMALL_H)
MEASURED, HEURISTIC, AUTOTUNE = "measured", "heuristic", "autotune"
CHOICES = (MEASURED, HEURISTIC, AUTOTUNE, *ALGORITHMS)  # what rnn(algorithm=...) accepts besides None (MEASURED)


@dataclasses.dataclass(frozen=True)
class Problem:
    """What the choice depends on: one cuDNN call's network, shape and mode."""

    config: RNNConfig
    max_time: int
    batch: int
    padded: bool  # the call has seq_lengths
    training: bool  # the forward of a differentiated call: the choice must serve the backward passes too
    allow_tf32: bool


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """The GPU facts PyTorch's heuristic reads (compute capability, streaming multiprocessor count), the device's
    kind, and its CUDA ordinal in this process, on which cuDNN is asked (-1: none)."""

    major: int = 0
    minor: int = 0
    sm_count: int = 0
    kind: str = ""
    ordinal: int = -1


@functools.cache
def _facts(device: jax.Device) -> DeviceInfo:
    major, _, minor = str(getattr(device, "compute_capability", "0.0")).partition(".")
    return DeviceInfo(
        int(major or 0),
        int(minor or 0),
        int(getattr(device, "core_count", 0) or 0),
        str(device.device_kind),
        _ordinal(device),
    )


def _ordinal(device: jax.Device) -> int:
    """The CUDA ordinal of ``device`` in this process (what cudaSetDevice takes)."""
    local = getattr(device, "local_hardware_id", None)
    return int(device.id if local is None else local)


def device_info(device: jax.Device | None = None) -> DeviceInfo:
    """``device``'s facts, or those of this process's first CUDA device when None; all zero (ordinal -1) for a
    device that is not a GPU or when this process sees none (then only the standard algorithm is chosen)."""
    if device is None:
        try:
            device = jax.local_devices(backend="gpu")[0]
        except RuntimeError:
            return DeviceInfo()
    if device.platform != "gpu":
        return DeviceInfo()
    return _facts(device)


def _small_h_limit(config: RNNConfig, training: bool) -> int:
    """The largest hidden size PERSIST_STATIC_SMALL_H runs (PyTorch's use_rnn_persist_small_h, cuDNN's limits)."""
    gated = config.mode in ("lstm", "gru")
    if training:
        return 128 if gated else 256
    return 192 if gated else 384


def unsupported_reason(algorithm: str, problem: Problem) -> str | None:
    """Why cuDNN cannot run ``problem`` with ``algorithm`` (None if it can, as far as its documented limits go)."""
    config = problem.config
    if algorithm == STANDARD:
        return None
    if problem.padded:
        return "the call has seq_lengths, which only the standard algorithm supports"
    if config.proj_size:
        return "projection (proj_size > 0) runs only with the standard algorithm"
    if config.cell_clip is not None:
        return "cell_clip runs only with the standard algorithm here"
    if config.dtype.name == "float64":
        return "the persistent algorithms have no float64"
    if config.bias_mode != "double":
        return f"bias_mode={config.bias_mode!r} runs only with the standard algorithm (persistent ones need 'double')"
    if algorithm == PERSIST_STATIC_SMALL_H:
        limit = _small_h_limit(config, problem.training)
        if config.num_units > limit:
            return (
                f"{PERSIST_STATIC_SMALL_H} runs {config.mode} with num_units <= {limit} "
                f"({'forward and backward' if problem.training else 'inference'}), got {config.num_units}"
            )
    return None


def candidates(problem: Problem) -> tuple[str, ...]:
    """The algorithms that may run ``problem``, standard first."""
    return tuple(a for a in ALGORITHMS if unsupported_reason(a, problem) is None)


def _persist_static_wins(problem: Problem, device: DeviceInfo) -> bool:
    """PyTorch's use_persist_common_heuristics and use_persist_device_heuristics (aten/src/ATen/native/cudnn/RNN.cpp),
    which it applies to float16 only."""
    config, batch = problem.config, problem.batch
    if not (
        config.num_layers == 1
        and config.num_directions == 1
        and config.num_units <= 1024
        and config.num_units % 128 == 0
        and config.input_size % 128 == 0
    ):
        return False
    if device.major == 7:
        if device.minor == 5:
            return False
        return ((batch % 16 == 0 and batch not in (80, 112)) or batch == 8) and (
            (problem.max_time >= 40 and batch <= 128)
            or (problem.max_time >= 20 and batch <= 96)
            or (problem.max_time >= 10 and batch <= 32)
        )
    if device.major >= 8 and device.sm_count >= 98 and device.minor != 6:
        if config.mode == "gru":
            return False
        if config.mode == "lstm":
            return batch % 8 == 0 and batch <= 128
        return batch % 8 == 0 and batch <= 128 and (batch < 96 or config.num_units < 896)
    return False


def heuristic(problem: Problem, device: DeviceInfo) -> str:
    """PyTorch's choice (get_algo): SMALL_H where the hidden size allows it, PERSIST_STATIC for float16 where its
    heuristics say it wins, else the standard algorithm."""
    if device.major < 6:
        return STANDARD
    if unsupported_reason(PERSIST_STATIC_SMALL_H, problem) is None:
        return PERSIST_STATIC_SMALL_H
    if (
        problem.config.dtype.name == "float16"
        and unsupported_reason(PERSIST_STATIC, problem) is None
        and _persist_static_wins(problem, device)
    ):
        return PERSIST_STATIC
    return STANDARD


_TUNED: dict[tuple[Problem, str], str] = {}
_TUNING: dict[tuple[Problem, str], threading.Lock] = {}
_TUNED_LOCK = threading.Lock()


def autotune(problem: Problem, seconds: Callable[[str], float], device: DeviceInfo = DeviceInfo()) -> str:
    """The fastest of ``candidates(problem)`` by ``seconds(algorithm)`` (one timed run each) on a device of
    ``device.kind``, measured once per problem and device kind in this process and cached; an algorithm whose run
    raises (cuDNN's NOT_SUPPORTED) is skipped.

    Thread-safe: one thread measures a problem while the others that trace it wait for its result (timings taken
    concurrently on one GPU would disturb each other), and a stored choice never changes (the first result wins)."""
    key = (problem, device.kind)
    with _TUNED_LOCK:
        if key in _TUNED:
            return _TUNED[key]
        measuring = _TUNING.setdefault(key, threading.Lock())
    with measuring:
        with _TUNED_LOCK:
            if key in _TUNED:
                return _TUNED[key]
        timings = {}
        for algorithm in candidates(problem):
            try:
                timings[algorithm] = seconds(algorithm)
            except Exception:  # an algorithm cuDNN refuses for this shape is simply not a candidate
                if algorithm == STANDARD:
                    raise
        with _TUNED_LOCK:
            return _TUNED.setdefault(key, min(timings, key=timings.__getitem__))


def tuned() -> dict[Problem, str]:
    """A copy of the autotune cache (problem -> algorithm; with several device kinds, the first kind's)."""
    with _TUNED_LOCK:
        result: dict[Problem, str] = {}
        for (problem, _), algorithm in _TUNED.items():
            result.setdefault(problem, algorithm)
        return result


def median_seconds(run: Callable[[], object], repeats: int = 5, warmup: int = 2, warmup_seconds: float = 0.0) -> float:
    """Median wall time of ``run()`` in seconds over ``repeats`` timed runs; ``run`` must block on its result
    (autotune's measurement, and the benchmark's). Before timing, ``run`` is called ``warmup`` times and then until
    ``warmup_seconds`` have passed since the first call returned: that call may compile, and a GPU left idle meanwhile
    clocks down and needs sustained work to clock up again."""
    calls, started = 0, None

    def warming() -> bool:
        return calls < warmup or (
            warmup_seconds > 0 and (started is None or time.perf_counter() - started < warmup_seconds)
        )

    while warming():
        run()
        calls += 1
        started = time.perf_counter() if started is None else started
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def check_algorithm(algorithm: str | None) -> str:
    """``rnn(..., algorithm=...)`` checked: None means "measured"; anything else must be one of CHOICES."""
    if algorithm is None:
        return MEASURED
    if not isinstance(algorithm, str) or algorithm not in CHOICES:
        raise ValueError(f"algorithm is {algorithm!r}; expected None or one of {', '.join(CHOICES)}")
    return algorithm


def choose(
    requested: str,
    problem: Problem,
    seconds: Callable[[str], float],
    device: DeviceInfo | None = None,
    measured: Callable[[Problem, DeviceInfo], str | None] | None = None,
) -> str:
    """The algorithm one call runs for ``rnn``'s ``algorithm=requested`` (checked) on ``device`` (default: this
    process's first GPU).

    "measured" runs ``measured(problem, device)``'s answer (the GPU rule's: the algorithm measured fastest in the call's
    shape class on the device's kind), and the heuristic's where it has none (None, or no ``measured`` given). An
    explicit algorithm cuDNN cannot run raises ValueError. "autotune" is refused (ValueError) when several JAX
    processes run the program: each would time its own GPU and could choose differently, and every process must run
    the same program."""
    device = device_info() if device is None else device
    if requested == MEASURED:
        found = None if measured is None else measured(problem, device)
        return heuristic(problem, device) if found is None else found
    if requested == HEURISTIC:
        return heuristic(problem, device)
    if requested == AUTOTUNE:
        if jax.process_count() > 1:
            raise ValueError(
                f"algorithm='autotune' is refused with {jax.process_count()} JAX processes: each process would time "
                "its own GPU and might choose another algorithm, but every process must run the same program. Use "
                "algorithm=None (the heuristic, the same in every process on the same GPU model) or an explicit "
                "algorithm, e.g. one that algorithm='autotune' chose in a single-process run "
                "(jax_cudnn_rnn.backends.cudnn.algorithm.tuned() lists them)."
            )
        return autotune(problem, seconds, device)
    reason = unsupported_reason(requested, problem)
    if reason is not None:
        raise ValueError(f"algorithm={requested!r} cannot run this call: {reason}")
    return requested
