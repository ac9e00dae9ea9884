"""implementation="onednn": oneDNN's fused RNN primitives on the CPU, over the same opaque buffer as cuDNN.

The FFI targets (jax_cudnn_rnn/backends/onednn/kernels.py) run the network layer by layer, each layer one oneDNN
primitive over both directions: ``lstm_forward``/``lstm_backward`` (with projection), ``lbr_gru`` (cuDNN's GRU, whose
new gate keeps its recurrent bias inside the reset product) and ``vanilla_rnn`` with tanh or relu, in float32 and
bfloat16.

``_rnn`` is the fused kit's custom_vjp (jax_cudnn_rnn/backends/fused/vjp.py), as cuDNN's is: undifferentiated it runs
oneDNN's inference forward; under ``jax.grad`` the training forward, which also returns a reserve space (oneDNN's
workspace per layer and the outputs of all but the last layer), and the backward pass runs oneDNN's backward over it.
``_rnn_plain`` ("onednn:plain") is the same with the backward on the weights in the plain ldgoi layout (another oneDNN
kernel, faster at some shapes: onednn/plan.cc). "onednn:gemm" is the network as GEMMs on oneDNN's matmul primitive,
the gates in XLA (jax_cudnn_rnn/backends/onednn/gemm.py), forward and backward. Dropout runs layer by layer through the
fused kit (jax_cudnn_rnn/backends/fused/compose.py). The hybrids (``_hybrid``) run one implementation where nothing
differentiates the call and the other under jax.grad: "xla+onednn" the xla forward and oneDNN's training step,
"onednn+xla" oneDNN's inference forward and the xla implementation.

``run_default`` is what ``rnn(implementation=None)`` runs when the registry chose oneDNN, which it does where the table
measured per mode, dtype and size for this CPU's instruction set (jax_cudnn_rnn/backends/onednn/cpu_table.py,
``variant_for``) puts oneDNN on either side.

oneDNN's primitives take no per-sequence lengths: calls with ``seq_lengths`` run every row for all T steps, arranged by
the fused kit (jax_cudnn_rnn/backends/fused/lengths.py) so that the results are exactly those of lengths. What oneDNN
lacks stays on the xla implementation (``SUPPORTS``): resets, ``cell_clip``, float16 and float64, bfloat16 with
projection (wrong in oneDNN 3.2), and what oneDNN has no kernels for on this CPU (bfloat16 below AVX-512:
``_runs_here``). Every bias mode runs (an absent bias is zero), and skip input runs with identity input matrices.
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from jax_cudnn_rnn.backends import registry, xla
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.custom_vjp import custom_vjp
from jax_cudnn_rnn.backends.fused import compose, convention, vjp
from jax_cudnn_rnn.backends.fused.batching import batch_first, sequential_vmap
from jax_cudnn_rnn.backends.onednn import extension, gemm, kernels
from jax_cudnn_rnn.backends.onednn.cpu_table import cpu_choice
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


def _forward(params, x, h0, c0, seq_lengths, config: RNNConfig, training: bool, plain_backward_weights: bool):
    """(y, h_n, c_n or None, reserve or None), with the fused kit's vmap rule
    (jax_cudnn_rnn/backends/fused/convention.py). ``seq_lengths`` is always None here (``_compose``)."""
    del seq_lengths
    lstm = config.has_cell_state
    operands, batch_axes = convention.forward_operands(x, h0, params, c0, None)
    call = functools.partial(
        kernels.forward, config=config, training=training, plain_backward_weights=plain_backward_weights
    )
    return convention.forward_outputs(convention.vmapped(call, batch_axes, lstm, training)(*operands), lstm, training)


def _backward(config: RNNConfig, res: vjp.Residuals, dy, dh_n, dc_n, plain_backward_weights: bool):
    """(dparams, dx, dh0, dc0 or None), once per mapped element under ``jax.vmap``."""
    lstm = config.has_cell_state
    call = functools.partial(kernels.backward, config=config, plain_backward_weights=plain_backward_weights)
    dparams, dx, dh0, *dc0 = sequential_vmap(call)(
        res.params, res.x, res.h0, res.y, res.h_n, dy, dh_n, res.reserve, *([res.c0, res.c_n, dc_n] if lstm else [])
    )
    return dparams, dx, dh0, (dc0[0] if lstm else None)


def _fused(plain_backward_weights: bool):
    """oneDNN's kernels as the fused kit's custom_vjp, specialised on the config alone."""
    return vjp.fused_rnn(
        functools.partial(_forward, plain_backward_weights=plain_backward_weights),
        functools.partial(_backward, plain_backward_weights=plain_backward_weights),
    )


_rnn, _rnn_plain = _fused(False), _fused(True)


def _onednn(params, x, h0, c0, config: RNNConfig):
    """oneDNN: its inference forward undifferentiated, its training forward and backward under jax.grad."""
    return _rnn(params, x, h0, c0, None, config)


def _onednn_plain(params, x, h0, c0, config: RNNConfig):
    """oneDNN as ``_onednn``, its backward on the plain ldgoi weights: the same function, another backward kernel."""
    return _rnn_plain(params, x, h0, c0, None, config)


def _xla(params, x, h0, c0, config: RNNConfig):
    """The xla implementation, strict float32 as oneDNN's."""
    return xla.rnn_xla(params, x, h0, c0, config)


# What each side of a (undifferentiated, under jax.grad) pair names; "onednn:gemm" is oneDNN's matmul primitive
# under the xla implementation's decomposition (jax_cudnn_rnn/backends/onednn/gemm.py), forward and backward.
_SIDES = {"onednn": _onednn, "onednn:plain": _onednn_plain, "onednn:gemm": gemm.rnn, "xla": _xla}


