"""The peers ``jax-cudnn-rnn bench`` times this library against, each set up for one benchmark problem and dtype as a
``Runner`` (jax_cudnn_rnn/tools/bench/runner.py): Flax's ``nn.RNN`` over its own cells, ``jax.experimental.rnn`` and
PyTorch's ``nn.LSTM``/``nn.GRU``; and a square matrix product in each framework, the roofline's ceiling (``gemm``).

Nothing here imports JAX, PyTorch or this package at module level: a PyTorch contender's worker process
(jax_cudnn_rnn/tools/bench/measure.py) loads this file by path without them. Each builder imports what it needs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np

if __package__:
    from jax_cudnn_rnn.tools.bench.problems import BenchConfig
    from jax_cudnn_rnn.tools.bench.runner import Runner, inputs, jax_runner, on_gpu, short, sum_squares
else:  # loaded by path in a worker (measure.py): problems.py and runner.py beside it
    from problems import BenchConfig  # type: ignore[no-redef]
    from runner import Runner, inputs, jax_runner, on_gpu, short, sum_squares  # type: ignore[no-redef]


def module_missing(module: str) -> Callable[[], str | None]:
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


def build_flax(bc: BenchConfig, dtype: str) -> Runner:
    import jax
    import jax.numpy as jnp

    model = _flax_model(bc, dtype)
    x32 = jnp.asarray(np.swapaxes(inputs(bc), 0, 1))
    # Initialised in float32 and cast: the orthogonal recurrent initialiser has no bfloat16 QR on the CPU.
    variables = _flax_model(bc, "float32").init(jax.random.key(0), x32)
    variables = jax.tree.map(lambda v: v.astype(dtype), variables)
    x = x32.astype(dtype)
    return jax_runner(model.apply, lambda v, x: sum_squares(model.apply(v, x)), (variables, x), bc.inference_only)


def build_jax_exp(bc: BenchConfig, dtype: str) -> Runner:
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

    return jax_runner(forward, lambda w, x: sum_squares(forward(w, x)), (weights, x), bc.inference_only)


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


def decoding(bc: BenchConfig) -> str | None:
    """Why a JAX peer sits out a decoding problem (PyTorch's loop of module calls is the peer there), or None."""
    return "decoding: the peer is PyTorch's loop of one-step calls" if bc.decode else None


def lstm_only(bc: BenchConfig, dtype: str) -> str | None:
    if bc.mode != "lstm":
        return f"jax.experimental.rnn supports LSTM only, not {bc.mode.upper()}"
    return decoding(bc)


def no_lengths(bc: BenchConfig, dtype: str) -> str | None:
    return "a padded batch: the Flax stack here takes no lengths" if bc.padded else decoding(bc)


def build_torch(bc: BenchConfig, dtype: str) -> Runner:
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
