"""Flax linen modules over ``ops.rnn``: ``RNN`` (every mode), ``LSTM`` and ``GRU``.

The parameters are one ``RNNParams`` named ``rnn_params`` (the opaque buffer, ``param_dtype``, cuDNN's layout), so an
optax state mirrors it and ``checkpoint.CanonicalCheckpointHandler`` writes it in canonical form. Batch-major by
default like ``flax.linen.RNN``; the input size is taken from the input at init.

Streaming: ``initial_carry`` and ``return_carry`` as in ``flax.linen.RNN``. For a unidirectional network, a sequence fed
window by window, each window's final carry passed on as the next one's ``initial_carry``, gives exactly the outputs,
final carry and gradients of one call over the whole sequence, with ``seq_lengths`` counted per window (a window past a
sequence's end has length 0 and passes its carry through) and ``resets`` sliced per window. ``initialize_carry`` makes
the zero carry to start from. (A bidirectional network's backward direction reads a window from its end, so it cannot
stream.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from jax_cudnn_rnn import _checks, layout, ops
from jax_cudnn_rnn.config import LAYOUT_FIELDS, MODES, RNNConfig, check_int
from jax_cudnn_rnn.params import RNNParams, is_rnn_params

__all__ = [
    "GRU",
    "LSTM",
    "RNN",
    "apply_rnn",
    "argument_names",
    "carry_batch",
    "init_canonical",
    "make_config",
    "module_size",
    "zero_carry",
]

#: Where Flax's own cells keep each gate's one bias (their input and recurrent Dense layers are summed, so only one of
#: them has a bias): nn.LSTMCell on the recurrent side (``hi``, ``hf``, ...), nn.GRUCell and nn.SimpleCell on the input
#: side (``ir``, ``iz``, ``in``, ``i``); GRUCell's new-memory gate has a recurrent bias too (``hn``, inside r * (...)).
_FLAX_BIAS_GROUP = {"lstm": "b_recurrent"}
_FLAX_BOTH_BIASES = {"gru": ("n",)}


def make_config(
    mode: str,
    num_units: int,
    num_layers: int,
    input_size: int,
    direction: str,
    input_mode: str,
    dropout: float,
    dtype: Any,
    proj_size: int = 0,
    cell_clip: float | None = None,
    bias_mode: str = "double",
    recurrent_dropout: float = 0.0,
) -> RNNConfig:
    """The ``RNNConfig`` of a module's fields (the linen module's, and NNX's with ``in_features`` as input_size), its
    buffer in ``dtype`` (the modules' ``param_dtype``)."""
    return RNNConfig(
        mode=mode,
        num_layers=num_layers,
        num_units=num_units,
        input_size=input_size,
        direction=direction,
        input_mode=input_mode,
        dropout=dropout,
        dtype=dtype,
        proj_size=proj_size,
        cell_clip=cell_clip,
        bias_mode=bias_mode,
        recurrent_dropout=recurrent_dropout,
    )


def module_size(
    module: str,
    num_units: Any,
    alias_name: str,
    alias: Any,
    mode: str | None,
    fixed_mode: str | None,
    leading: str = "",
) -> Any:
    """The hidden size of a module built as ``module(num_units, ...)`` or with Flax's name for it (``features`` for
    linen, ``hidden_features`` for NNX), after refusing what a caller of the old signature or a contradiction would
    pass: a mode where the size goes (the linen modules took ``mode`` first before 0.2), no size, two different sizes,
    and a ``mode`` that is not the class's own (``fixed_mode``: "lstm" for LSTM, "gru" for GRU, None for RNN).
    ``leading``: the arguments before the size in the messages' examples (NNX's ``"in_features, "``)."""
    if isinstance(num_units, str):
        hint = f"RNN({leading}num_units, mode={num_units!r})" if num_units in MODES else f"{module}({leading}64)"
        raise TypeError(
            f"{module}'s {'second' if leading else 'first'} argument is the hidden size (num_units, an int), as for "
            f"Flax's cells; got {num_units!r}. The mode is a keyword argument: write {hint}"
        )
    if num_units is None and alias is None:
        raise TypeError(
            f"{module} needs its hidden size: {module}({leading}64), or num_units=64 ({alias_name}=64, Flax's name)"
        )
    if num_units is not None and alias is not None and num_units != alias:
        raise ValueError(f"num_units is {num_units!r} and {alias_name} is {alias!r}; pass one of them (the same size)")
    if fixed_mode is not None and mode != fixed_mode:
        raise ValueError(
            f"mode is {mode!r} but {module} is the {fixed_mode!r} module; use RNN({leading}num_units, mode={mode!r}) "
            f"for another cell, or leave mode out"
        )
    return num_units if num_units is not None else alias


def _flax_has_bias(config: RNNConfig, slot: layout.ParamSlot) -> bool:
    """Whether Flax's cell of ``config.mode`` has the bias ``slot`` is (``_FLAX_BIAS_GROUP``); when the config lacks
    that side's biases (``bias_mode``), the side it has stands in for it, so each gate's summed bias is still
    ``bias_init``'s."""
    group = _FLAX_BIAS_GROUP.get(config.mode, "b_input")
    present = {"b_input": config.has_input_bias, "b_recurrent": config.has_recurrent_bias}
    if not present[group]:
        group = "b_input" if group == "b_recurrent" else "b_recurrent"
    return slot.group == group or config.gate_names[slot.gate] in _FLAX_BOTH_BIASES.get(config.mode, ())


def init_canonical(
    key: jax.Array,
    config: RNNConfig,
    kernel_init: Any = None,
    recurrent_kernel_init: Any = None,
    bias_init: Any = None,
) -> dict[str, Any]:
    """Fresh parameters as the canonical named tree (``layout.params_to_tree``'s form), with Flax's initializer
    arguments meaning what they mean for ``nn.LSTMCell``/``GRUCell``/``SimpleCell``.

    Without initializers every tensor is U(-k, k), k = 1/sqrt(hidden) (``layout.init_params``, PyTorch's
    initialisation), exactly the buffer ``RNNParams.init(key, config)`` gives. Each initializer given replaces that
    for its tensors, called once per gate as Flax calls it per gate's Dense layer, with Flax's shapes (kernels are
    [in, out], the canonical matrix transposed) and ``config.dtype``, each with a key of its own:

    * ``kernel_init(key, (in, H), dtype)``: the input matrices (and a projected LSTM's projection, (H, P));
    * ``recurrent_kernel_init(key, (hidden, H), dtype)``: the recurrent matrices (e.g. ``initializers.orthogonal()``);
    * ``bias_init(key, (H,), dtype)``: each gate's bias where Flax's cell has it (LSTM: the recurrent biases; GRU and
      RNN: the input biases, plus GRU's recurrent bias of the new-memory gate); the other bias of the pair is zero,
      so every gate adds exactly ``bias_init``'s value, as in Flax.

    These are linen's cells' conventions, which ``nnx.LSTMCell`` and ``nnx.SimpleCell`` share; ``nnx.GRUCell`` differs
    (one draw for the three gates' kernels together, no recurrent bias on the new-memory gate), and the NNX modules
    follow linen's ``GRUCell`` too.

    Each may also be a dict {gate name: initializer} (``config.gate_names``, e.g. LSTM's "i", "f", "g", "o"; the
    projection's key is "projection"), the gates left out keeping the default: ``bias_init={"f": nn.initializers.
    ones}`` gives an LSTM a forget-gate bias of 1.
    """
    buffer = layout.init_params(key, config)
    tree = layout.params_to_tree(buffer, config)
    if kernel_init is None and recurrent_kernel_init is None and bias_init is None:
        return tree
    flat = layout.flatten_tree(tree)
    weight_slots, bias_slots = layout.param_slots(config)
    slots = weight_slots + bias_slots
    keys = jax.random.split(jax.random.fold_in(key, 1), len(slots))
    chosen = {"w_input": "kernel_init", "w_projection": "kernel_init", "w_recurrent": "recurrent_kernel_init"}
    inits = {"kernel_init": kernel_init, "recurrent_kernel_init": recurrent_kernel_init, "bias_init": bias_init}
    names = (*config.gate_names, "projection")
    for argument, init in inits.items():
        if isinstance(init, Mapping) and set(init) - set(names):
            raise ValueError(
                f"{argument} names {sorted(set(init) - set(names))}; the gates of mode {config.mode!r} are "
                f"{list(config.gate_names)} (and 'projection')"
            )
    for slot, slot_key in zip(slots, keys, strict=True):
        argument = chosen.get(slot.group, "bias_init")
        init = inits[argument]
        if isinstance(init, Mapping):
            init = init.get("projection" if slot.group == "w_projection" else config.gate_names[slot.gate])
        if init is None:
            continue
        if not callable(init):
            raise TypeError(f"{argument} is a {type(init).__name__}; expected an initializer init(key, shape, dtype)")
        name = slot.name(config)
        if slot.is_bias and not _flax_has_bias(config, slot):
            flat[name] = jnp.zeros(slot.shape, config.dtype)
            continue
        shape = slot.shape if slot.is_bias else slot.shape[::-1]
        value = jnp.asarray(init(slot_key, shape, config.dtype))
        if value.shape != shape:
            raise ValueError(
                f"{argument} returned shape {value.shape} for {name}; expected {shape} (Flax's "
                f"{'bias' if slot.is_bias else 'kernel [in, out]'} shape)"
            )
        flat[name] = (value if slot.is_bias else value.T).astype(config.dtype)
    return layout.unflatten_tree(flat)


def zero_carry(source: Any, batch: int, dtype: Any = None) -> Any:
    """The zero carry for ``batch`` sequences in ``dtype``: ``(h, c)`` for LSTM, ``h`` otherwise, with h
    [num_layers*D, batch, hidden] (hidden = proj_size or num_units) and c [num_layers*D, batch, num_units].

    ``source`` says which network: its ``RNNConfig``, its ``RNNParams``, or a parameter tree holding exactly one
    ``RNNParams`` (a parent module's ``variables`` or ``variables["params"]``), so a stream through a module nested in
    another starts from ``zero_carry(variables, batch)`` without building the inner module. ``dtype`` defaults to the
    parameters' (``config.dtype``); give the module's ``dtype`` when it computes in another, so that the first
    window's carry has the type every later one has and a jitted step compiles once (with ``initial_carry=None`` on
    the first call and arrays after, ``jax.jit`` traces twice).
    """
    if isinstance(source, RNNConfig):
        config = source
    elif isinstance(source, RNNParams):
        config = source.config
    else:
        found = [
            (jax.tree_util.keystr(path), leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(source, is_leaf=is_rnn_params)[0]
            if isinstance(leaf, RNNParams)
        ]
        if len(found) != 1:
            where = f" (at {', '.join(p for p, _ in found)})" if found else ""
            raise ValueError(
                f"source holds {len(found)} RNNParams{where}; expected an RNNConfig, an RNNParams or a tree "
                "holding exactly one (pass the one you mean, e.g. variables['params']['LSTM_0'])"
            )
        config = found[0][1].config
    batch = check_int("batch", batch, 1)
    dtype = config.dtype if dtype is None else dtype
    h = jnp.zeros(config.state_shape(batch), dtype)
    return (h, jnp.zeros(config.cell_shape(batch), dtype)) if config.has_cell_state else h


def carry_batch(input_shape: Any, time_major: bool) -> int:
    """The batch size in ``input_shape``: the whole input's shape (rank 3, [B, T, I] or time-major [T, B, I]) or one
    step's (rank 2, (B, I), as Flax's cells take it)."""
    shape = tuple(input_shape)
    if len(shape) == 2:
        return shape[0]
    if len(shape) == 3:
        return shape[1] if time_major else shape[0]
    raise ValueError(
        f"input_shape is {shape}; expected the input's shape "
        f"({'time, batch' if time_major else 'batch, time'}, features) or one step's (batch, features)"
    )


def argument_names(
    time_major: bool, has_cell_state: bool = False, input_size: str = "the module's input size"
) -> _checks.ArgumentNames:
    """The words the modules' errors use (``_checks.check_inputs``): their own arguments, x in their layout, the carry's
    parts as ``initial_carry[0]``/``[1]`` when it holds a cell state (LSTM); ``input_size`` says what sets x's last
    axis."""
    h0, c0 = ("initial_carry[0]", "initial_carry[1]") if has_cell_state else ("initial_carry", "initial_carry")
    return _checks.ArgumentNames(
        params="rnn_params",
        x="x",
        h0=h0,
        c0=c0,
        input_size=input_size,
        dtype=None,
        axes=("time", "batch", "features"),
        batch_major=not time_major,
        caller="The module",
        layout_fix=f"pass jnp.swapaxes(x, 0, 1), or build the module with time_major={not time_major}",
    )


def _split_carry(initial_carry: Any, config: RNNConfig) -> tuple[Any, Any]:
    """(h0, c0) from ``initial_carry``: the pair ``(h, c)`` for LSTM, ``h`` alone (c0 None) otherwise."""

    def described(value):
        if isinstance(value, (tuple, list)):
            return f"a {type(value).__name__} of {len(value)}"
        shape = getattr(value, "shape", None)
        return f"an array of shape {tuple(shape)}" if shape is not None else f"a {type(value).__name__}"

    hidden = "proj_size" if config.proj_size else "num_units"
    if config.has_cell_state:
        if not isinstance(initial_carry, (tuple, list)) or len(initial_carry) != 2:
            raise TypeError(
                f"initial_carry is {described(initial_carry)}; mode 'lstm' carries a pair (h, c) of "
                f"[num_layers*num_directions, batch, {hidden}] and [num_layers*num_directions, batch, "
                f"num_units] arrays"
            )
        return initial_carry[0], initial_carry[1]
    if isinstance(initial_carry, (tuple, list)):
        raise TypeError(
            f"initial_carry is {described(initial_carry)}; mode {config.mode!r} carries h alone, one "
            f"[num_layers*num_directions, batch, {hidden}] array"
        )
    return initial_carry, None


def apply_rnn(
    params: RNNParams,
    x: jax.Array,
    *,
    compute_dtype: Any,
    time_major: bool,
    seq_lengths: Any = None,
    initial_carry: Any = None,
    dropout_key: Any = None,
    implementation: str | None = None,
    precision: Any = None,
    algorithm: str | None = None,
    return_carry: bool = False,
    resets: Any = None,
    max_segments: int | None = None,
    input_size_name: str = "the module's input size",
):
    """Runs ``params`` over x ([B, T, I], or [T, B, I] when ``time_major``) in ``compute_dtype`` (x, the carry and the
    buffer are cast to it).

    ``initial_carry``: ``(h0, c0)`` for LSTM, ``h0`` otherwise, each [num_layers*D, B, H]; zeros when None.
    ``seq_lengths``: int [B] in [0, T]. ``resets``: bool [B, T] (or [T, B] when ``time_major``), ``rnn``'s resets;
    ``max_segments``: ``rnn``'s (cuDNN only). Every argument is checked as the caller passed it, before any cast or
    transposition, by ``_checks.check_inputs`` in the module's words (``argument_names``; ``input_size_name``: what set
    the input size, e.g. NNX's ``in_features``).
    Returns y ([B, T, D*H] or time-major), or ``(carry, y)`` with ``return_carry`` (carry shaped like
    ``initial_carry``), as ``flax.linen.RNN`` does.
    """
    config = params.config
    compute_dtype = jnp.dtype(compute_dtype)
    if config.dtype != compute_dtype:
        run_config = RNNConfig(**{**config.to_json(), "dtype": compute_dtype.name})
        buffer = params.buffer.astype(compute_dtype)
    else:
        run_config, buffer = config, params.buffer
    names = argument_names(time_major, config.has_cell_state, input_size_name)
    if initial_carry is None:
        initial_carry = zero_carry(run_config, _checks.x_dims(x, names, config.input_size)[1], compute_dtype)
    h0, c0 = _split_carry(initial_carry, config)
    if resets is not None:
        resets = jnp.asarray(resets)
    if seq_lengths is not None:
        seq_lengths = jnp.asarray(seq_lengths)
        if not jnp.issubdtype(seq_lengths.dtype, jnp.integer):  # a cast would truncate 2.7 to 2 without a word
            raise TypeError(f"seq_lengths has dtype {seq_lengths.dtype.name}; expected integers (int32 [batch])")
        seq_lengths = seq_lengths.astype(jnp.int32)
    _checks.check_inputs(buffer, x, h0, c0, run_config, seq_lengths, resets, names=names)
    x = jnp.asarray(x, compute_dtype)
    xs = x if time_major else jnp.swapaxes(x, 0, 1)
    if resets is not None and not time_major:
        resets = resets.T
    h0 = jnp.asarray(h0, compute_dtype)
    c0 = None if c0 is None else jnp.asarray(c0, compute_dtype)
    y, h_n, c_n = ops.rnn(
        buffer,
        xs,
        h0,
        c0,
        run_config,
        seq_lengths=seq_lengths,
        is_training=dropout_key is not None,
        dropout_key=dropout_key,
        implementation=implementation,
        precision=precision,
        algorithm=algorithm,
        resets=resets,
        max_segments=max_segments,
    )
    if not time_major:
        y = jnp.swapaxes(y, 0, 1)
    if not return_carry:
        return y
    return ((h_n, c_n) if config.has_cell_state else h_n), y


def _with_config(params: Any, config: RNNConfig, input_size: int) -> RNNParams:
    """The stored params under this module's config; the buffer must have the same layout and dtype (dropout and
    other run-time fields are the module's)."""
    if not isinstance(params, RNNParams):
        raise TypeError(f"rnn_params is a {type(params).__name__}; expected an RNNParams for {config}")
    differing = [f for f in (*LAYOUT_FIELDS, "dtype") if getattr(params.config, f) != getattr(config, f)]
    if "input_size" in differing:
        raise ValueError(
            f"x has {input_size} features (its last axis) but the module's parameters were made for "
            f"input_size={params.config.input_size}"
        )
    if differing:
        fields = ", ".join(f"{f}={getattr(params.config, f)!r} (module: {getattr(config, f)!r})" for f in differing)
        raise ValueError(f"rnn_params does not match this module: the parameters have {fields}")
    return RNNParams.tree_unflatten(config, [params.buffer])


class RNN(nn.Module):
    """A stacked LSTM/GRU/RNN layer with cuDNN's fused kernels (on GPU) or the pure-JAX implementation.

    Built as Flax's cells are, size first: ``RNN(64, mode="gru")``, ``LSTM(64)``, ``GRU(64, num_layers=2)``.

    Attributes:
      num_units: hidden size H (Flax's ``features``, accepted as a keyword too).
      mode: "lstm", "gru", "rnn_tanh" or "rnn_relu"; ``LSTM`` and ``GRU`` fix it (another value is a ValueError).
      num_layers: stacked layers.
      direction: "unidirectional" or "bidirectional" (outputs concatenated, forward first: D*H features).
      input_mode: "linear_input", "skip_input" or "auto_select" (see RNNConfig).
      dropout: inter-layer dropout rate, applied when not deterministic (rng stream 'dropout').
      recurrent_dropout: Keras's recurrent (variational) dropout rate (``RNNConfig.recurrent_dropout``: one mask per
        gate on h_{t-1}, per layer and direction, for the whole sequence), applied when not deterministic, from the
        same 'dropout' rng; it runs on the xla implementation in training.
      proj_size, cell_clip, bias_mode: the projected/clipped LSTM and bias options of ``RNNConfig``.
      precision: float32 matmul precision (``rnn``'s argument): None, "float32" or "tensorfloat32".
      algorithm: cuDNN's RNN algorithm (``rnn``'s argument): None (PyTorch's heuristic), "autotune", "standard",
        "persist_static" or "persist_static_small_h"; ignored by the xla implementation.
      dtype: computation dtype (default: param_dtype); the buffer is cast to it.
      param_dtype: dtype of the opaque buffer.
      time_major: False (default): x is [B, T, I]; True: [T, B, I].
      implementation: None (cuDNN on GPU, oneDNN on the CPU where installed and faster, else "xla"), "cudnn",
        "onednn", "xla" or "reference".
      deterministic: default for ``__call__``'s argument; True when both are None.
      kernel_init, recurrent_kernel_init, bias_init: Flax's initializers (``init(key, shape, dtype)``) of the input
        matrices, the recurrent matrices and the biases, as for ``nn.LSTMCell`` (``init_canonical`` says exactly
        how); None: U(-1/sqrt(H), 1/sqrt(H)) as PyTorch initialises. The parameter stays one buffer: the canonical
        tensors are initialised and then packed.
      features: Flax's name for ``num_units``.

    ``__call__(x, seq_lengths=None, initial_carry=None, *, deterministic=None, return_carry=False, resets=None,
    max_segments=None)``: see ``apply_rnn`` (resets bool [B, T], or [T, B] when time_major). Parameters:
    ``{'rnn_params': RNNParams}``. ``initialize_carry(rng, input_shape)`` gives the zero carry; ``zero_carry(variables,
    batch)`` gives it from the parameters alone (a module nested in another).
    """

    num_units: int | None = None
    mode: str = "lstm"
    num_layers: int = 1
    direction: str = "unidirectional"
    input_mode: str = "linear_input"
    dropout: float = 0.0
    proj_size: int = 0
    cell_clip: float | None = None
    bias_mode: str = "double"
    precision: Any = None
    algorithm: str | None = None
    dtype: Any = None
    param_dtype: Any = jnp.float32
    time_major: bool = False
    implementation: str | None = None
    deterministic: bool | None = None
    kernel_init: Any = None
    recurrent_kernel_init: Any = None
    bias_init: Any = None
    features: int | None = None
    recurrent_dropout: float = 0.0

    #: The mode a subclass stands for (LSTM, GRU); None: any.
    fixed_mode: ClassVar[str | None] = None

    def __post_init__(self):
        module_size(type(self).__name__, self.num_units, "features", self.features, self.mode, self.fixed_mode)
        super().__post_init__()

    @nn.nowrap
    def rnn_config(self, input_size: int) -> RNNConfig:
        """The ``RNNConfig`` of this module for inputs of ``input_size`` features (its buffer in ``param_dtype``)."""
        return make_config(
            self.mode,
            self.num_units if self.num_units is not None else self.features,
            self.num_layers,
            input_size,
            self.direction,
            self.input_mode,
            self.dropout,
            self.param_dtype,
            self.proj_size,
            self.cell_clip,
            self.bias_mode,
            self.recurrent_dropout,
        )

    @nn.nowrap
    def initialize_carry(self, rng: Any, input_shape: tuple[int, ...]) -> Any:
        """The zero carry (``initial_carry`` to start a stream from), like Flax cells' ``initialize_carry``.

        ``rng`` is accepted for Flax's signature and unused (the carry is zero); ``input_shape`` is the shape of x or of
        one step's input (batch, features). Returns ``(h, c)`` for LSTM, ``h`` otherwise: h [num_layers*D, B, hidden],
        c [num_layers*D, B, num_units], in the module's computation dtype.
        """
        del rng
        config = self.rnn_config(input_shape[-1])
        return zero_carry(config, carry_batch(input_shape, self.time_major), self.dtype or self.param_dtype)

    @nn.nowrap
    def _init_params(self, key: jax.Array, config: RNNConfig) -> RNNParams:
        inits = (self.kernel_init, self.recurrent_kernel_init, self.bias_init)
        if all(init is None for init in inits):
            return RNNParams.init(key, config)
        return RNNParams.from_tree(init_canonical(key, config, *inits), config)

    @nn.compact
    def __call__(
        self,
        x: jax.Array,
        seq_lengths: Any = None,
        initial_carry: Any = None,
        *,
        deterministic: bool | None = None,
        return_carry: bool = False,
        resets: Any = None,
        max_segments: int | None = None,
    ):
        """Runs the network over x ([B, T, I], or [T, B, I] when ``time_major``); ``seq_lengths`` int [B],
        ``initial_carry`` (``(h, c)`` for LSTM, ``h`` otherwise, each [num_layers*D, B, hidden]), ``resets`` bool
        [B, T] ([T, B] when ``time_major``) and ``max_segments`` as in ``apply_rnn``; dropout applies unless
        ``deterministic`` (this argument, else the field). Returns y [B, T, D*hidden] (time-major like x), or
        ``(carry, y)`` with ``return_carry``. At init, x's last axis sets the input size."""
        # x's last axis sizes the parameters at init: x_dims reports an x that is not a rank-3 array first
        config = self.rnn_config(_checks.x_dims(x, argument_names(self.time_major))[2])
        if self.has_variable("params", "rnn_params"):  # compare before Flax's own, less specific, shape check
            params = self.get_variable("params", "rnn_params")
        else:
            params = self.param("rnn_params", self._init_params, config)
        params = _with_config(params, config, x.shape[-1])
        if deterministic is None:
            deterministic = True if self.deterministic is None else self.deterministic
        dropout_key = None
        if not deterministic and ((config.dropout > 0 and config.num_layers > 1) or config.recurrent_dropout > 0):
            dropout_key = self.make_rng("dropout")
        return apply_rnn(
            params,
            x,
            compute_dtype=self.dtype or self.param_dtype,
            time_major=self.time_major,
            seq_lengths=seq_lengths,
            initial_carry=initial_carry,
            dropout_key=dropout_key,
            implementation=self.implementation,
            precision=self.precision,
            algorithm=self.algorithm,
            return_carry=return_carry,
            resets=resets,
            max_segments=max_segments,
        )


class LSTM(RNN):
    """``RNN`` with mode "lstm": ``LSTM(num_units, **RNN's other fields)``."""

    mode: str = "lstm"
    fixed_mode: ClassVar[str | None] = "lstm"


class GRU(RNN):
    """``RNN`` with mode "gru" (cuDNN's, ``nn.GRUCell``'s equations): ``GRU(num_units, **RNN's other fields)``."""

    mode: str = "gru"
    fixed_mode: ClassVar[str | None] = "gru"
