"""``jax-cudnn-rnn bench``: times this library's RNN against Flax, ``jax.experimental.rnn`` and PyTorch.

For each named configuration and dtype every available contender is timed on the forward pass and on a training
step (gradient of ``sum(y**2)`` with respect to the parameters and ``x``): warm-up runs, then the median of
``--repeats`` runs, each blocked on its result. Every time is also given as a ratio to PyTorch's and to Flax's time
for the same configuration, dtype and measurement (< 1 means faster). Results go to a ``rich`` table and optionally
to JSON (with the machine's facts), Markdown and a PNG bar plot of the ratios to PyTorch.

A contender that cannot run (no GPU, no extension, PyTorch not installed, an LSTM-only peer on a GRU) is skipped
with its reason; a peer that fails while running is skipped too, while a failure of this library's own
implementations is an error (exit code 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import math
import os
import platform
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn, ops
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.cudnn import algorithm, plan
from jax_cudnn_rnn.sharding import placement

FWD, TRAIN = "fwd", "fwd+bwd"
MEASUREMENTS = (FWD, TRAIN)
TORCH, FLAX = "torch", "flax"
DTYPES = ("float32", "bfloat16", "float16")
QUICK_SIZES = {"time": 10, "batch": 4, "hidden": 32, "input_size": 32}


@dataclasses.dataclass(frozen=True)
class Timing:
    """How each measurement is timed: the median of ``repeats`` runs after at least ``warmup`` untimed runs and at
    least ``warmup_seconds`` of them (``algorithm.median_seconds``)."""
    repeats: int
    warmup: int
    warmup_seconds: float = 0.0


def describe_timing(timing: Timing) -> str:
    """E.g. "median of 20 timed runs, after 3 warm-up runs lasting at least 0.25 s"."""
    plural = "s" if timing.warmup != 1 else ""
    warmup = f"{timing.warmup} warm-up run{plural}" if timing.warmup else "no warm-up run"
    if timing.warmup_seconds > 0:
        warmup += f" lasting at least {timing.warmup_seconds:g} s"
    return f"median of {timing.repeats} timed run{'s' if timing.repeats != 1 else ''}, after {warmup}"


DEFAULT_TIMING = Timing(repeats=20, warmup=3, warmup_seconds=0.25)
QUICK_TIMING = Timing(repeats=3, warmup=1, warmup_seconds=0.0)
NOTES = (
    "op_bytes: device memory one step needs beyond its inputs (outputs, temporaries, workspace), the table's 'op MiB' "
    "(of the training step where there is one). torch on CUDA: max_memory_allocated - memory_allocated, both after "
    "reset_peak_memory_stats; jax: XLA's memory analysis of the compiled step (outputs + temporaries - aliased) plus, "
    "for jcr-cudnn, the largest cuDNN workspace of its calls (taken from XLA's scratch allocator at run time, which "
    "the analysis does not see); None for torch off CUDA.",
    "peak_bytes: torch = torch.cuda.max_memory_allocated after reset_peak_memory_stats; jax = the device's "
    "peak_bytes_in_use, a high-water mark since process start that JAX cannot reset; None off GPU.",
    "compiled_bytes (jax contenders only): XLA's memory analysis of the compiled step (arguments + outputs + "
    "temporaries - aliased).",
    "float32 precision (settings.precision) is the same for every contender that has the knob: the JAX ones run "
    "under jax.default_matmul_precision(precision) (rnn()'s precision=None follows it), PyTorch under "
    "torch.backends.cudnn.allow_tf32 / cuda.matmul.allow_tf32 = (precision == 'tensorfloat32'); "
    "jax.experimental.rnn sets its own cuDNN math type.",
)


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """One benchmark problem. ``time`` x ``batch`` x ``input_size`` input, ``hidden`` units per layer."""

    name: str
    mode: str
    num_layers: int
    hidden: int
    input_size: int
    batch: int
    time: int
    direction: str = "unidirectional"
    inference_only: bool = False
    platform: str = "gpu"

    @property
    def bidirectional(self) -> bool:
        return self.direction == "bidirectional"

    def rnn_config(self, dtype: str) -> jcr.RNNConfig:
        return jcr.RNNConfig(mode=self.mode, num_layers=self.num_layers, num_units=self.hidden,
                             input_size=self.input_size, direction=self.direction, dtype=dtype)

    def describe(self) -> str:
        layers = f"{self.num_layers} layer{'s' if self.num_layers > 1 else ''}"
        extras = [layers] + (["bidirectional"] if self.bidirectional else []) + (
            ["inference only"] if self.inference_only else [])
        return (f"{self.mode.upper()} T={self.time} B={self.batch} I={self.input_size} H={self.hidden}, "
                + ", ".join(extras))

    def shrunk(self) -> BenchConfig:
        """The ``--quick`` form: the same network shape with tiny sizes."""
        return dataclasses.replace(self, **{k: min(v, getattr(self, k)) for k, v in QUICK_SIZES.items()})


GPU_CONFIGS = (
    BenchConfig("A", "lstm", 1, 512, 512, 64, 100),
    BenchConfig("B", "lstm", 2, 512, 512, 1, 100, inference_only=True),
    BenchConfig("C", "lstm", 1, 1024, 1024, 128, 25),
    BenchConfig("D", "lstm", 4, 1024, 512, 64, 200, direction="bidirectional"),
    BenchConfig("E", "gru", 1, 2048, 2048, 32, 750),
    BenchConfig("F", "lstm", 1, 128, 64, 32, 1000),
)
CPU_CONFIGS = (
    BenchConfig("cpu-lstm", "lstm", 1, 256, 256, 32, 100, platform="cpu"),
    BenchConfig("cpu-gru", "gru", 1, 256, 256, 32, 100, platform="cpu"),
)
CONFIGS = {c.name: c for c in GPU_CONFIGS + CPU_CONFIGS}


# ----------------------------------------------------------------------------------------------------------- timing


@dataclasses.dataclass
class Runner:
    """A contender set up for one config and dtype: zero-argument calls that run and block on the result."""

    forward: Callable[[], Any]
    train: Callable[[], Any] | None
    reset_peak: Callable[[], None] = lambda: None
    peak_bytes: Callable[[], int | None] = lambda: None
    allocated_bytes: Callable[[], int | None] = lambda: None  # now, for op_bytes = peak - allocated at reset
    compiled_bytes: dict[str, int | None] = dataclasses.field(default_factory=dict)
    op_bytes: dict[str, int | None] = dataclasses.field(default_factory=dict)  # where known without running


def _on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def _jax_peak_bytes() -> int | None:
    if not _on_gpu():
        return None
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def _memory_analysis(fn: Any, *args: Any) -> Any:
    """XLA's memory analysis of the jitted ``fn`` compiled for ``args``, or None where the backend has none."""
    try:
        return fn.lower(*args).compile().memory_analysis()
    except Exception:  # noqa: BLE001 - the analysis is optional on every backend
        return None


