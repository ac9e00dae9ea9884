"""What ``jax-cudnn-rnn bench`` times: the contenders, each of which sets itself up for one benchmark problem
(``BenchConfig``, jax_cudnn_rnn/tools/bench/problems.py) and dtype as a ``Runner`` of zero-argument calls that block on
their result.

Nothing here imports JAX or this package at module level: a PyTorch contender's worker process
(jax_cudnn_rnn/tools/bench/measure.py) loads this file without them, so that PyTorch is timed in a process that holds
nothing else. Each builder imports what it needs.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np

# The problems beside this file: the package's module, or (a worker that loaded this file by path: measure.py) the file
# itself, so that this package stays unimported there. The bench's names for them are these.
problems = importlib.import_module(f"{__package__}.problems" if __package__ else "problems")
BenchConfig, CONFIGS, GPU_CONFIGS, CPU_CONFIGS = (
    problems.BenchConfig,
    problems.CONFIGS,
    problems.GPU_CONFIGS,
    problems.CPU_CONFIGS,
)
FWD, TRAIN, MEASUREMENTS, DTYPES = problems.FWD, problems.TRAIN, problems.MEASUREMENTS, problems.DTYPES
PADDED_CONFIGS, QUICK_SIZES = problems.PADDED_CONFIGS, problems.QUICK_SIZES

TORCH, FLAX = "torch", "flax"
PACKAGE = "jax_cudnn_rnn"


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
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)  # facts for the records (what ran)


def on_gpu() -> bool:
    import jax

    return jax.default_backend() == "gpu"


def _jax_peak_bytes() -> int | None:
    import jax

    if not on_gpu():
        return None
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def _memory_analysis(fn: Any, *args: Any) -> Any:
    """XLA's memory analysis of the jitted ``fn`` compiled for ``args``, or None where the backend has none."""
    try:
        return fn.lower(*args).compile().memory_analysis()
    except Exception:  # noqa: BLE001 - the analysis is optional on every backend
        return None


def _jax_runner(
    forward: Callable[..., Any],
    loss: Callable[..., Any],
    args: tuple[Any, ...],
    inference_only: bool,
    extra_bytes: dict[str, int | None] | None = None,
) -> Runner:
    """Jits ``forward(*args)`` and the gradient of ``loss(*args)`` with respect to its first two arguments.
    ``extra_bytes``: per measurement, device memory the step takes outside XLA's buffers (cuDNN's workspace)."""
    import jax

    fwd = jax.jit(forward)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    runner = Runner(forward=lambda: jax.block_until_ready(fwd(*args)), train=None, peak_bytes=_jax_peak_bytes)
    if not inference_only:
        runner.train = lambda: jax.block_until_ready(grad(*args))
    for measurement, fn in ((FWD, fwd), (TRAIN, grad))[: 1 if inference_only else 2]:
        stats = _memory_analysis(fn, *args)
        if stats is None:
            continue
        step = stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes
        runner.compiled_bytes[measurement] = int(stats.argument_size_in_bytes + step)
        extra = (extra_bytes or {}).get(measurement, 0)
        runner.op_bytes[measurement] = None if extra is None else int(step + extra)
    return runner


def _sum_squares(y: Any) -> Any:
    import jax.numpy as jnp

    return jnp.sum(jnp.square(y.astype(jnp.float32)))


def inputs(bc: BenchConfig) -> np.ndarray:
    """The time-major input [T, B, I] as float32 NumPy (each contender casts it)."""
    return np.random.default_rng(0).standard_normal((bc.time, bc.batch, bc.input_size), dtype=np.float32)


# ------------------------------------------------------------------------------------------------ this library


