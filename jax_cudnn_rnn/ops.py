"""``rnn``, the public op (documented as ``jax_cudnn_rnn.rnn``, its one public path): checks every argument, prepares
the call once (jax_cudnn_rnn/backends/call.py: its options, placement and dropout masks) and runs it on the
implementation jax_cudnn_rnn/backends/registry.py chooses."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn import dropout
from jax_cudnn_rnn._buffer import Pieces
from jax_cudnn_rnn._checks import RNN_ARGUMENTS, ArgumentNames, as_lengths, check_inputs, check_pieces
from jax_cudnn_rnn.backends import loops, registry
from jax_cudnn_rnn.backends.call import Call, CudnnOptions, Inputs
from jax_cudnn_rnn.backends.cudnn.algorithm import check_algorithm
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.params import RNNParams
from jax_cudnn_rnn.sharding import placement

__all__ = []


def refuses_lengths(implementation: str | None, config: RNNConfig) -> str | None:
    """Why ``implementation`` runs calls of ``config`` but not with per-sequence lengths (the registry's answer), or
    None (it takes them, or None picks one that does): a frontend whose mask or length becomes ``seq_lengths`` names
    its own argument in the error instead of rnn()'s."""
    if implementation is None or registry.why_not(implementation, None, Call(config)) is not None:
        return None
    return registry.why_not(implementation, None, Call(config, seq_lengths=True))


def where_and_why_not(
    implementation: str, config: RNNConfig, x: Any, seq_lengths: bool = False, recurrent_dropout: bool = False
) -> tuple[str, str | None]:
    """(the platform a call of ``config`` on ``x`` runs on, why ``implementation`` cannot run it there or None): x's
    platform when tracing knows it, else JAX's default device's, and the registry's answer for a call with lengths
    and recurrent dropout where asked. For a frontend argument that asks for an implementation in its own words
    (Keras's ``use_cudnn=True``) and names itself in the error."""
    platform = placement.of_arrays([x], [None]).platform
    if platform is None:
        platform = registry.lowering_platform()
    call = Call(config, seq_lengths=seq_lengths, recurrent_dropout=recurrent_dropout)
    return platform, registry.why_not(implementation, platform, call)


_PRECISIONS = {
    "float32": "float32",
    "highest": "float32",
    "tensorfloat32": "tensorfloat32",
    "default": "tensorfloat32",
    "high": "tensorfloat32",
}


def resolve_precision(precision: Any) -> str:
    """ "float32" (strict float32 matmuls) or "tensorfloat32" (TF32 tensor cores allowed for float32 on GPUs).

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
        raise ValueError(
            f"{source} is {requested!r}; expected None or one of {sorted(_PRECISIONS)} or "
            f"jax.lax.Precision.HIGHEST/HIGH/DEFAULT"
        )
    return _PRECISIONS[name]


def rnn(
    params: Any,
    x: Any,
    h0: Any,
    c0: Any,
    config: RNNConfig | None = None,
    seq_lengths: Any = None,
    is_training: bool = False,
    dropout_key: Any = None,
    implementation: str | None = None,
    precision: Any = None,
    algorithm: str | None = None,
    resets: Any = None,
    max_segments: int | None = None,
    argument_names: ArgumentNames | None = None,
):
    """Runs a stacked LSTM/GRU/RNN over a time-major batch of sequences.

    Args:
      params: the opaque buffer, 1-D of ``params_size(config)`` elements of ``config.dtype``, or an ``RNNParams``
        (then ``config`` may be omitted; if given it must equal ``params.config``).
      x: [T, B, input_size] input, ``config.dtype``.
      h0: [num_layers * num_directions, B, hidden_size] initial hidden state (index layer * D + direction);
        hidden_size is num_units, or proj_size for a projected LSTM.
      c0: LSTM initial cell state [num_layers * num_directions, B, num_units]; must be None for the other modes.
      config: the RNNConfig (optional with RNNParams).
      seq_lengths: optional integers [B] (int32, or any integer array or a list: converted to int32 after the range
        check), each in [0, T]. Outputs at t >= len are zero, h_n/c_n hold the state after the
        sequence's last valid step, and the backward direction reads positions len-1 .. 0 (PyTorch packed-sequence
        semantics); x past a sequence's length is never read (a NaN there reaches no output and no gradient). A
        length of 0 is an empty sequence: zero outputs, h_n/c_n = h0/c0 (a window in which a streamed sequence has
        no step). Checked when concrete; under ``jax.jit`` the lengths are not checked, a length below 0
        acts as 0, and one above T acts as T in the xla implementations and fails the cuDNN call at run time.
      is_training: applies inter-layer dropout when ``config.dropout > 0`` and recurrent dropout when
        ``config.recurrent_dropout > 0`` (False: neither; the result is exactly that of no dropout).
      dropout_key: a JAX PRNG key, required when dropout applies; the same key gives the same masks everywhere
        (jax_cudnn_rnn/dropout.py: the inter-layer masks and the recurrent ones come from separate streams of it).
      implementation: None (the best implementation available for the platform the computation is lowered for,
        as jax_cudnn_rnn/backends/registry.py decides and ``implementation_for`` reports: "cudnn" on CUDA when the
        extension is loaded, this process sees a GPU and cuDNN runs the call (bfloat16 needs cuDNN >= 9.13 and
        compute capability >= 8.0; else "xla" with a ``CudnnFallbackWarning``); on the CPU, per side of jax.grad,
        "onednn" (or "onednn:plain", its backward on plain weights, or "onednn:gemm") where oneDNN's extension is
        loaded, runs the call and is estimated the faster for the call's mode, dtype and size
        (``onednn.cpu_choice``; ``jax-cudnn-rnn tune`` measures this machine), else "xla"; under ``jax.jit`` the
        choice is staged out per platform),
        "cudnn", "onednn" (oneDNN's fused RNN primitives on the CPU: float32/bfloat16, no resets or cell_clip),
        "onednn:plain", "onednn:gemm" (the network as GEMMs on oneDNN's matmul, both sides; the default's choice
        where the CPU rule's measurements say so: bfloat16 on CPUs with native bfloat16 dot products), "xla" (fast
        pure JAX with a custom backward pass) or "reference" (naive scan; supports forward-mode autodiff), or
        "forward+training": one of those undifferentiated, another under jax.grad ("onednn+xla"; what
        ``implementation_for`` names where the default's two sides differ).
        A requested implementation that cannot run where the call runs is a RuntimeError (at lowering time when
        only lowering knows the platform).
      precision: float32 matmul precision, for both implementations (cuDNN's math type, XLA's dot precision):
        None (the ``jax_default_matmul_precision`` config, else strict float32), "float32"/"highest", or
        "tensorfloat32"/"high"/"default" to let float32 GEMMs use TF32 tensor cores on Ampere and newer GPUs
        (about 10 mantissa bits: faster, less exact). No effect on other dtypes or on CPU. See ``resolve_precision``.
      algorithm: cuDNN's RNN algorithm, implementation="cudnn" only (the others accept and ignore it, so that code
        runs unchanged on CPU): None or "measured" (the algorithm measured fastest for the call's shape class on the
        GPU's kind, from the shipped measurements or this machine's, `jax-cudnn-rnn tune`, where they cover the
        call: jax_cudnn_rnn/backends/cudnn/gpu_rule.py; "heuristic" elsewhere), "heuristic" (PyTorch's choice: a
        persistent kernel for small hidden sizes, and for float16 where it wins, the standard algorithm otherwise),
        "autotune" (time every algorithm cuDNN can
        run for this shape once per process, at trace time, and keep the fastest), or one of "standard",
        "persist_static", "persist_static_small_h" (a ValueError says why when cuDNN cannot run it here). Results
        agree across algorithms to rounding; params are the same bytes. See jax_cudnn_rnn/backends/cudnn/algorithm.py.
      resets: optional bool [T, B] (or 0/1 flags of an integer or float dtype, as ``jnp.where`` takes a
        condition; converted to bool after the check). Where ``resets[t, b]``, a new segment starts at step t of
        sequence b: the state entering step t is zero in every layer (h and c), and each segment is an independent
        sequence. The forward direction of the first segment starts from h0/c0 (from zero if ``resets[0, b]``); the
        backward direction runs each segment from its last valid step starting from zero, except the last segment,
        which starts from h0/c0's backward entries. h_n/c_n: forward entries after the last valid step, backward
        entries after position 0. Resets at steps >= len change nothing. The xla implementations mask the state
        inside their scan; cuDNN runs every segment as a row of its own (jax_cudnn_rnn/backends/fused/segments.py).
      max_segments: implementation="cudnn" with ``resets`` only (the others accept and ignore it): the static number
        of rows of cuDNN's packed batch of segments, an int >= B; None means 2 * B. A batch with more segments (one
        per non-empty sequence, plus one per reset at a valid step > 0) runs the xla implementation instead, with the
        same results. The packed batch's memory grows with max_segments * T.
      argument_names: for a frontend that passes its user's arguments on as they came (time-major): the
        ``ArgumentNames`` its errors name them by (the seed-style classes: input_data, input_h, input_c). None: rnn's.

    Returns:
      (y [T, B, num_directions * hidden_size], h_n, c_n) with h_n shaped like h0 and c_n like c0; c_n is None
      unless LSTM.

    One time step at a time (decoding, a rollout): every implementation reads the weights out of the buffer at each
    call (XLA copies its slices, oneDNN reorders them). Inside a loop (``lax.scan``) oneDNN's preparation of them is a
    computation on ``params`` alone, which XLA moves out of the loop; a lone step is faster through a frontend, whose
    named tensors the xla implementation reads where they lie, as Flax's cells do (docs/BENCHMARKS.md, "one time step
    and decoding").
    """
    if isinstance(params, RNNParams):
        if config is not None and config != params.config:
            raise ValueError(f"config {config} differs from params.config {params.config}; pass one of them")
        params, config = params.buffer, params.config
    elif config is None:
        raise TypeError("config is None; pass an RNNConfig, or params as an RNNParams that carries one")
    if params is None:  # check_inputs skips a None params (a frontend's own buffer): here it is a caller's slip
        raise TypeError("params must be an array (params_size(config) elements) or an RNNParams, got NoneType")
    if argument_names is None:
        argument_names = RNN_ARGUMENTS
    elif not isinstance(argument_names, ArgumentNames):
        raise TypeError(f"argument_names must be None or an ArgumentNames, got {type(argument_names).__name__}")
    elif argument_names.batch_major or not argument_names.batched or argument_names.state_axes[0] is None:
        raise ValueError(
            "argument_names is batch-major, unbatched or without the state's layer axis, but rnn() takes "
            "time-major, batched x and [num_layers*num_directions, batch, hidden] states: such a frontend "
            "checks its arguments with check_inputs(..., names=...) before it transposes or reshapes them"
        )
    seq_lengths = as_lengths(seq_lengths)
    # a frontend's named tensors (jax_cudnn_rnn/_buffer.py): each tensor's size and dtype against config
    pieces = isinstance(params, Pieces)
    if pieces:
        check_pieces(params, config)
    check_inputs(None if pieces else params, x, h0, c0, config, seq_lengths, resets, names=argument_names)
    return run_checked(
        params,
        x,
        h0,
        c0,
        config,
        seq_lengths,
        is_training,
        dropout_key,
        implementation,
        precision,
        algorithm,
        resets,
        max_segments,
    )


def run_checked(
    params: Any,
    x: Any,
    h0: Any,
    c0: Any,
    config: RNNConfig,
    seq_lengths: Any = None,
    is_training: bool = False,
    dropout_key: Any = None,
    implementation: str | None = None,
    precision: Any = None,
    algorithm: str | None = None,
    resets: Any = None,
    max_segments: int | None = None,
):
    """``rnn``'s arguments after ``_checks.check_inputs`` has checked params (unless they are a frontend's ``Pieces``),
    x, h0, c0, seq_lengths and resets: what ``rnn`` runs after its own checks, and what a frontend runs after checking
    its user's arguments in its own words (``check_inputs(..., names=...)``), so that each is checked once on the way
    to the kernels. Checks only the options (``max_segments``, ``is_training``, ``dropout_key``, ``precision``,
    ``algorithm``, ``implementation``); converts the lengths to int32 and the resets to bool (``resets != 0``: the
    integer or float flags ``check_inputs`` accepts)."""
    pieces = isinstance(params, Pieces)
    if max_segments is not None:
        if isinstance(max_segments, bool) or not isinstance(max_segments, (int, np.integer)):
            raise TypeError(f"max_segments must be None or an int, got {type(max_segments).__name__} {max_segments!r}")
        if max_segments < x.shape[1]:
            raise ValueError(
                f"max_segments is {max_segments}; expected None or an int >= {x.shape[1]} = batch (each "
                f"sequence is at least one segment)"
            )
    if not isinstance(is_training, (bool, np.bool_)):
        raise TypeError(
            f"is_training must be a Python bool (it selects the computation), got {type(is_training).__name__}"
        )
    apply_dropout = bool(is_training) and config.dropout > 0 and config.num_layers > 1
    apply_recurrent_dropout = bool(is_training) and config.recurrent_dropout > 0
    if (apply_dropout or apply_recurrent_dropout) and dropout_key is None:
        which = f"dropout={config.dropout}" if apply_dropout else f"recurrent_dropout={config.recurrent_dropout}"
        raise ValueError(
            f"dropout_key is None; is_training=True with config.{which} needs a JAX PRNG key (jax.random.key(seed))"
        )
    if apply_dropout or apply_recurrent_dropout:
        dropout.check_key(dropout_key)
    call = Call(
        config,
        int(x.shape[0]),
        int(x.shape[1]),
        seq_lengths is not None,
        bool(is_training),
        resets is not None,
        resolve_precision(precision),
        placement.of_arrays([x, h0, c0, seq_lengths, params.arrays[0] if pieces else params], [1, 1, 1, 0, None]),
        CudnnOptions(check_algorithm(algorithm), max_segments),
        apply_recurrent_dropout,
        pieces=pieces,
        loop_invariant_weights=loops.loop_invariant(params.arrays if pieces else [params], x),
        mapped=loops.mapped(x),
    )
    masks = dropout.masks_for(dropout_key, config, x.shape) if apply_dropout else None
    recurrent_masks = dropout.recurrent_masks(dropout_key, config, x.shape[1]) if apply_recurrent_dropout else None
    inputs = Inputs(
        params,
        x,
        h0,
        c0,
        None if seq_lengths is None else jnp.asarray(seq_lengths, jnp.int32),
        None if resets is None else _as_flags(resets),
        masks,
        recurrent_masks,
    )
    return registry.run(implementation, call, inputs)


def _as_flags(resets: Any) -> jax.Array:
    """Resets as bool: bool as they are, integer or float 0/1 flags (checked by ``check_inputs``) as ``!= 0``."""
    resets = jnp.asarray(resets)
    return resets if resets.dtype == jnp.bool_ else resets != 0