def _jax_runner(forward: Callable[..., Any], loss: Callable[..., Any], args: tuple[Any, ...],
                inference_only: bool, extra_bytes: dict[str, int | None] | None = None) -> Runner:
    """Jits ``forward(*args)`` and the gradient of ``loss(*args)`` with respect to its first two arguments.
    ``extra_bytes``: per measurement, device memory the step takes outside XLA's buffers (cuDNN's workspace)."""
    fwd = jax.jit(forward)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    runner = Runner(forward=lambda: jax.block_until_ready(fwd(*args)), train=None, peak_bytes=_jax_peak_bytes)
    if not inference_only:
        runner.train = lambda: jax.block_until_ready(grad(*args))
    for measurement, fn in ((FWD, fwd), (TRAIN, grad))[:1 if inference_only else 2]:
        stats = _memory_analysis(fn, *args)
        if stats is None:
            continue
        step = stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes
        runner.compiled_bytes[measurement] = int(stats.argument_size_in_bytes + step)
        extra = (extra_bytes or {}).get(measurement, 0)
        runner.op_bytes[measurement] = None if extra is None else int(step + extra)
    return runner


def _sum_squares(y: Any) -> Any:
    return jnp.sum(jnp.square(y.astype(jnp.float32)))


def _inputs(bc: BenchConfig) -> np.ndarray:
    """The time-major input [T, B, I] as float32 NumPy (each contender casts it)."""
    return np.random.default_rng(0).standard_normal((bc.time, bc.batch, bc.input_size), dtype=np.float32)


# ------------------------------------------------------------------------------------------------------ contenders