def _build_jcr(bc: BenchConfig, dtype: str, implementation: str | None) -> Runner:
    """``rnn(implementation=implementation)`` on ``bc``. This library's contenders use its public names and the
    registry's documented questions (jax_cudnn_rnn/backends/registry.py: what the default runs, what a run takes
    outside XLA's buffers) with its record of a call (jax_cudnn_rnn/backends/call.py), nothing of a backend's own."""
    import jax
    import jax.numpy as jnp

    import jax_cudnn_rnn as jcr
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.backends.call import Call

    cfg = bc.rnn_config(dtype)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jnp.asarray(inputs(bc), dtype=dtype)
    h0 = jnp.zeros(cfg.state_shape(bc.batch), dtype)
    c0 = jnp.zeros(cfg.cell_shape(bc.batch), dtype) if cfg.has_cell_state else None
    # The lengths as an argument, as a user's step takes them (a constant would let XLA fold what depends on them).
    lengths = () if bc.lengths() is None else (jnp.asarray(bc.lengths()),)

    def forward(params: Any, x: Any, *lengths: Any) -> Any:
        if bc.decode:
            return jax.lax.scan(lambda states, x_t: decode_step(params, x_t, states), (h0, c0), x)[1]
        return jcr.rnn(
            params, x, h0, c0, cfg, seq_lengths=lengths[0] if lengths else None, implementation=implementation
        )[0]

    def decode_step(params: Any, x_t: Any, states: tuple[Any, Any]) -> tuple[tuple[Any, Any], Any]:
        y, h, c = jcr.rnn(params, x_t[None], *states, cfg, implementation=implementation)
        return (h, c), y[0]

    one_call = dataclasses.replace(bc, time=1) if bc.decode else bc  # what each rnn() call runs
    # rnn(precision=None) follows JAX's setting, which the bench sets to "float32" or "tensorfloat32" (--precision).
    precision = jax.config.jax_default_matmul_precision or "float32"
    call = Call(cfg, one_call.time, bc.batch, seq_lengths=bc.padded, precision=precision)
    picked = implementation or registry.implementation_for(x, call)
    # The memory each measurement's kernels take outside XLA's buffers (cuDNN's workspace, oneDNN's scratch pool).
    extra = {
        measurement: registry.scratch_bytes(picked, call, side)
        for measurement, side in ((FWD, registry.FORWARD), (TRAIN, registry.TRAINING))
    }
    runner = _jax_runner(
        forward, lambda p, x, *n: _sum_squares(forward(p, x, *n)), (params, x, *lengths), bc.inference_only, extra
    )
    if implementation is None:  # what the registry chose, on each side ("onednn+xla": see registry.py's names)
        runner.notes["implementation"] = picked
    return runner


def _needs(name: str, bc: BenchConfig | None, dtype: str | None) -> str | None:
    """The registry's own answer (jax_cudnn_rnn/backends/registry.py) to why ``name`` cannot run the call here."""
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.backends.call import Call

    call = Call() if bc is None else Call(bc.rnn_config(dtype), bc.time, bc.batch, seq_lengths=bc.padded)
    reason = registry.why_not(name, registry.lowering_platform(), call)
    return None if reason is None else f"implementation={name!r} needs {reason}"


def implementation_unavailable(name: str) -> Callable[[], str | None]:
    return lambda: _needs(name, None, None)


def implementation_unsupported(name: str) -> Callable[[BenchConfig, str], str | None]:
    return lambda bc, dtype: _needs(name, bc, dtype)


# ------------------------------------------------------------------------------------------------------- peers


def _module_missing(module: str) -> Callable[[], str | None]:
    """Whether ``module`` is installed, asked without importing it (the process that asks times nothing; the one
    that times it reports a failed import as a skip)."""

    def check() -> str | None:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError) as e:
            return f"{module} is not importable: {e}"
        return None if found else f"{module} is not installed"

    return check


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
    import jax
    import jax.numpy as jnp

    model = _flax_model(bc, dtype)
    x32 = jnp.asarray(np.swapaxes(inputs(bc), 0, 1))
    # Initialised in float32 and cast: the orthogonal recurrent initialiser has no bfloat16 QR on the CPU.
    variables = _flax_model(bc, "float32").init(jax.random.key(0), x32)
    variables = jax.tree.map(lambda v: v.astype(dtype), variables)
    x = x32.astype(dtype)
    return _jax_runner(model.apply, lambda v, x: _sum_squares(model.apply(v, x)), (variables, x), bc.inference_only)


