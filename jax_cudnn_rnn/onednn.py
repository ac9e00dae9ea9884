"""implementation="onednn": oneDNN's fused RNN primitives on the CPU, over the same opaque buffer as cuDNN.

The FFI targets of ``jax_cudnn_rnn._onednn_rnn`` (C++ in ``onednn/``) run the network layer by layer, each layer
one oneDNN primitive over both directions: ``lstm_forward``/``lstm_backward`` (with projection), ``lbr_gru`` (cuDNN's
GRU, whose new gate keeps its recurrent bias inside the reset product) and ``vanilla_rnn`` with tanh or relu, in
float32 and bfloat16. The weights are read from the opaque buffer's bytes at every call (gate blocks reordered into
the format the primitive chose), so the same ``params`` run here, on cuDNN and on the xla implementation.

``rnn_onednn`` is a ``jax.custom_vjp`` (``fused.fused_rnn``, shared with the cuDNN implementation): undifferentiated
it runs oneDNN's inference forward; under ``jax.grad`` the training forward, which also returns a reserve space
(oneDNN's workspace per layer and the outputs of all but the last layer), and the backward pass runs oneDNN's
backward over it.

What oneDNN lacks stays on the xla implementation (``unsupported_reason``): ``seq_lengths``, ``cell_clip``, float16
and float64, and bfloat16 with projection (wrong in oneDNN 3.2). Every bias mode runs (an absent bias is zero), and
skip input runs with identity input matrices.

The extension is optional (the ``onednn`` extra: the ``onednn-cpu-gomp`` wheel at run time, ``onednn-devel-cpu-gomp``
to build): without it ``extension_loaded()`` is False, ``extension_error()`` says why, and nothing else changes.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import os
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn import _native, batching, fused, layout, stacking
from jax_cudnn_rnn.config import RNNConfig

FORWARD_TARGET = "jax_cudnn_rnn_onednn_forward"
BACKWARD_TARGET = "jax_cudnn_rnn_onednn_backward"
DTYPES = ("float32", "bfloat16")
RUNTIME_DISTRIBUTION = "onednn-cpu-gomp"
BUILD_HINT = ("install the package with its `onednn` extra (`pip install \".[onednn]\"`: the isolated build brings "
              "oneDNN's headers from the onednn-devel-cpu-gomp wheel on Linux x86_64 with a C++17 compiler), or build "
              "it with `pip install --no-build-isolation -e .` in an environment with jax, pybind11 and "
              "onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0; JAX_CUDNN_RNN_ONEDNN=ON makes a missing "
              "oneDNN a build error instead of a skip")

EXTENSION = _native.NativeExtension(
    "jax_cudnn_rnn._onednn_rnn", "oneDNN extension", "cpu", BUILD_HINT, "JAX_CUDNN_RNN_ONEDNN",
    library=("libdnnl", "the extension needs oneDNN 3.2's libdnnl.so.3: `pip install \"jax-cudnn-rnn[onednn]\"` or "
                        "`pip install onednn-cpu-gomp==2023.2.0` brings it"))
_wait_policy = "not set: libgomp not loaded by this package"


def _libgomp_loaded() -> bool:
    with open("/proc/self/maps") as maps:
        return any("libgomp" in line for line in maps)


def _choose_wait_policy() -> None:
    """Makes GNU OpenMP's idle threads sleep instead of spin (OMP_WAIT_POLICY=PASSIVE), unless the user chose a
    policy or libgomp is already loaded (then its setting stands: libgomp reads it once, when it loads).

    Why: oneDNN's threads are an OpenMP team and XLA's are not. A spinning OpenMP worker keeps a core busy for
    milliseconds after each parallel region (300,000 spins by default), while XLA's threads run the ops between the
    RNN calls; on a machine with few cores, or one shared with other processes, the two fight for the cores. Measured on
    this project's 2-core machine under load (LSTM T100 B32 H256 float32, forward): 222-302 ms of CPU per call spinning,
    27-31 ms passive, and the wall time 3x lower passive. The setting is process-wide: it also applies to PyTorch when
    both are loaded (they share libgomp). Set OMP_WAIT_POLICY=ACTIVE before importing to keep spinning."""
    global _wait_policy
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        _wait_policy = "set by the user: " + ", ".join(
            f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ)
    elif _libgomp_loaded():
        _wait_policy = "libgomp's default (spin): it was loaded before jax_cudnn_rnn, e.g. by PyTorch"
    else:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        _wait_policy = "PASSIVE, set by jax_cudnn_rnn"


def openmp_wait_policy() -> str:
    """How oneDNN's OpenMP threads wait between parallel regions in this process, and who decided it."""
    return _wait_policy