def _build_jcr(bc: BenchConfig, dtype: str, implementation: str) -> Runner:
    cfg = bc.rnn_config(dtype)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jnp.asarray(_inputs(bc), dtype=dtype)
    h0 = jnp.zeros(cfg.state_shape(bc.batch), dtype)
    c0 = jnp.zeros(cfg.cell_shape(bc.batch), dtype) if cfg.has_cell_state else None

    def forward(params: Any, x: Any) -> Any:
        return jcr.rnn(params, x, h0, c0, cfg, implementation=implementation)[0]

    extra = {FWD: _cudnn_workspace(bc, cfg, False), TRAIN: _cudnn_workspace(bc, cfg, True)} \
        if implementation == "cudnn" else None
    return _jax_runner(forward, lambda p, x: _sum_squares(forward(p, x)), (params, x), bc.inference_only, extra)


def _cudnn_workspace(bc: BenchConfig, cfg: jcr.RNNConfig, training: bool) -> int | None:
    """The workspace cuDNN asks for the benchmark's call (under the default algorithm choice), or None if unknown."""
    allow_tf32 = ops.resolve_precision(None) == "tensorfloat32"  # rnn(precision=None) follows the bench's setting
    problem = algorithm.Problem(cfg, bc.time, bc.batch, padded=False, training=training, allow_tf32=allow_tf32)
    try:
        return plan.temp_space_sizes(problem, algorithm.heuristic(problem, algorithm.device_info()))[0]
    except Exception:  # noqa: BLE001 - then op_bytes is unknown rather than wrong
        return None


def _flax_model(bc: BenchConfig, dtype: str) -> Any:
    """A stack of ``num_layers`` ``nn.RNN`` layers (``nn.Bidirectional`` pairs when bidirectional), batch-major."""
    import flax.linen as nn

    def cell() -> nn.Module:
        kind = nn.OptimizedLSTMCell if bc.mode == "lstm" else nn.GRUCell
        return kind(bc.hidden, dtype=dtype, param_dtype=dtype)

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            for _ in range(bc.num_layers):
                x = nn.Bidirectional(nn.RNN(cell()), nn.RNN(cell()))(x) if bc.bidirectional else nn.RNN(cell())(x)
            return x

    return Stack()


def _build_flax(bc: BenchConfig, dtype: str) -> Runner:
    model = _flax_model(bc, dtype)
    x32 = jnp.asarray(np.swapaxes(_inputs(bc), 0, 1))
    # Initialised in float32 and cast: the orthogonal recurrent initialiser has no bfloat16 QR on the CPU.
    variables = _flax_model(bc, "float32").init(jax.random.key(0), x32)
    variables = jax.tree.map(lambda v: v.astype(dtype), variables)
    x = x32.astype(dtype)
    return _jax_runner(model.apply, lambda v, x: _sum_squares(model.apply(v, x)), (variables, x), bc.inference_only)


def _build_jax_exp(bc: BenchConfig, dtype: str) -> Runner:
    from jax.experimental import rnn as exp_rnn

    bidirectional = bc.bidirectional
    weights = exp_rnn.init_lstm_weight(jax.random.key(0), bc.input_size, bc.hidden, bc.num_layers,
                                       bidirectional).astype(dtype)
    x = jnp.asarray(np.swapaxes(_inputs(bc), 0, 1), dtype=dtype)
    state_shape = (bc.num_layers * (2 if bidirectional else 1), bc.batch, bc.hidden)
    h0, c0 = jnp.zeros(state_shape, dtype), jnp.zeros(state_shape, dtype)
    lengths = jnp.full((bc.batch,), bc.time, jnp.int32)

    def forward(weights: Any, x: Any) -> Any:
        return exp_rnn.lstm(x, h0, c0, weights, lengths, input_size=bc.input_size, hidden_size=bc.hidden,
                            num_layers=bc.num_layers, dropout=0.0, bidirectional=bidirectional)[0]

    return _jax_runner(forward, lambda w, x: _sum_squares(forward(w, x)), (weights, x), bc.inference_only)