def _hybrid(undifferentiated, differentiated):
    """``(params, x, h0, c0, config) -> (y, h_n, c_n)``: ``undifferentiated`` where nothing differentiates the call,
    ``differentiated``'s values and gradients under jax.grad (a custom_vjp over its own vjp). Both sides' outputs go
    through ``batch_first`` (jax_cudnn_rnn/backends/fused/batching.py: why)."""

    @functools.partial(custom_vjp, nondiff_argnums=(4,))
    def run(params, x, h0, c0, config: RNNConfig):
        return batch_first(undifferentiated(params, x, h0, c0, config))

    def run_fwd(params, x, h0, c0, config):
        outputs, pullback = jax.vjp(lambda *args: differentiated(*args, config), params, x, h0, c0)
        return batch_first(outputs), pullback

    run.defvjp(run_fwd, lambda config, pullback, cotangents: pullback(cotangents))
    return run


def _as_kernel(run):
    """``run`` as the fused kit's kernel (jax_cudnn_rnn/backends/fused/convention.py ``Kernel``), which the kit calls
    without lengths (``_compose``)."""

    def kernel_(params, x, h0, c0, config: RNNConfig, seq_lengths):
        del seq_lengths  # always None: the fused kit runs lengths around the kernel
        return run(params, x, h0, c0, config)

    return kernel_


def _compose(kernel, call: Call, inputs: Inputs) -> tuple[Any, Any, Any]:
    """``call`` on ``kernel`` with what the fused kit adds: lengths (the kernel takes none) and dropout."""
    return compose.run(kernel, call, inputs, takes_lengths=False)


# What each side runs where nothing differentiates it, where that is another side's: "onednn:plain" differs from
# "onednn" only in its backward.
_UNDIFFERENTIATED = {"onednn:plain": "onednn"}


def _one_implementation(pair: tuple[str, str]) -> bool:
    """Whether both sides of an (undifferentiated, under jax.grad) pair run one implementation: the same name, or
    oneDNN and a variant whose inference forward is oneDNN's own ("onednn:plain")."""
    undifferentiated, differentiated = pair
    return _UNDIFFERENTIATED.get(differentiated, differentiated) == undifferentiated


def variant_name(pair: tuple[str, str]) -> str:
    """The name of an (undifferentiated, under jax.grad) pair: its differentiated side's where both run one
    implementation ("onednn", "onednn:plain", "xla"), else the hybrid's ("onednn+xla", "xla+onednn", ...)."""
    return pair[1] if _one_implementation(pair) else "+".join(pair)


@functools.cache
def _kernel(pair: tuple[str, str]):
    """The fused kit's kernel for ``pair``: that implementation's own where both sides run one, else the hybrid of
    the two sides."""
    undifferentiated, differentiated = pair
    if _one_implementation(pair):
        return _as_kernel(_SIDES[differentiated])
    return _as_kernel(_hybrid(_SIDES[undifferentiated], _SIDES[differentiated]))


def rnn(call: Call, inputs: Inputs) -> tuple[Any, Any, Any]:
    """The registry's ``run``: ``call`` on oneDNN (lengths and dropout by the fused kit)."""
    return _compose(_kernel(("onednn", "onednn")), call, inputs)


def unavailable() -> str | None:
    """What implementation="onednn" needs that this process lacks, or None."""
    if extension.extension_loaded():
        return None
    return f"the oneDNN extension, which is not loaded: {extension.extension_error()}"


def variant_for(call: Call) -> tuple[str, str]:
    """(what runs undifferentiated, what runs under jax.grad) when ``rnn(implementation=None)`` runs ``call`` on the
    CPU: the table's choice (``cpu_choice``); ("xla", "xla") without a config."""
    return ("xla", "xla") if call.config is None else cpu_choice(call.config, call.batch)


# The pairs that run when asked for by name (the bench and the tests measure them alone), by name.
_VARIANTS = {
    variant_name(pair): pair
    for pair in (
        ("onednn", "onednn"),
        ("onednn", "onednn:plain"),
        ("onednn:gemm", "onednn:gemm"),
        ("xla", "onednn"),
        ("onednn", "xla"),
    )
}


def runs(implementation: str | None, call: Call) -> tuple[str, str]:
    """(what runs undifferentiated, what runs under jax.grad) for ``rnn(implementation=...)`` on the CPU: the
    registry's choice for None (oneDNN's ``variant_for`` where it chose oneDNN); "xla" stands for every other
    implementation (the bench sizes oneDNN's scratch memory by it)."""
    if implementation is None:
        implementation = registry.implementation_for("cpu", call)
        if implementation == "onednn":
            return variant_for(call)
    return _VARIANTS.get(implementation, ("xla", "xla"))


def run_default(call: Call, inputs: Inputs) -> tuple[Any, Any, Any]:
    """What ``rnn(implementation=None)`` runs when it chose oneDNN: the pair the table gives (its forward and its
    training step measured separately)."""
    return _compose(_kernel(variant_for(call)), call, inputs)


registry.register(
    registry.Backend(
        "onednn",
        ("cpu",),
        priority=20,
        supports=SUPPORTS,
        unavailable=lambda: unavailable(),
        run=rnn,
        prefers=lambda call: variant_for(call) != ("xla", "xla"),
        run_default=run_default,
    )
)
# The other pairs by name, for tests and the bench that measure them alone; undocumented (the default picks them).
for _name, _variant in _VARIANTS.items():
    if _name != "onednn":
        registry.register(
            registry.Backend(
                _name,
                ("cpu",),
                priority=None,
                supports=SUPPORTS,
                unavailable=lambda: unavailable(),
                run=functools.partial(_compose, _kernel(_variant)),
                public=False,
            )
        )
