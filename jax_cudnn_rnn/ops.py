"""``rnn``: the public op. Checks every argument, prepares the call once (jax_cudnn_rnn/backends/call.py: its options,
placement and dropout masks) and runs it on the implementation jax_cudnn_rnn/backends/registry.py chooses."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn import dropout, layout
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.cudnn import fallback
from jax_cudnn_rnn.backends.cudnn.algorithm import check_algorithm
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.params import RNNParams
from jax_cudnn_rnn.sharding import placement


def _shape_of(argument: str, value: Any) -> tuple[int, ...]:
    shape = getattr(value, "shape", None)
    if shape is None or not hasattr(value, "dtype"):
        raise TypeError(f"{argument} must be an array, got {type(value).__name__}")
    return tuple(shape)


def _check_array(argument: str, value: Any, expected_shape: tuple[int, ...], meaning: str, dtype: np.dtype) -> None:
    shape = _shape_of(argument, value)
    if shape != expected_shape:
        raise ValueError(f"{argument} has shape {shape}; expected {expected_shape} = {meaning}")
    if np.dtype(value.dtype) != dtype:
        raise TypeError(f"{argument} has dtype {np.dtype(value.dtype).name}; expected {dtype.name} (config.dtype)")


def _is_concrete(value: Any) -> bool:
    return not isinstance(value, jax.core.Tracer)


def _check_not_batch_major(x_shape: tuple[int, ...], h0: Any, config: RNNConfig) -> None:
    """Blames x, not h0, when h0's batch axis matches x's first axis instead of its second: x is then most likely
    batch-major [B, T, I], the layout of the Flax modules and of ``flax.linen.RNN``."""
    h0_shape = getattr(h0, "shape", None)
    num_steps, batch, _ = x_shape
    if h0_shape is None or len(h0_shape) != 3 or h0_shape[1] == batch or h0_shape[1] != num_steps:
        return
    raise ValueError(f"x has shape {x_shape} and h0 {tuple(h0_shape)}: h0's batch is {h0_shape[1]}, x's first axis. "
                     f"rnn() takes time-major x [T, B, input_size]; x looks batch-major [B, T, input_size]: pass "
                     f"jnp.swapaxes(x, 0, 1) (the Flax modules take batch-major x unless time_major=True)")


def check_inputs(params: Any, x: Any, h0: Any, c0: Any, config: RNNConfig, seq_lengths: Any = None,
                 resets: Any = None) -> None:
    """Raises ValueError/TypeError naming the first argument whose type, shape, dtype or value is wrong."""
    if isinstance(config, jax.core.Tracer):
        raise TypeError(f"config is a traced value ({type(config).__name__}): jax.jit traced the RNNConfig like an "
                        "array argument, but it must be static. Use jax.jit(jcr.rnn, static_argnames=('config',)) "
                        "and pass config=cfg by keyword, or pass params as an RNNParams (jcr.RNNParams.init(key, cfg) "
                        "or RNNParams(buffer, cfg)), which carries its config as static pytree metadata")
    if not isinstance(config, RNNConfig):
        raise TypeError(f"config must be an RNNConfig, got {type(config).__name__}")
    if config.dtype == np.float64 and not jax.config.jax_enable_x64:
        raise TypeError("config.dtype is float64 but jax_enable_x64 is off; enable it with "
                        "jax.config.update('jax_enable_x64', True)")
    x_shape = _shape_of("x", x)
    if len(x_shape) != 3:
        raise ValueError(f"x has shape {x_shape}; expected rank 3 (max_time, batch, input_size) = "
                         f"(T, B, {config.input_size})")
    num_steps, batch, features = x_shape
    if features != config.input_size:
        raise ValueError(f"x has shape {x_shape}; expected (T, B, {config.input_size}): its last axis must be "
                         f"config.input_size")
    if num_steps == 0 or batch == 0:
        raise ValueError(f"x has shape {x_shape}; max_time and batch must be at least 1")
    if np.dtype(x.dtype) != config.dtype:
        raise TypeError(f"x has dtype {np.dtype(x.dtype).name}; expected {config.dtype.name} (config.dtype)")
    _check_array("params", params, (layout.params_size(config),), "(params_size(config),)", config.dtype)
    state_meaning = ("(num_layers*num_directions, batch, proj_size)" if config.proj_size else
                     "(num_layers*num_directions, batch, num_units)")
    _check_not_batch_major(x_shape, h0, config)
    _check_array("h0", h0, config.state_shape(batch), state_meaning, config.dtype)
    if config.has_cell_state:
        cell_shape, cell_meaning = config.cell_shape(batch), "(num_layers*num_directions, batch, num_units)"
        if c0 is None:
            raise ValueError(f"c0 is None; mode 'lstm' needs an initial cell state of shape {cell_shape} = "
                             f"{cell_meaning}")
        _check_array("c0", c0, cell_shape, cell_meaning, config.dtype)
    elif c0 is not None:
        raise ValueError(f"c0 was given but mode {config.mode!r} has no cell state; pass c0=None")
    if resets is not None:
        shape = _shape_of("resets", resets)
        if shape != (num_steps, batch):
            raise ValueError(f"resets has shape {shape}; expected ({num_steps}, {batch}) = (max_time, batch) like x")
        if np.dtype(resets.dtype) != np.bool_:
            raise TypeError(f"resets has dtype {np.dtype(resets.dtype).name}; expected bool")
    if seq_lengths is None:
        return
    shape = _shape_of("seq_lengths", seq_lengths)
    if shape != (batch,):
        raise ValueError(f"seq_lengths has shape {shape}; expected ({batch},) = (batch,)")
    if np.dtype(seq_lengths.dtype) != np.int32:
        raise TypeError(f"seq_lengths has dtype {np.dtype(seq_lengths.dtype).name}; expected int32")
    if _is_concrete(seq_lengths):
        lengths = np.asarray(seq_lengths)
        bad = np.flatnonzero((lengths < 0) | (lengths > num_steps))
        if bad.size:
            raise ValueError(f"seq_lengths[{bad[0]}] is {lengths[bad[0]]}; every length must be in [0, {num_steps}] "
                             f"= [0, max_time]")


_PRECISIONS = {"float32": "float32", "highest": "float32", "tensorfloat32": "tensorfloat32",
               "default": "tensorfloat32", "high": "tensorfloat32"}


def resolve_precision(precision: Any) -> str:
    """"float32" (strict float32 matmuls) or "tensorfloat32" (TF32 tensor cores allowed for float32 on GPUs).

    Accepts what ``jax.default_matmul_precision`` accepts for these two meanings: "float32"/"highest"/
    ``lax.Precision.HIGHEST``, and "tensorfloat32"/"high"/"default"/``lax.Precision.HIGH``/``DEFAULT``. None follows
    the ``jax_default_matmul_precision`` config, and strict float32 where that is unset: errors compound over the
    time steps of a recurrence, so TF32 is an opt-in here (unlike a plain ``jnp.dot`` on a GPU).
    """
    requested = jax.config.jax_default_matmul_precision if precision is None else precision
    if requested is None:
        return "float32"
    name = requested.name.lower() if isinstance(requested, jax.lax.Precision) else requested
    if name not in _PRECISIONS:
        source = "jax_default_matmul_precision" if precision is None else "precision"
        raise ValueError(f"{source} is {requested!r}; expected None or one of {sorted(_PRECISIONS)} or "
                         f"jax.lax.Precision.HIGHEST/HIGH/DEFAULT")
    return _PRECISIONS[name]


def rnn(params: Any, x: Any, h0: Any, c0: Any, config: RNNConfig | None = None, seq_lengths: Any = None,
        is_training: bool = False, dropout_key: Any = None, implementation: str | None = None,
        precision: Any = None, algorithm: str | None = None, resets: Any = None, max_segments: int | None = None):
    """Runs a stacked LSTM/GRU/RNN over a time-major batch of sequences.

    Args:
      params: the opaque buffer, 1-D of ``params_size(config)`` elements of ``config.dtype``, or an ``RNNParams``
        (then ``config`` may be omitted; if given it must equal ``params.config``).
      x: [T, B, input_size] input, ``config.dtype``.
      h0: [num_layers * num_directions, B, hidden_size] initial hidden state (index layer * D + direction);
        hidden_size is num_units, or proj_size for a projected LSTM.
      c0: LSTM initial cell state [num_layers * num_directions, B, num_units]; must be None for the other modes.
      config: the RNNConfig (optional with RNNParams).
      seq_lengths: optional int32 [B], each in [0, T]. Outputs at t >= len are zero, h_n/c_n hold the state after the
        sequence's last valid step, and the backward direction reads positions len-1 .. 0 (PyTorch packed-sequence
        semantics). A length of 0 is an empty sequence: zero outputs, h_n/c_n = h0/c0 (a window in which a streamed
        sequence has no step). Checked when concrete; under ``jax.jit`` the lengths are not checked, a length below 0
        acts as 0, and one above T acts as T in the xla implementations and fails the cuDNN call at run time.
      is_training: applies inter-layer dropout when ``config.dropout > 0``.
      dropout_key: a JAX PRNG key, required when dropout applies; the same key gives the same masks everywhere.
      implementation: None (the best implementation available for the platform the computation is lowered for:
        "cudnn" on CUDA when the extension is loaded and this process sees a GPU; on the CPU "onednn" when its
        extension is loaded, it runs the call and it is measured faster for the call's shape
        (``onednn.faster_than_xla``); else "xla";
        under ``jax.jit`` the choice is staged out per platform, see jax_cudnn_rnn/backends.py and
        ``implementation_for``), "cudnn", "onednn" (oneDNN's fused RNN primitives on the CPU: float32/bfloat16, no
        seq_lengths or cell_clip), "xla" (fast pure JAX with a custom backward pass) or "reference" (naive scan;
        supports forward-mode autodiff).
        A requested implementation that cannot run where the call runs is a RuntimeError (at lowering time when
        only lowering knows the platform).
      precision: float32 matmul precision, for both implementations (cuDNN's math type, XLA's dot precision):
        None (the ``jax_default_matmul_precision`` config, else strict float32), "float32"/"highest", or
        "tensorfloat32"/"high"/"default" to let float32 GEMMs use TF32 tensor cores on Ampere and newer GPUs
        (about 10 mantissa bits: faster, less exact). No effect on other dtypes or on CPU. See ``resolve_precision``.
      algorithm: cuDNN's RNN algorithm, implementation="cudnn" only (the others accept and ignore it, so that code
        runs unchanged on CPU): None or "heuristic" (PyTorch's choice: a persistent kernel for small hidden sizes,
        and for float16 where it wins, the standard algorithm otherwise), "autotune" (time every algorithm cuDNN can
        run for this shape once per process, at trace time, and keep the fastest), or one of "standard",
        "persist_static", "persist_static_small_h" (a ValueError says why when cuDNN cannot run it here). Results
        agree across algorithms to rounding; params are the same bytes. See jax_cudnn_rnn/algorithm.py.
      resets: optional bool [T, B]. Where ``resets[t, b]``, a new segment starts at step t of sequence b: the state
        entering step t is zero in every layer (h and c), and each segment is an independent sequence. The forward
        direction of the first segment starts from h0/c0 (from zero if ``resets[0, b]``); the backward direction
        runs each segment from its last valid step starting from zero, except the last segment, which starts from
        h0/c0's backward entries. h_n/c_n: forward entries after the last valid step, backward entries after
        position 0. Resets at steps >= len change nothing. The xla implementations mask the state inside their scan;
        cuDNN runs every segment as a row of its own (jax_cudnn_rnn/segments.py).
      max_segments: implementation="cudnn" with ``resets`` only (the others accept and ignore it): the static number
        of rows of cuDNN's packed batch of segments, an int >= B; None means 2 * B. A batch with more segments (one
        per non-empty sequence, plus one per reset at a valid step > 0) runs the xla implementation instead, with the
        same results. The packed batch's memory grows with max_segments * T.

    Returns:
      (y [T, B, num_directions * hidden_size], h_n, c_n) with h_n shaped like h0 and c_n like c0; c_n is None
      unless LSTM.
    """
    if isinstance(params, RNNParams):
        if config is not None and config != params.config:
            raise ValueError(f"config {config} differs from params.config {params.config}; pass one of them")
        params, config = params.buffer, params.config
    elif config is None:
        raise TypeError("config is None; pass an RNNConfig, or params as an RNNParams that carries one")
    check_inputs(params, x, h0, c0, config, seq_lengths, resets)
    if max_segments is not None:
        if isinstance(max_segments, bool) or not isinstance(max_segments, (int, np.integer)):
            raise TypeError(f"max_segments must be None or an int, got {type(max_segments).__name__} "
                            f"{max_segments!r}")
        if max_segments < x.shape[1]:
            raise ValueError(f"max_segments is {max_segments}; expected None or an int >= {x.shape[1]} = batch (each "
                             f"sequence is at least one segment)")
    if not isinstance(is_training, (bool, np.bool_)):
        raise TypeError(f"is_training must be a Python bool (it selects the computation), got "
                        f"{type(is_training).__name__}")
    apply_dropout = bool(is_training) and config.dropout > 0 and config.num_layers > 1
    if apply_dropout and dropout_key is None:
        raise ValueError(f"dropout_key is None; is_training=True with config.dropout={config.dropout} needs a JAX "
                         "PRNG key (jax.random.key(seed))")
    call = Call(config, int(x.shape[0]), int(x.shape[1]), seq_lengths is not None, bool(is_training),
                resets is not None, resolve_precision(precision), check_algorithm(algorithm), max_segments,
                placement.of_arrays([x, h0, c0, seq_lengths, params], [1, 1, 1, 0, None]))
    x = fallback.note_missing_cudnn(implementation, call.placement, x)
    masks = dropout.masks_for(dropout_key, config, x.shape) if apply_dropout else None
    inputs = Inputs(params, x, h0, c0, None if seq_lengths is None else jnp.asarray(seq_lengths),
                    None if resets is None else jnp.asarray(resets), masks)
    return registry.run(implementation, call, inputs)