def _build_torch(bc: BenchConfig, dtype: str) -> Runner:
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = getattr(torch, dtype)
    kind = torch.nn.LSTM if bc.mode == "lstm" else torch.nn.GRU
    module = kind(bc.input_size, bc.hidden, num_layers=bc.num_layers, bidirectional=bc.bidirectional)
    module = module.to(device=device, dtype=torch_dtype)
    x = torch.from_numpy(_inputs(bc)).to(device=device, dtype=torch_dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def forward() -> None:
        with torch.no_grad():
            module(x)
        sync()

    def train() -> None:
        xg = x.detach().requires_grad_(True)
        loss = module(xg)[0].float().square().sum()
        torch.autograd.grad(loss, [xg, *module.parameters()])
        sync()

    on_cuda = device.type == "cuda"
    return Runner(forward=forward, train=None if bc.inference_only else train,
                  reset_peak=torch.cuda.reset_peak_memory_stats if on_cuda else (lambda: None),
                  peak_bytes=torch.cuda.max_memory_allocated if on_cuda else (lambda: None),
                  allocated_bytes=torch.cuda.memory_allocated if on_cuda else (lambda: None))


def _default_platform() -> str:
    """The platform the benchmark's jitted calls are lowered for: that of JAX's default device."""
    return placement.lowering_platform(jax.devices()[0])


def _needs(name: str, call: Call) -> str | None:
    """The registry's own answer (jax_cudnn_rnn/backends/registry.py) to why ``name`` cannot run ``call`` here."""
    reason = registry.why_not(name, _default_platform(), call)
    return None if reason is None else f"implementation={name!r} needs {reason}"


def _implementation_unavailable(name: str) -> Callable[[], str | None]:
    return lambda: _needs(name, Call())


def _implementation_unsupported(name: str) -> Callable[[BenchConfig, str], str | None]:
    return lambda bc, dtype: _needs(name, Call(bc.rnn_config(dtype), bc.time, bc.batch))


def _module_missing(module: str) -> Callable[[], str | None]:
    def check() -> str | None:
        try:
            importlib.import_module(module)
        except ImportError as e:
            return f"{module} is not importable: {e}"
        return None

    return check


def _jax_exp_unavailable() -> str | None:
    """``jax.experimental.rnn`` only lowers to cuDNN/MIOpen; a tiny probe call tells whether it runs here."""
    if not _on_gpu():
        return f"jax.experimental.rnn runs only on a GPU, and JAX's backend here is {jax.default_backend()!r}"
    try:
        from jax.experimental import rnn as exp_rnn

        weights = exp_rnn.init_lstm_weight(jax.random.key(0), 2, 2, 1, False)
        zeros = jnp.zeros((1, 1, 2))
        jax.block_until_ready(exp_rnn.lstm(zeros, zeros, zeros, weights, jnp.ones((1,), jnp.int32), input_size=2,
                                           hidden_size=2, num_layers=1, dropout=0.0, bidirectional=False))
    except Exception as e:  # noqa: BLE001 - any failure means it does not run on this backend
        return f"jax.experimental.rnn failed on a tiny probe call here ({_short(e)})"
    return None


def _lstm_only(bc: BenchConfig, dtype: str) -> str | None:
    return None if bc.mode == "lstm" else f"jax.experimental.rnn supports LSTM only, not {bc.mode.upper()}"


def _any_config(bc: BenchConfig, dtype: str) -> str | None:
    return None


@dataclasses.dataclass(frozen=True)
class Contender:
    """``unavailable()`` and ``unsupported(config, dtype)`` return a reason to skip, or None; ``build`` sets up."""

    name: str
    build: Callable[[BenchConfig, str], Runner]
    unavailable: Callable[[], str | None] = lambda: None
    unsupported: Callable[[BenchConfig, str], str | None] = _any_config
    ours: bool = False


CONTENDERS = {c.name: c for c in (
    Contender("jcr-cudnn", lambda bc, dt: _build_jcr(bc, dt, "cudnn"), _implementation_unavailable("cudnn"),
              _implementation_unsupported("cudnn"), ours=True),
    Contender("jcr-onednn", lambda bc, dt: _build_jcr(bc, dt, "onednn"), _implementation_unavailable("onednn"),
              _implementation_unsupported("onednn"), ours=True),
    Contender("jcr-xla", lambda bc, dt: _build_jcr(bc, dt, "xla"), ours=True),
    # What rnn(implementation=None) picks for the call (registry.implementation_for), for comparison with the peers.
    Contender("jcr-default", lambda bc, dt: _build_jcr(bc, dt, None), ours=True),
    Contender(FLAX, _build_flax, _module_missing("flax.linen")),
    Contender("jax-exp-rnn", _build_jax_exp, _jax_exp_unavailable, _lstm_only),
    Contender(TORCH, _build_torch, _module_missing("torch")),
)}


# ---------------------------------------------------------------------------------------------------------- running


@dataclasses.dataclass
class Results:
    records: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    skipped: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    errors: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def _measure(runner: Runner, measurement: str, timing: Timing) -> dict[str, Any]:
    """ms (median), peak_bytes, op_bytes and compiled_bytes of one measurement."""
    fn = runner.forward if measurement == FWD else runner.train
    runner.reset_peak()
    before = runner.allocated_bytes()
    # each runner's calls block on their results
    ms = 1e3 * algorithm.median_seconds(fn, timing.repeats, timing.warmup, timing.warmup_seconds)
    peak = runner.peak_bytes()
    op = peak - before if peak is not None and before is not None else runner.op_bytes.get(measurement)
    return {"ms": ms, "peak_bytes": peak, "op_bytes": op, "compiled_bytes": runner.compiled_bytes.get(measurement)}


def run_one(contender: Contender, bc: BenchConfig, dtype: str, timing: Timing) -> list[dict[str, Any]]:
    """Times ``contender`` on ``bc`` in ``dtype``: one record per measurement (ratios filled in later)."""
    runner = contender.build(bc, dtype)
    records = []
    for measurement in MEASUREMENTS:
        if measurement == TRAIN and runner.train is None:
            continue
        records.append({"config": bc.name, "dtype": dtype, "contender": contender.name, "measurement": measurement,
                        **_measure(runner, measurement, timing)})
    return records


def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return first[:300]


def _run_guarded(results: Results, log: Callable[[str, str], None], contender: Contender, bc: BenchConfig,
                 dtype: str, timing: Timing) -> None:
    """``run_one`` with its outcome logged and stored: records, a skip (unsupported, or a peer failed) or an error."""
    where = f"{bc.name} {dtype} {contender.name}"
    entry = {"config": bc.name, "dtype": dtype, "contender": contender.name}
    reason = contender.unsupported(bc, dtype)
    if reason:
        log("skip", f"{where}: {reason}")
        results.skipped.append({**entry, "reason": reason})
        return
    try:
        records = run_one(contender, bc, dtype, timing)
    except Exception as e:  # noqa: BLE001 - one failing contender must not stop the others
        if contender.ours:
            log("error", f"{where}: {_short(e)}")
            results.errors.append({**entry, "error": _short(e)})
        else:
            log("skip", f"{where}: failed: {_short(e)}")
            results.skipped.append({**entry, "reason": f"failed: {_short(e)}"})
        return
    results.records.extend(records)
    log("ok", f"{where}: " + ", ".join(f"{r['measurement']} {r['ms']:.3f} ms" for r in records))


def run_all(configs: Sequence[BenchConfig], dtypes: Sequence[str], contenders: Sequence[Contender], timing: Timing,
            log: Callable[[str, str], None]) -> Results:
    """Runs every contender on every config and dtype; ``log(kind, text)`` gets one line per result ("ok"), skip
    ("skip") or error ("error")."""
    results = Results()
    available = []
    for contender in contenders:
        reason = contender.unavailable()
        if reason:
            log("skip", f"{contender.name}: {reason}")
            results.skipped.append({"config": None, "dtype": None, "contender": contender.name, "reason": reason})
        else:
            available.append(contender)
    for bc in configs:
        for dtype in dtypes:
            for contender in available:
                _run_guarded(results, log, contender, bc, dtype, timing)
    add_ratios(results.records)
    return results


def add_ratios(records: list[dict[str, Any]]) -> None:
    """Sets ``ratio_to_torch`` and ``ratio_to_flax``: ms / the peer's ms for the same config, dtype, measurement."""
    def key(record: dict[str, Any]) -> tuple[str, str, str]:
        return record["config"], record["dtype"], record["measurement"]

    baselines = {(r["contender"], key(r)): r["ms"] for r in records}
    for record in records:
        for peer in (TORCH, FLAX):
            base = baselines.get((peer, key(record)))
            record[f"ratio_to_{peer}"] = record["ms"] / base if base else None


# ---------------------------------------------------------------------------------------------------------- output


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux, where ``platform.processor()`` is empty), with its family and
    model numbers, which a VM's generic name ("Intel(R) Xeon(R) Processor") leaves out; "" elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            fields = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line)
    except OSError:
        return ""
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return f"{fields.get('model name', '')} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')})"