def _preload_dnnl() -> None:
    """Loads the onednn-cpu-gomp wheel's libdnnl.so.3 globally, wherever pip put it (the module's RPATH covers a
    virtual environment's lib/; this covers --user and other prefixes), and never another oneDNN of that name."""
    try:
        files = importlib.metadata.distribution(RUNTIME_DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        return
    for file in files:
        if file.name == "libdnnl.so.3":
            ctypes.CDLL(str(file.locate()), mode=ctypes.RTLD_GLOBAL)
            return


def _before_import() -> None:
    _choose_wait_policy()
    _preload_dnnl()


def extension_loaded() -> bool:
    """True when the oneDNN extension was imported and its FFI targets are registered for platform "cpu"."""
    return EXTENSION.loaded()


def extension_error() -> str | None:
    """Why the oneDNN extension is not loaded, or None when it is."""
    return EXTENSION.error()


def module() -> ModuleType:
    """The loaded native module; raises RuntimeError saying why it is not loaded and how to get it."""
    return EXTENSION.module()


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
# (jax_cudnn_rnn/backends.py). Measured 2026-11-23 on this project's 2-core Intel Xeon (family 6 model 207, AVX-512
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


def unavailable() -> str | None:
    """What implementation="onednn" needs that this process lacks (jax_cudnn_rnn/backends.py), or None."""
    return None if EXTENSION.loaded() else f"the oneDNN extension, which is not loaded: {EXTENSION.error()}"


def _slot_offsets(config: RNNConfig) -> np.ndarray:
    """Per pseudo-layer, where w_input, w_recurrent, w_projection, b_input, b_recurrent start in the buffer (elements;
    -1 where absent). The handlers copy whole gate blocks from there, so each group's gates must be consecutive."""
    offsets = []
    for layer in range(config.num_layers):
        for direction in range(config.num_directions):
            groups = layout.layer_slots(config, layer, direction)
            for group in ("w_input", "w_recurrent", "w_projection", "b_input", "b_recurrent"):
                slots = groups[group]
                if any(s.offset != slots[0].offset + i * s.size for i, s in enumerate(slots)):
                    raise AssertionError(f"layout: the gates of {group} are not consecutive")
                offsets.append(slots[0].offset if slots else -1)
    return np.asarray(offsets, np.int64)


@functools.lru_cache(maxsize=256)
def _attributes(config: RNNConfig) -> dict[str, Any]:
    """The handlers' attributes but ``training`` (onednn/rnn_kernels.cc CallAttrs)."""
    return dict(**fused.config_attributes(config), slot_offsets=_slot_offsets(config))


@functools.lru_cache(maxsize=256)
def buffer_sizes(config: RNNConfig, max_time: int, batch: int, training: bool) -> dict[str, int]:
    """Bytes of the reserve space and of the forward's and backward's scratch for one call (asked of the extension,
    which builds and caches the call's primitives: the first call of a shape takes milliseconds)."""
    return dict(module().buffer_sizes(**fused.config_attributes(config), dtype=config.dtype.name, max_time=max_time,
                                      batch=batch, training=training))


def _forward_call(x, h0, params, *c0, config: RNNConfig, training: bool):
    """One oneDNN forward: (y, h_n, [c_n: lstm], [reserve: training]); the scratch output is dropped here."""
    num_steps, batch, _ = x.shape
    lstm = config.has_cell_state
    sizes = buffer_sizes(config, num_steps, batch, training)
    out_types = [jax.ShapeDtypeStruct((num_steps, batch, config.output_size), x.dtype),
                 jax.ShapeDtypeStruct(h0.shape, x.dtype),
                 jax.ShapeDtypeStruct((sizes["forward_scratch"],), jnp.uint8)]
    if lstm:
        out_types.append(jax.ShapeDtypeStruct(c0[0].shape, x.dtype))
    if training:
        out_types.append(jax.ShapeDtypeStruct((sizes["reserve_space"],), jnp.uint8))
    y, h_n, _, *rest = jax.ffi.ffi_call(FORWARD_TARGET, out_types)(
        x, h0, params, *c0, training=np.bool_(training), **_attributes(config))
    return (y, h_n, *rest)


def _forward(params, x, h0, c0, seq_lengths, config: RNNConfig, training: bool):
    """(y, h_n, c_n or None, reserve or None). Under ``jax.vmap`` the inference forward folds the mapped axis into
    the batch (``batching.fold_vmap``: one call); the training forward runs once per mapped element, since its weight
    gradient must stay per element. ``seq_lengths`` is always None here (``unsupported_reason``)."""
    del seq_lengths
    lstm = config.has_cell_state
    args, in_axes = [x, h0, params] + ([c0] if lstm else []), [1, 1, None] + [1] * lstm
    call = functools.partial(_forward_call, config=config, training=training)
    if training:
        y, h_n, *rest = batching.sequential_vmap(call)(*args)
    else:
        y, h_n, *rest = batching.fold_vmap(call, in_axes, [1, 1] + [1] * lstm)(*args)
    c_n = rest.pop(0) if lstm else None
    reserve = rest.pop(0) if training else None
    return y, h_n, c_n, reserve


def _backward_call(params, x, h0, y, h_n, dy, dh_n, reserve, *lstm_args, config: RNNConfig):
    """oneDNN's backward: (dparams, dx, dh0, [dc0: lstm]); ``lstm_args`` is (c0, c_n, dc_n) for an LSTM."""
    num_steps, batch, _ = x.shape
    sizes = buffer_sizes(config, num_steps, batch, True)
    out_types = [jax.ShapeDtypeStruct(params.shape, params.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype),
                 jax.ShapeDtypeStruct(h0.shape, x.dtype),
                 jax.ShapeDtypeStruct((sizes["backward_scratch"],), jnp.uint8)]
    if lstm_args:
        out_types.append(jax.ShapeDtypeStruct(lstm_args[0].shape, x.dtype))
    dparams, dx, dh0, _, *dc0 = jax.ffi.ffi_call(BACKWARD_TARGET, out_types)(
        params, x, h0, y, h_n, dy, dh_n, reserve, *lstm_args, training=np.bool_(True), **_attributes(config))
    return (dparams, dx, dh0, *dc0)


def _backward(config: RNNConfig, res: fused.Residuals, dy, dh_n, dc_n):
    """(dparams, dx, dh0, dc0 or None), once per mapped element under ``jax.vmap``."""
    lstm = config.has_cell_state
    call = functools.partial(_backward_call, config=config)
    dparams, dx, dh0, *dc0 = batching.sequential_vmap(call)(
        res.params, res.x, res.h0, res.y, res.h_n, dy, dh_n, res.reserve, *([res.c0, res.c_n, dc_n] if lstm else []))
    return dparams, dx, dh0, (dc0[0] if lstm else None)


# The custom_vjp shared with the cuDNN implementation; oneDNN's kernels are specialised on the config alone.
_fused_rnn = fused.fused_rnn(_forward, _backward)


def _rnn(params, x, h0, c0, config: RNNConfig):
    """oneDNN's network as a differentiable call: (y, h_n, c_n or None)."""
    return _fused_rnn(params, x, h0, c0, None, config)


def check_available(config: RNNConfig, seq_lengths: Any = None) -> None:
    """Raises RuntimeError (extension missing) or ValueError (a call oneDNN cannot run) saying why."""
    if not EXTENSION.loaded():
        raise RuntimeError(f"implementation='onednn' needs {unavailable()}")
    reason = unsupported_reason(config, seq_lengths)
    if reason is not None:
        raise ValueError(f"implementation='onednn' cannot run this call: {reason}; use implementation='xla'")


def rnn_onednn(params, x, h0, c0, config: RNNConfig, seq_lengths=None, dropout_key=None):
    """oneDNN's stacked LSTM/GRU/RNN on the CPU. Arguments as ``jax_cudnn_rnn.rnn`` after validation:

    params 1-D ``params_size(config)`` of config.dtype (float32 or bfloat16); x [T, B, input_size]; h0
    [L*D, B, hidden_size]; c0 [L*D, B, num_units] (LSTM) or None; seq_lengths must be None; dropout_key: a PRNG key
    when inter-layer dropout applies (is_training and config.dropout > 0), else None.

    Returns (y [T, B, D*hidden_size], h_n like h0, c_n like c0 or None).
    """
    check_available(config, seq_lengths)
    if dropout_key is not None and config.dropout > 0 and config.num_layers > 1:
        return stacking.rnn_with_dropout(_rnn, params, x, h0, c0, config, dropout_key)
    return _rnn(params, x, h0, c0, config)


EXTENSION.load(_before_import)