def _build_jax_exp(bc: BenchConfig, dtype: str) -> Runner:
    import jax
    import jax.numpy as jnp
    from jax.experimental import rnn as exp_rnn

    bidirectional = bc.bidirectional
    weights = exp_rnn.init_lstm_weight(
        jax.random.key(0), bc.input_size, bc.hidden, bc.num_layers, bidirectional
    ).astype(dtype)
    x = jnp.asarray(np.swapaxes(inputs(bc), 0, 1), dtype=dtype)
    state_shape = (bc.num_layers * (2 if bidirectional else 1), bc.batch, bc.hidden)
    h0, c0 = jnp.zeros(state_shape, dtype), jnp.zeros(state_shape, dtype)
    lengths = jnp.full((bc.batch,), bc.time, jnp.int32) if bc.lengths() is None else jnp.asarray(bc.lengths())

    def forward(weights: Any, x: Any) -> Any:
        return exp_rnn.lstm(
            x,
            h0,
            c0,
            weights,
            lengths,
            input_size=bc.input_size,
            hidden_size=bc.hidden,
            num_layers=bc.num_layers,
            dropout=0.0,
            bidirectional=bidirectional,
        )[0]

    return _jax_runner(forward, lambda w, x: _sum_squares(forward(w, x)), (weights, x), bc.inference_only)


def jax_exp_unavailable() -> str | None:
    """``jax.experimental.rnn`` only lowers to cuDNN/MIOpen; a tiny probe call tells whether it runs here."""
    import jax
    import jax.numpy as jnp

    if not on_gpu():
        return f"jax.experimental.rnn runs only on a GPU, and JAX's backend here is {jax.default_backend()!r}"
    try:
        from jax.experimental import rnn as exp_rnn

        weights = exp_rnn.init_lstm_weight(jax.random.key(0), 2, 2, 1, False)
        zeros = jnp.zeros((1, 1, 2))
        jax.block_until_ready(
            exp_rnn.lstm(
                zeros,
                zeros,
                zeros,
                weights,
                jnp.ones((1,), jnp.int32),
                input_size=2,
                hidden_size=2,
                num_layers=1,
                dropout=0.0,
                bidirectional=False,
            )
        )
    except Exception as e:  # noqa: BLE001 - any failure means it does not run on this backend
        return f"jax.experimental.rnn failed on a tiny probe call here ({short(e)})"
    return None


def _decoding(bc: BenchConfig) -> str | None:
    """Why a JAX peer sits out a decoding problem (PyTorch's loop of module calls is the peer there), or None."""
    return "decoding: the peer is PyTorch's loop of one-step calls" if bc.decode else None


def _lstm_only(bc: BenchConfig, dtype: str) -> str | None:
    if bc.mode != "lstm":
        return f"jax.experimental.rnn supports LSTM only, not {bc.mode.upper()}"
    return _decoding(bc)


def _no_lengths(bc: BenchConfig, dtype: str) -> str | None:
    return "a padded batch: the Flax stack here takes no lengths" if bc.padded else _decoding(bc)


def _build_torch(bc: BenchConfig, dtype: str) -> Runner:
    """PyTorch's module; a padded batch as a ``PackedSequence`` (``pack_padded_sequence``, packed in every call as a
    user's step would, the loss over the packed outputs)."""
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = getattr(torch, dtype)
    kind = torch.nn.LSTM if bc.mode == "lstm" else torch.nn.GRU
    module = kind(bc.input_size, bc.hidden, num_layers=bc.num_layers, bidirectional=bc.bidirectional)
    module = module.to(device=device, dtype=torch_dtype)
    x = torch.from_numpy(inputs(bc)).to(device=device, dtype=torch_dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    lengths = None if bc.lengths() is None else torch.from_numpy(bc.lengths()).to(torch.int64)

    def run(x: Any) -> Any:
        if bc.decode:  # one module call per step, the states carried
            states = None
            for t in range(x.shape[0]):
                y, states = module(x[t : t + 1], states)
            return y
        if lengths is None:
            return module(x)[0]
        return module(torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False))[0].data

    def forward() -> None:
        with torch.no_grad():
            run(x)
        sync()

    def train() -> None:
        xg = x.detach().requires_grad_(True)
        loss = run(xg).float().square().sum()
        torch.autograd.grad(loss, [xg, *module.parameters()])
        sync()

    on_cuda = device.type == "cuda"
    return Runner(
        forward=forward,
        train=None if bc.inference_only else train,
        reset_peak=torch.cuda.reset_peak_memory_stats if on_cuda else (lambda: None),
        peak_bytes=torch.cuda.max_memory_allocated if on_cuda else (lambda: None),
        allocated_bytes=torch.cuda.memory_allocated if on_cuda else (lambda: None),
        notes={"torch_num_threads": torch.get_num_threads()},
    )