def machine_facts() -> dict[str, Any]:
    """Date, CPU, OS, library versions, JAX backend and device kind (and the CUDA device PyTorch sees, if any)."""
    device = jax.devices()[0]
    facts = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "processor": platform.processor() or _cpu_model(),
        "uname": platform.uname()._asdict(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in ("jax", "jaxlib", "flax", "torch", "numpy", "jax-cudnn-rnn")},
        "jax_backend": jax.default_backend(),
        "jax_device_kind": device.device_kind,
        "jax_device_count": jax.device_count(),
        "cudnn_extension_loaded": jcr.extension_loaded(),
        "onednn_extension_loaded": onednn.extension_loaded(),
        "onednn_version": list(onednn.module().onednn_version()) if onednn.extension_loaded() else None,
        "openmp_wait_policy": onednn.openmp_wait_policy() if onednn.extension_loaded() else None,
        "torch_cuda_device": None,
        "torch_num_threads": None,
        "xla_python_client_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
        "jax_default_matmul_precision": jax.config.jax_default_matmul_precision,
        "torch_cudnn_allow_tf32": None,
    }
    try:
        import torch

        facts["torch_num_threads"] = torch.get_num_threads()
        facts["torch_cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
        if torch.cuda.is_available():
            facts["torch_cuda_device"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return facts


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _ratio(value: float | None) -> str:
    """At most 5 characters, never in scientific notation: 0.42, 3.14, 12.3, 435."""
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 99.5 else f"{value:.1f}" if value >= 9.995 else f"{value:.2f}"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.3g}"


TABLE_COLUMNS = ("config", "dtype", "contender", "fwd ms", "fwd/pt", "fwd/flax", "train ms", "train/pt",
                 "train/flax", "op MiB")
# One line per column, printed under the table and the Markdown.
LEGEND = (
    "config, dtype: the benchmark problem (listed above) and its dtype; contender: what ran (jcr-* are this library's "
    "implementations, pt is PyTorch).",
    "fwd ms: median milliseconds of the forward pass; train ms: of a training step (forward and the gradient of "
    "sum(y**2) with respect to the parameters and x).",
    "fwd/pt, train/pt: that time divided by PyTorch's for the same config, dtype and measurement; fwd/flax, "
    "train/flax: divided by Flax nn.RNN's. Below 1 is faster.",
    "op MiB: device memory the training step (the forward pass where there is none) needs beyond its inputs: "
    "outputs, temporaries and cuDNN's workspace; '-' where it is not measured (PyTorch off CUDA).",
)


def table_rows(records: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row per (config, dtype, contender), in the order first measured; '-' where there is no value."""
    grouped: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for r in records:
        grouped.setdefault((r["config"], r["dtype"], r["contender"]), {})[r["measurement"]] = r
    rows = []
    for (config, dtype, contender), by_measurement in grouped.items():
        cells = [config, dtype, contender]
        for measurement in MEASUREMENTS:
            r = by_measurement.get(measurement, {})
            cells += [_fmt(r.get("ms"), ".2f")] + [_ratio(r.get(f"ratio_to_{peer}")) for peer in (TORCH, FLAX)]
        last = by_measurement.get(TRAIN) or by_measurement[FWD]
        rows.append(cells + [_mib(last.get("op_bytes"))])
    return rows


def print_table(console: Any, rows: Sequence[Sequence[str]], title: str) -> None:
    """The rows under ``TABLE_COLUMNS`` (a table that fits 100 columns for the configs and contenders here), then
    the legend."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), title_justify="left", show_edge=False,
                  pad_edge=False)
    for i, column in enumerate(TABLE_COLUMNS):
        table.add_column(column, justify="left" if i < 3 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for line in LEGEND:
        console.print(line, highlight=False)


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "| " + " | ".join("---" for _ in TABLE_COLUMNS) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n\n" + "\n".join(f"* {line}" for line in LEGEND) + "\n"


def markdown_report(rows: Sequence[Sequence[str]], configs: Sequence[BenchConfig], facts: dict[str, Any],
                    repeats: int) -> str:
    """A one-line context, the results table and the configurations' sizes, ready to paste into Markdown."""
    versions = ", ".join(f"{k} {v}" for k, v in facts["versions"].items() if v)
    context = (f"{facts['date_utc']}, {facts['jax_backend']} ({facts['jax_device_kind']}), {facts['cpu_count']} CPUs, "
               f"{versions}; median of {repeats} runs, ms; ratios < 1 are faster than the peer.\n")
    config_lines = ["| config | network |", "| --- | --- |"] + [f"| {c.name} | {c.describe()} |" for c in configs]
    return context + "\n" + markdown_table(rows) + "\n" + "\n".join(config_lines) + "\n"


def _group(record: dict[str, Any]) -> str:
    return f"{record['config']}\n{record['dtype']}"


def _plot_panel(ax: Any, rated: Sequence[dict[str, Any]], measurement: str) -> None:
    """One measurement's grouped bars on a linear axis from 0, the value on each bar, and PyTorch's time as the
    dashed line at 1."""
    groups = list(dict.fromkeys(_group(r) for r in rated))
    contenders = list(dict.fromkeys(r["contender"] for r in rated))
    width = 0.8 / max(1, len(contenders))
    highest = 1.0
    for i, contender in enumerate(contenders):
        ratios = {_group(r): r["ratio_to_torch"] for r in rated
                  if r["contender"] == contender and r["measurement"] == measurement}
        xs = [g + (i - (len(contenders) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, [ratios.get(g, math.nan) for g in groups], width, label=contender)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
        highest = max([highest, *(v for v in ratios.values() if v is not None and math.isfinite(v))])
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="PyTorch = 1")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 1.15 * highest)  # from 0, so that bar heights compare; headroom for the labels
    ax.set_ylabel("time / PyTorch's time")
    ax.set_title(measurement)
    if rated:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no PyTorch results", ha="center", va="center", transform=ax.transAxes)


def write_plot(records: Sequence[dict[str, Any]], path: str) -> None:
    """A PNG of ratio-to-torch bars: one panel per measurement, one group per config/dtype, one bar per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rated = [r for r in records if r.get("ratio_to_torch") is not None and r["contender"] != TORCH]
    num_groups = len({_group(r) for r in rated})
    fig, axes = plt.subplots(1, len(MEASUREMENTS), figsize=(max(8.0, 1.2 * num_groups * len(MEASUREMENTS)), 4.5),
                             squeeze=False)
    for ax, measurement in zip(axes[0], MEASUREMENTS):
        _plot_panel(ax, rated, measurement)
    fig.suptitle("time / PyTorch's time for the same config, dtype and measurement (< 1 is faster)")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def write_json(path: str, facts: dict[str, Any], settings: dict[str, Any], results: Results) -> None:
    payload = {"machine": facts, "settings": settings, "notes": list(NOTES), "records": results.records,
               "skipped": results.skipped, "errors": results.errors}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2)
        f.write("\n")


# ------------------------------------------------------------------------------------------------------------- CLI


def _names(kind: str, known: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse ``type`` for a comma-separated list of names from ``known``."""
    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {kind} {', '.join(map(repr, unknown)) or '(none given)'}; "
                                             f"known {kind}s: {', '.join(known)}")
        return names

    return parse


def _at_least(minimum: float, kind: Callable[[str], float] = int) -> Callable[[str], Any]:
    """An argparse ``type`` for a ``kind`` (int or float) >= ``minimum``."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not value >= minimum:  # also rejects nan
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configs", type=_names("config", list(CONFIGS)), default=None,
                        help=f"comma-separated configs from {', '.join(CONFIGS)} (default: A-F on a GPU, the cpu-* "
                             "ones otherwise)")
    parser.add_argument("--dtypes", type=_names("dtype", DTYPES), default=None,
                        help="comma-separated dtypes (default: float32,bfloat16 on a GPU, float32 otherwise)")
    parser.add_argument("--contenders", type=_names("contender", list(CONTENDERS)), default=None,
                        help=f"comma-separated contenders from {', '.join(CONTENDERS)} (default: all)")
    parser.add_argument("--repeats", type=_at_least(1), default=None,
                        help=f"timed runs per measurement; the median is kept (default: {DEFAULT_TIMING.repeats}, "
                             f"{QUICK_TIMING.repeats} with "
                             "--quick)")
    parser.add_argument("--warmup", type=_at_least(0), default=None,
                        help=f"untimed runs before timing (default: {DEFAULT_TIMING.warmup}, {QUICK_TIMING.warmup} with "
                             "--quick)")
    parser.add_argument("--warmup-seconds", type=_at_least(0.0, float), default=None,
                        help="keep warming up until this many seconds have passed since the first untimed run "
                             f"returned (default: {DEFAULT_TIMING.warmup_seconds}, {QUICK_TIMING.warmup_seconds} with "
                             "--quick): a GPU that idled while the step compiled clocks up again before timing")
    parser.add_argument("--quick", action="store_true",
                        help=f"CI smoke run: the configs shrunk to at most T={QUICK_SIZES['time']} "
                             f"B={QUICK_SIZES['batch']} I=H={QUICK_SIZES['hidden']} (default selection: the cpu-* "
                             f"ones), {QUICK_TIMING.repeats} repeats, {QUICK_TIMING.warmup} warm-up")
    parser.add_argument("--precision", choices=("float32", "tensorfloat32"), default="float32",
                        help="float32 matmul precision for every contender: strict float32 (default) or TF32 tensor "
                             "cores (GPU only; PyTorch's own default for cuDNN RNNs is TF32)")
    parser.add_argument("--json", metavar="PATH", help="write machine facts and one record per measurement here")
    parser.add_argument("--markdown", metavar="PATH", help="write the table as Markdown here")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG bar plot of the ratios to PyTorch here")


def select_configs(names: Sequence[str] | None, quick: bool) -> list[BenchConfig]:
    if names:
        configs = [CONFIGS[name] for name in dict.fromkeys(names)]
    else:
        configs = list(GPU_CONFIGS if _on_gpu() and not quick else CPU_CONFIGS)
    return [c.shrunk() for c in configs] if quick else configs


def _console() -> Any:
    from rich.console import Console

    console = Console()
    # Piped output gets rich's default of 80 columns, which would fold the table; it is made to fit 100.
    return console if console.is_terminal else Console(width=100)


def _logger(console: Any) -> Callable[[str, str], None]:
    from rich.markup import escape

    def log(kind: str, text: str) -> None:
        prefix = {"skip": "[yellow]skip[/] ", "error": "[red]error[/] "}.get(kind, "")
        console.print(prefix + escape(text))

    return log


def _write_outputs(args: argparse.Namespace, facts: dict[str, Any], settings: dict[str, Any], results: Results,
                   rows: Sequence[Sequence[str]], configs: Sequence[BenchConfig]) -> None:
    if args.json:
        write_json(args.json, facts, settings, results)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown_report(rows, configs, facts, settings["repeats"]))
    if args.plot:
        write_plot(results.records, args.plot)


def _set_torch_precision(precision: str) -> None:
    try:
        import torch
    except ImportError:
        return
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = precision == "tensorfloat32"


def run(args: argparse.Namespace) -> int:
    """The ``bench`` subcommand: 0 on success, 1 if one of this library's implementations failed."""
    # Otherwise JAX reserves 75 % of the GPU up front and PyTorch gets the rest; only effective before JAX's backend
    # starts, which importing this module does not do.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    console = _console()
    log = _logger(console)
    configs = select_configs(args.configs, args.quick)
    dtypes = list(dict.fromkeys(args.dtypes or (["float32", "bfloat16"] if _on_gpu() else ["float32"])))
    contenders = [CONTENDERS[name] for name in dict.fromkeys(args.contenders or CONTENDERS)]
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(Timing) if getattr(args, f.name) is not None}
    timing = dataclasses.replace(QUICK_TIMING if args.quick else DEFAULT_TIMING, **overrides)
    facts = machine_facts()
    log("info", f"jax {facts['versions']['jax']} on {facts['jax_backend']} ({facts['jax_device_kind']}), "
                f"{facts['cpu_count']} CPUs; {describe_timing(timing)}")
    for c in configs:
        log("info", f"  {c.name}: {c.describe()}")
    _set_torch_precision(args.precision)
    with jax.default_matmul_precision(args.precision):
        results = run_all(configs, dtypes, contenders, timing, log)
    rows = table_rows(results.records)
    print_table(console, rows, f"milliseconds, {describe_timing(timing)}")
    settings = {"configs": [dataclasses.asdict(c) for c in configs], "dtypes": dtypes,
                "contenders": [c.name for c in contenders], **dataclasses.asdict(timing), "quick": args.quick,
                "precision": args.precision}
    _write_outputs(args, facts, settings, results, rows, configs)
    return 1 if results.errors else 0
