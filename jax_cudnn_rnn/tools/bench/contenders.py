"""What ``jax-cudnn-rnn bench`` times: the contenders, each of which sets itself up for one benchmark problem
(``BenchConfig``, jax_cudnn_rnn/tools/bench/problems.py) and dtype as a ``Runner`` of zero-argument calls that block on
their result (jax_cudnn_rnn/tools/bench/runner.py): this library's, here, and its peers' (jax_cudnn_rnn/tools/bench/
peers.py).

Nothing here imports JAX or this package at module level: a PyTorch contender's worker process
(jax_cudnn_rnn/tools/bench/measure.py) loads this file without them, so that PyTorch is timed in a process that holds
nothing else. Each builder imports what it needs.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np


# The modules beside this file: the package's, or (a worker that loaded this file by path: measure.py) the files
# themselves, so that this package stays unimported there. The bench's names for what they hold are these.
def _beside(name: str) -> Any:
    return importlib.import_module(f"{__package__}.{name}" if __package__ else name)


problems, peers, runner = _beside("problems"), _beside("peers"), _beside("runner")
BenchConfig, CONFIGS, GPU_CONFIGS, CPU_CONFIGS = (
    problems.BenchConfig,
    problems.CONFIGS,
    problems.GPU_CONFIGS,
    problems.CPU_CONFIGS,
)
FWD, TRAIN, MEASUREMENTS, DTYPES = problems.FWD, problems.TRAIN, problems.MEASUREMENTS, problems.DTYPES
PADDED_CONFIGS, QUICK_SIZES = problems.PADDED_CONFIGS, problems.QUICK_SIZES
build_flax, build_jax_exp, build_torch, gemm = peers.build_flax, peers.build_jax_exp, peers.build_torch, peers.gemm
jax_exp_unavailable, lstm_only, module_missing = peers.jax_exp_unavailable, peers.lstm_only, peers.module_missing
no_lengths, set_torch_precision = peers.no_lengths, peers.set_torch_precision
Runner, inputs, jax_runner, on_gpu = runner.Runner, runner.inputs, runner.jax_runner, runner.on_gpu
short, sum_squares = runner.short, runner.sum_squares

TORCH, FLAX = "torch", "flax"
PACKAGE = "jax_cudnn_rnn"


# ------------------------------------------------------------------------------------------------ this library


def _build_jcr(bc: BenchConfig, dtype: str, implementation: str | None, algorithm: str | None = None) -> Runner:
    """``rnn(implementation=implementation, algorithm=algorithm)`` on ``bc``. This library's contenders use its public
    names and the registry's documented questions (jax_cudnn_rnn/backends/registry.py: what the default runs, what a
    run takes outside XLA's buffers) with its record of a call (jax_cudnn_rnn/backends/call.py), nothing of a backend's
    own."""
    import jax
    import jax.numpy as jnp

    import jax_cudnn_rnn as jcr
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.backends.call import Call, CudnnOptions

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
        lengths = lengths[0] if lengths else None
        return jcr.rnn(params, x, h0, c0, cfg, seq_lengths=lengths, implementation=implementation, algorithm=algorithm)[
            0
        ]

    def decode_step(params: Any, x_t: Any, states: tuple[Any, Any]) -> tuple[tuple[Any, Any], Any]:
        y, h, c = jcr.rnn(params, x_t[None], *states, cfg, implementation=implementation, algorithm=algorithm)
        return (h, c), y[0]

    one_call = dataclasses.replace(bc, time=1) if bc.decode else bc  # what each rnn() call runs
    # rnn(precision=None) follows JAX's setting, which the bench sets to "float32" or "tensorfloat32" (--precision).
    precision = jax.config.jax_default_matmul_precision or "float32"
    options = CudnnOptions() if algorithm is None else CudnnOptions(algorithm=algorithm)
    call = Call(cfg, one_call.time, bc.batch, seq_lengths=bc.padded, precision=precision, cudnn=options)
    picked = implementation or registry.implementation_for(x, call)
    # The memory each measurement's kernels take outside XLA's buffers (cuDNN's workspace, oneDNN's scratch pool).
    extra = {
        measurement: registry.scratch_bytes(picked, call, side)
        for measurement, side in ((FWD, registry.FORWARD), (TRAIN, registry.TRAINING))
    }
    runner = jax_runner(
        forward, lambda p, x, *n: sum_squares(forward(p, x, *n)), (params, x, *lengths), bc.inference_only, extra
    )
    if implementation is None:  # what the registry chose, on each side ("onednn+xla": see registry.py's names)
        runner.notes["implementation"] = picked
    if algorithm is not None:
        runner.notes["algorithm"] = algorithm
    return runner


def _build_jcr_flax(bc: BenchConfig, dtype: str) -> Runner:
    """This library's linen module (jax_cudnn_rnn/flax.py ``LSTM``, ``GRU``, ``RNN`` for the other modes) with its
    default arguments but the network's shape and ``dtype``: what a Flax user's model runs, Flax's parameterization
    on cuDNN's double-bias weight space, batch-major (its transposes included), ``implementation=None`` inside. Its
    parameters are the module's own initialisation, made in float32 and cast (Flax's orthogonal initializer has no
    bfloat16 QR on the CPU). A decoding problem calls the module once per step in ``lax.scan``, the carry passed on
    (``initial_carry``, ``return_carry``); a padded one passes ``seq_lengths``."""
    import functools

    import jax
    import jax.numpy as jnp

    from jax_cudnn_rnn import flax as jcr_flax
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.backends.call import Call

    kind = {"lstm": jcr_flax.LSTM, "gru": jcr_flax.GRU}.get(bc.mode) or functools.partial(jcr_flax.RNN, mode=bc.mode)

    def module(param_dtype: Any) -> Any:
        return kind(bc.hidden, num_layers=bc.num_layers, direction=bc.direction, dtype=dtype, param_dtype=param_dtype)

    x32 = jnp.asarray(np.swapaxes(inputs(bc), 0, 1))  # batch-major [B, T, I], as the module takes it by default
    variables = jax.tree.map(lambda v: v.astype(dtype), module(jnp.float32).init(jax.random.key(0), x32[:, :1]))
    model, x = module(dtype), x32.astype(dtype)
    lengths = () if bc.lengths() is None else (jnp.asarray(bc.lengths()),)

    def forward(variables: Any, x: Any, *lengths: Any) -> Any:
        if not bc.decode:
            return model.apply(variables, x, *lengths)
        carry = model.initialize_carry(None, x[:, 0].shape)

        def step(carry: Any, x_t: Any) -> tuple[Any, Any]:
            carry, y = model.apply(variables, x_t[:, None], initial_carry=carry, return_carry=True)
            return carry, y[:, 0]

        return jnp.swapaxes(jax.lax.scan(step, carry, jnp.swapaxes(x, 0, 1))[1], 0, 1)  # [B, T, H] as the module

    runner = jax_runner(
        forward, lambda v, x, *n: sum_squares(forward(v, x, *n)), (variables, x, *lengths), bc.inference_only
    )
    precision = jax.config.jax_default_matmul_precision or "float32"
    config = model.rnn_config(bc.input_size)
    call = Call(config, 1 if bc.decode else bc.time, bc.batch, seq_lengths=bc.padded, precision=precision)
    runner.notes["implementation"] = registry.implementation_for(x, call)
    runner.notes["bias_mode"] = config.bias_mode
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


def _ours(name: str, implementation: str | None, by_default: bool = True, algorithm: str | None = None) -> Contender:
    """``rnn(implementation=implementation, algorithm=algorithm)``, skipped where the registry says it cannot run (the
    default always runs; an algorithm cuDNN cannot run for the problem is an error, which ``jax-cudnn-rnn tune``
    avoids by asking only for the algorithms that may run it)."""
    checks = () if implementation is None else (implementation_unavailable(implementation),)
    checks += () if implementation is None else (implementation_unsupported(implementation),)

    def build(bc: BenchConfig, dtype: str) -> Runner:
        return _build_jcr(bc, dtype, implementation, algorithm)

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
        # This library's linen module with its default arguments (issue 62: a Flax user's model on the default).
        Contender("jcr-flax", _build_jcr_flax, module_missing("flax"), ours=True, imports_package=True),
        Contender(FLAX, build_flax, module_missing("flax"), no_lengths),
        Contender("jax-exp-rnn", build_jax_exp, jax_exp_unavailable, lstm_only),
        Contender(TORCH, build_torch, module_missing("torch"), framework="torch"),
    )
}


def contender(name: str) -> Contender:
    """The contender ``name``: one of ``CONTENDERS``, "jcr-<implementation>" for any implementation name the registry
    takes (``jax-cudnn-rnn tune`` times every single name it lists, variants included), or
    "jcr-<implementation>@<algorithm>" for one with ``rnn(algorithm=...)`` ("jcr-cudnn@persist_static": what the GPU's
    tune times)."""
    if name in CONTENDERS:
        return CONTENDERS[name]
    if name.startswith("jcr-"):
        implementation, _, algorithm = name.removeprefix("jcr-").partition("@")
        return _ours(name, implementation, by_default=False, algorithm=algorithm or None)
    raise KeyError(
        f"no contender {name!r}; known: {', '.join(CONTENDERS)}, jcr-<implementation> or "
        "jcr-<implementation>@<algorithm>"
    )