def set_torch_precision(precision: str) -> None:
    """PyTorch's float32 matmul precision for cuDNN and cuBLAS (``--precision``)."""
    import torch

    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = precision == "tensorfloat32"


def short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return first[:300]


def _any_config(bc: BenchConfig, dtype: str) -> str | None:
    return None


@dataclasses.dataclass(frozen=True)
class Contender:
    """``unavailable()`` and ``unsupported(config, dtype)`` return a reason to skip, or None; ``build`` sets up.
    ``ours``: this library's (a failure is an error, not a skip); ``imports_package``: its process imports this
    package (PyTorch's and Flax's do not, when each contender runs in a process of its own); ``framework``: "jax" or
    "torch", whose float32 precision setting applies; ``by_default``: run when no contenders are named."""

    name: str
    build: Callable[[BenchConfig, str], Runner]
    unavailable: Callable[[], str | None] = lambda: None
    unsupported: Callable[[BenchConfig, str], str | None] = _any_config
    ours: bool = False
    imports_package: bool = False
    framework: str = "jax"
    by_default: bool = True


def _ours(name: str, implementation: str | None, by_default: bool = True) -> Contender:
    """``rnn(implementation=implementation)``, skipped where the registry says it cannot run (the default always
    runs)."""
    checks = () if implementation is None else (implementation_unavailable(implementation),)
    checks += () if implementation is None else (implementation_unsupported(implementation),)

    def build(bc: BenchConfig, dtype: str) -> Runner:
        return _build_jcr(bc, dtype, implementation)

    return Contender(name, build, *checks, ours=True, imports_package=True, by_default=by_default)


CONTENDERS = {
    c.name: c
    for c in (
        _ours("jcr-cudnn", "cudnn"),
        _ours("jcr-onednn", "onednn"),
        # oneDNN with its backward on plain weights (the variant "onednn:plain"), which the CPU rule's measurements
        # time (where the default runs it); named only. Any other implementation name runs as "jcr-<name>".
        _ours("jcr-onednn-plain", "onednn:plain", by_default=False),
        # The network as GEMMs on oneDNN's matmul primitive (jax_cudnn_rnn/backends/onednn/gemm.py); named only.
        _ours("jcr-onednn-gemm", "onednn:gemm", by_default=False),
        _ours("jcr-xla", "xla"),
        # What rnn(implementation=None) picks for the call (registry.implementation_for), for comparison with the peers.
        _ours("jcr-default", None),
        Contender(FLAX, _build_flax, _module_missing("flax"), _no_lengths),
        Contender("jax-exp-rnn", _build_jax_exp, jax_exp_unavailable, _lstm_only),
        Contender(TORCH, _build_torch, _module_missing("torch"), framework="torch"),
    )
}


def contender(name: str) -> Contender:
    """The contender ``name``: one of ``CONTENDERS``, or "jcr-<implementation>" for any implementation name the
    registry takes (``jax-cudnn-rnn tune`` times every single name it lists, variants included)."""
    if name in CONTENDERS:
        return CONTENDERS[name]
    if name.startswith("jcr-"):
        return _ours(name, name.removeprefix("jcr-"), by_default=False)
    raise KeyError(f"no contender {name!r}; known: {', '.join(CONTENDERS)}, or jcr-<implementation>")


def gemm(framework: str, dtype: str, size: int) -> Callable[[], Any]:
    """A [size, size] x [size, size] matrix product in ``framework`` ("onednn-matmul": oneDNN's matmul primitive through
    this package's extension, the fastest GEMM in the process on the CPU; "jax": XLA's dot; "torch") and ``dtype``
    (float32 accumulation in bfloat16 and float16, as the RNN kernels do), blocking on its result: the machine's
    attainable GEMM throughput, the roofline's ceiling."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    if framework == "torch":
        import torch

        ta, tb = (torch.from_numpy(m).to(getattr(torch, dtype)) for m in (a, b))
        return lambda: torch.mm(ta, tb)
    import jax
    import jax.numpy as jnp

    ja, jb = (jnp.asarray(m, dtype) for m in (a, b))
    if framework == "onednn-matmul":
        from jax_cudnn_rnn.backends.onednn import kernels

        product = jax.jit(kernels.matmul)
    else:
        product = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    return lambda: jax.block_until_ready(product(ja, jb))
