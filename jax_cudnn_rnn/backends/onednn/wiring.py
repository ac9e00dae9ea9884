"""implementation="onednn": oneDNN's fused RNN primitives on the CPU, over the same opaque buffer as cuDNN.

The FFI targets (jax_cudnn_rnn/backends/onednn/kernels.py) run the network layer by layer, each layer one oneDNN
primitive over both directions: ``lstm_forward``/``lstm_backward`` (with projection), ``lbr_gru`` (cuDNN's GRU, whose
new gate keeps its recurrent bias inside the reset product) and ``vanilla_rnn`` with tanh or relu, in float32 and
bfloat16.

``_rnn`` is the fused kit's custom_vjp (jax_cudnn_rnn/backends/fused/vjp.py), as cuDNN's is: undifferentiated it runs
oneDNN's inference forward; under ``jax.grad`` the training forward, which also returns a reserve space (oneDNN's
workspace per layer and the outputs of all but the last layer), and the backward pass runs oneDNN's backward over it.
Dropout runs layer by layer through the fused kit (jax_cudnn_rnn/backends/fused/backend.py).

What oneDNN lacks stays on the xla implementation (``unsupported_reason``): ``seq_lengths``, resets, ``cell_clip``,
float16 and float64, and bfloat16 with projection (wrong in oneDNN 3.2). Every bias mode runs (an absent bias is zero),
and skip input runs with identity input matrices.
"""

from __future__ import annotations

import functools
from typing import Any

from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.fused import backend, kernel, vjp
from jax_cudnn_rnn.backends.fused.batching import sequential_vmap
from jax_cudnn_rnn.backends.onednn import extension, kernels
from jax_cudnn_rnn.config import RNNConfig

DTYPES = ("float32", "bfloat16")


def unsupported_reason(config: RNNConfig, seq_lengths: Any = None) -> str | None:
    """Why oneDNN cannot run this call (None if it can): what its RNN primitives lack."""
    if config.dtype.name not in DTYPES:
        return f"oneDNN's RNN runs {' and '.join(DTYPES)}, not {config.dtype.name}"
    if seq_lengths is not None:
        return "oneDNN's RNN primitives have no per-sequence lengths (seq_lengths)"
    if config.cell_clip is not None:
        return "oneDNN's LSTM has no cell clipping (cell_clip)"
    if config.proj_size and config.dtype.name == "bfloat16":
        # oneDNN 3.2's bf16 projection LSTM: the forward's outputs are wrong (0.4-0.7 off on a unit-scale test) and
        # its backward fails to execute.
        return "oneDNN 3.2's bfloat16 LSTM with projection gives wrong results"
    return None


# Where oneDNN beats the xla implementation on the CPU, which rnn(implementation=None) follows there
# (``choose_on_cpu``). Measured 2026-11-23 on this project's 2-core Intel Xeon (family 6 model 207, AVX-512
# with AVX512-BF16, no AMX exposed to the VM), quiet, jax 0.10.2, oneDNN 3.2, one layer unless said, the two
# implementations alternating in one process, best of two medians of 9: oneDNN time / xla time, forward and
# forward+backward, against the step's multiply-adds B * G * H * (I + H) (G gates):
#   float32   lstm H64 B8 (0.26M) 16.9 / 10.1    H256 B1 (0.52M) 4.9 / 6.3    H256 B32 (16.8M) 1.17 / 1.13
#             lstm H512 B64 (134M) 0.97 / 0.86   2 layers H1024 B64 (537M) 0.98 / 0.90
#             gru H64 B8 8.7 / 15.1   H512 B64 (101M) 1.03 / 0.97   H1024 B64 (403M) 1.23 / 0.90
#             rnn_tanh H512 B64 (33.6M) 1.01 / 1.31
#   bfloat16  every one of those 1.2-25 (both modes): oneDNN 3.2's bf16 RNN never wins here.
# oneDNN pays a floor of milliseconds per call (small shapes), and wins only where each step's GEMMs are large: the
# float32 LSTM from about 1e8 multiply-adds per step, both modes. The float32 GRU's gain in training comes with a
# slower forward (1.23 at H1024), so it stays on xla, as do the vanilla RNNs and bfloat16.
ONEDNN_MIN_STEP_MACS = 10**8


def faster_than_xla(config: RNNConfig, batch: int | None) -> bool:
    """Whether oneDNN is the faster implementation on the CPU for ``config`` at ``batch`` sequences (False where the
    batch is not known): a float32 LSTM whose first layer's step costs at least ``ONEDNN_MIN_STEP_MACS``."""
    if config.mode != "lstm" or config.dtype.name != "float32" or batch is None:
        return False
    step_macs = batch * config.num_gates * config.num_units * (config.input_size + config.hidden_size)
    return step_macs >= ONEDNN_MIN_STEP_MACS


def _forward(params, x, h0, c0, seq_lengths, config: RNNConfig, training: bool):
    """(y, h_n, c_n or None, reserve or None), with the fused kit's vmap rule (jax_cudnn_rnn/backends/fused/kernel.py).
    ``seq_lengths`` is always None here (``unsupported_reason``)."""
    del seq_lengths
    lstm = config.has_cell_state
    operands, batch_axes = kernel.forward_operands(x, h0, params, c0, None)
    call = functools.partial(kernels.forward, config=config, training=training)
    return kernel.forward_outputs(kernel.vmapped(call, batch_axes, lstm, training)(*operands), lstm, training)


def _backward(config: RNNConfig, res: vjp.Residuals, dy, dh_n, dc_n):
    """(dparams, dx, dh0, dc0 or None), once per mapped element under ``jax.vmap``."""
    lstm = config.has_cell_state
    call = functools.partial(kernels.backward, config=config)
    dparams, dx, dh0, *dc0 = sequential_vmap(call)(
        res.params, res.x, res.h0, res.y, res.h_n, dy, dh_n, res.reserve, *([res.c0, res.c_n, dc_n] if lstm else []))
    return dparams, dx, dh0, (dc0[0] if lstm else None)


# oneDNN's kernels are specialised on the config alone.
_rnn = vjp.fused_rnn(_forward, _backward)


def _kernel(params, x, h0, c0, config: RNNConfig, seq_lengths, dropout_masks):
    """oneDNN as the fused kit's kernel (lengths and masks never reach it)."""
    del seq_lengths, dropout_masks
    return _rnn(params, x, h0, c0, None, config)


def rnn(call: Call, inputs: Inputs) -> tuple[Any, Any, Any]:
    """The registry's ``run``: ``call`` on oneDNN (dropout layer by layer)."""
    return backend.run(_kernel, call, inputs)


def unavailable() -> str | None:
    """What implementation="onednn" needs that this process lacks, or None."""
    if extension.extension_loaded():
        return None
    return f"the oneDNN extension, which is not loaded: {extension.extension_error()}"


def unsupported(call: Call) -> str | None:
    """What oneDNN needs that ``call`` lacks (the registry's question), or None."""
    if call.resets:
        return "no resets (oneDNN's RNN primitives cannot zero the state mid-sequence)"
    return None if call.config is None else unsupported_reason(call.config, True if call.seq_lengths else None)


def choose_on_cpu(call: Call) -> str:
    """The CPU's first candidate: "onednn" where it is measured faster than "xla" for the call's network and batch
    (``faster_than_xla``), else "xla"."""
    return "onednn" if call.config is not None and faster_than_xla(call.config, call.batch) else "xla"


registry.register(registry.Backend("onednn", ("cpu",), lambda: unavailable(), lambda call: unsupported(call), rnn),
                  candidate_for=("cpu",), before="xla", chooser=choose_on_cpu)
