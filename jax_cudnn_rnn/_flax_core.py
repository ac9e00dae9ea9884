"""What the linen modules (jax_cudnn_rnn/flax.py) and the NNX modules (jax_cudnn_rnn/nnx.py) share: the config of a
module's fields, its parameters (the named canonical tensors its Flax cells train: ``_parameterization``) and their
initialisation with Flax's initializers, Flax's carry ``(c, h)``, and the call.

Private: users meet these through the modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn import _checks, layout, ops
from jax_cudnn_rnn._buffer import Pieces
from jax_cudnn_rnn._parameterization import Parameterization, library_biases
from jax_cudnn_rnn.config import MODES, RNNConfig, check_int
from jax_cudnn_rnn.params import RNNParams


def parameterization(
    library: str,
    mode: str,
    num_units: int,
    num_layers: int,
    input_size: int,
    bias_mode: str | None,
    **fields: Any,
) -> Parameterization:
    """The parameters of a module of ``library`` ("flax" or "nnx"): its cells' biases when ``bias_mode`` is None, else
    cuDNN's ``bias_mode``; ``fields``: the rest of ``RNNConfig``'s (direction, input_mode, dropout, dtype (the
    modules' ``param_dtype``), proj_size, cell_clip, recurrent_dropout)."""
    space, held = library_biases(library, mode, bias_mode)
    config = RNNConfig(
        mode=mode, num_layers=num_layers, num_units=num_units, input_size=input_size, bias_mode=space, **fields
    )
    return Parameterization(config, held)


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


# ---------------------------------------------------------------------------------------------------- initialisation

#: Where Flax's cells keep each gate's one bias when the weight space has both (an explicit ``bias_mode="double"``):
#: ``nn.LSTMCell`` on the recurrent side, ``GRUCell`` and ``SimpleCell`` on the input side, GRU's n on both.
_FLAX_BIAS_GROUP = {"lstm": "b_recurrent"}


def _flax_has_bias(config: RNNConfig, slot: layout.ParamSlot) -> bool:
    """Whether Flax's cell of ``config.mode`` has the bias ``slot`` is (``_FLAX_BIAS_GROUP``); when the config lacks
    that side's biases (``bias_mode``), the side it has stands in for it, so each gate's summed bias is still
    ``bias_init``'s."""
    group = _FLAX_BIAS_GROUP.get(config.mode, "b_input")
    present = {"b_input": config.has_input_bias, "b_recurrent": config.has_recurrent_bias}
    if not present[group]:
        group = "b_input" if group == "b_recurrent" else "b_recurrent"
    return slot.group == group or (config.mode == "gru" and config.gate_names[slot.gate] == "n")


def _orthogonal(key: jax.Array, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """Flax's ``initializers.orthogonal()``, drawn in float32 and cast (nnx's ``modified_orthogonal``: QR has no
    half-precision kernels)."""
    return jax.nn.initializers.orthogonal()(key, shape, jnp.float32).astype(dtype)


#: The initializers Flax's cells default to (linen's and nnx's alike): lecun_normal input kernels, orthogonal
#: recurrent kernels, zero biases.
FLAX_INITIALIZERS = {
    "kernel_init": jax.nn.initializers.lecun_normal(),
    "recurrent_kernel_init": _orthogonal,
    "bias_init": jax.nn.initializers.zeros,
}
_ARGUMENT = {"w_input": "kernel_init", "w_projection": "kernel_init", "w_recurrent": "recurrent_kernel_init"}


def init_tree(
    key: jax.Array,
    parameters: Parameterization,
    defaults: str,
    kernel_init: Any = None,
    recurrent_kernel_init: Any = None,
    bias_init: Any = None,
) -> dict[str, Any]:
    """Fresh parameters as the named tree of ``parameters``, with Flax's initializer arguments meaning what they mean
    for ``nn.LSTMCell``/``GRUCell``/``SimpleCell``.

    ``defaults`` says what an initializer left None is: "flax" and "nnx" (a module with its cells' biases, the
    default) Flax's own, ``FLAX_INITIALIZERS``; "uniform" (a module with one of cuDNN's bias modes) PyTorch's
    U(-k, k), k = 1/sqrt(hidden), exactly the buffer ``RNNParams.init(key, config)`` gives. Each initializer is called
    once per gate as Flax calls it per gate's Dense layer, with Flax's shapes (kernels [in, out], the canonical matrix
    transposed) and ``config.dtype``, each with a key of its own:

    * ``kernel_init(key, (in, H), dtype)``: the input matrices (and a projected LSTM's projection, (H, P));
    * ``recurrent_kernel_init(key, (hidden, H), dtype)``: the recurrent matrices;
    * ``bias_init(key, (H,), dtype)``: every bias the module has; under ``bias_mode="double"``, each gate's bias on
      the side Flax's cell has it, the other zero, so every gate adds exactly ``bias_init``'s value as in Flax.

    "nnx" draws a GRU's three gates at once, as ``nnx.GRUCell`` does: (in, 3H), (H, 3H) and (3H,). Each may also be
    a dict {gate name: initializer} (``config.gate_names``; the projection's key is "projection"), the gates left
    out keeping the default: ``bias_init={"f": nn.initializers.ones}`` gives an LSTM a forget-gate bias of 1.
    """
    config = parameters.config
    given = {"kernel_init": kernel_init, "recurrent_kernel_init": recurrent_kernel_init, "bias_init": bias_init}
    names = (*config.gate_names, "projection")
    for argument, init in given.items():
        if isinstance(init, Mapping) and set(init) - set(names):
            raise ValueError(
                f"{argument} names {sorted(set(init) - set(names))}; the gates of mode {config.mode!r} are "
                f"{list(config.gate_names)} (and 'projection')"
            )
        if init is not None and not isinstance(init, Mapping) and not callable(init):
            raise TypeError(f"{argument} is a {type(init).__name__}; expected an initializer init(key, shape, dtype)")
    flat = layout.flatten_tree(parameters.from_buffer(layout.init_params(key, config)))
    if defaults == "uniform" and all(init is None for init in given.values()):
        return parameters.tree(flat)
    joint = defaults == "nnx" and config.mode == "gru"
    fallback = FLAX_INITIALIZERS if defaults != "uniform" else {}
    slots = parameters.slots
    keys = jax.random.split(jax.random.fold_in(key, 1), len(slots))
    drawn: dict[tuple[int, int, str], jax.Array] = {}  # a joint draw, per pseudo-layer and group
    for slot, slot_key in zip(slots, keys, strict=True):
        argument = _ARGUMENT.get(slot.group, "bias_init")
        init = given[argument]
        if isinstance(init, Mapping):
            init = init.get("projection" if slot.group == "w_projection" else config.gate_names[slot.gate])
        if init is None:  # the gates a dict leaves out too
            init = fallback.get(argument)
        if init is None:
            continue
        name = slot.name(config)
        if slot.is_bias and not _flax_has_bias(config, slot):
            flat[name] = jnp.zeros(slot.shape, config.dtype)
            continue
        shape = slot.shape if slot.is_bias else slot.shape[::-1]
        if joint and not isinstance(given[argument], Mapping):
            group = (slot.layer, slot.direction, slot.group)
            if group not in drawn:
                wide = (*shape[:-1], shape[-1] * config.num_gates)
                drawn[group] = _draw(init, slot_key, wide, config.dtype, argument, name)
            columns = slice(slot.gate * shape[-1], (slot.gate + 1) * shape[-1])
            value = drawn[group][..., columns]
        else:
            value = _draw(init, slot_key, shape, config.dtype, argument, name)
        flat[name] = (value if slot.is_bias else value.T).astype(config.dtype)
    return parameters.tree(flat)


def _draw(init: Any, key: jax.Array, shape: tuple[int, ...], dtype: Any, argument: str, name: str) -> jax.Array:
    value = jnp.asarray(init(key, shape, dtype))
    if value.shape != shape:
        kind = "bias" if len(shape) == 1 else "kernel [in, out]"
        raise ValueError(f"{argument} returned shape {value.shape} for {name}; expected {shape} (Flax's {kind} shape)")
    return value


# ---------------------------------------------------------------------------------------------------- carries


def tree_fields(tree: Mapping[str, Any]) -> dict[str, Any]:
    """What a module's named parameters say of its network: num_layers, direction, num_units, proj_size, the gates'
    names (sorted) and the dtype (an nnx state's Variables read through their ``value``)."""
    first = tree["layer_0"]
    forward = first["forward"]
    recurrent = forward["w_recurrent"]
    matrix = next(iter(recurrent.values()))
    matrix = getattr(matrix, "value", matrix)
    units, hidden = matrix.shape
    return {
        "num_layers": len(tree),
        "direction": "bidirectional" if "backward" in first else "unidirectional",
        "num_units": units,
        "proj_size": hidden if "w_projection" in forward else 0,
        "gates": tuple(sorted(recurrent)),  # sorted: jax.tree sorts a dict's keys
        "dtype": matrix.dtype,
    }


def _state_of_tree(tree: Mapping[str, Any]) -> tuple[int, int, int, bool, Any]:
    """(num_layers * D, hidden, num_units, whether it has a cell state, dtype) of a module's named parameters."""
    fields = tree_fields(tree)
    stacked = fields["num_layers"] * (2 if fields["direction"] == "bidirectional" else 1)
    hidden = fields["proj_size"] or fields["num_units"]
    return stacked, hidden, fields["num_units"], fields["gates"] == ("f", "g", "i", "o"), fields["dtype"]


def _state_of(node: Any) -> tuple[int, int, int, bool, Any]:
    """(num_layers * D, hidden, num_units, whether it has a cell state, dtype) of an RNNConfig, an RNNParams or a
    module's named parameters."""
    if isinstance(node, (RNNConfig, RNNParams)):
        config = node if isinstance(node, RNNConfig) else node.config
        stacked = config.num_layers * config.num_directions
        return stacked, config.hidden_size, config.num_units, config.has_cell_state, config.dtype
    return _state_of_tree(node)


def is_named_tree(value: Any) -> bool:
    """Whether ``value`` is a module's named parameters: a mapping of ``layer_{l}`` entries."""
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(isinstance(key, str) and key.startswith("layer_") and key[6:].isdigit() for key in value)
    )


def zero_carry(source: Any, batch: int, dtype: Any = None) -> Any:
    """The zero carry for ``batch`` sequences in ``dtype``: Flax's ``(c, h)`` for an LSTM, ``h`` otherwise, with
    h [num_layers*D, batch, hidden] (hidden = proj_size or num_units) and c [num_layers*D, batch, num_units].

    ``source`` says which network: its ``RNNConfig``, its ``RNNParams``, or a parameter tree holding exactly one
    module's parameters (a parent module's ``variables`` or ``variables["params"]``: the named tree under
    ``rnn_params``, or an ``RNNParams``), so a stream through a module nested in another starts from
    ``zero_carry(variables, batch)`` without building the inner module. ``dtype`` defaults to the parameters'; give
    the module's ``dtype`` when it computes in another, so that the first window's carry has the type every later one
    has and a jitted step compiles once (with ``initial_carry=None`` on the first call and arrays after, ``jax.jit``
    traces twice).
    """
    if isinstance(source, (RNNConfig, RNNParams)):
        state = _state_of(source)
    else:
        found: list[tuple[str, Any]] = []

        def visit(path: str, node: Any) -> None:
            if isinstance(node, RNNParams) or is_named_tree(node):
                found.append((path, node))
            elif isinstance(node, Mapping):
                for key, child in node.items():
                    visit(f"{path}[{key!r}]", child)

        visit("", source)
        if len(found) != 1:
            where = f" (at {', '.join(p for p, _ in found)})" if found else ""
            raise ValueError(
                f"source holds {len(found)} RNN modules' parameters{where}; expected an RNNConfig, an RNNParams or a "
                "tree holding exactly one (pass the one you mean, e.g. variables['params']['LSTM_0'])"
            )
        state = _state_of(found[0][1])
    stacked, hidden, units, has_cell_state, own_dtype = state
    batch = check_int("batch", batch, 1)
    dtype = own_dtype if dtype is None else dtype
    h = jnp.zeros((stacked, batch, hidden), dtype)
    return (jnp.zeros((stacked, batch, units), dtype), h) if has_cell_state else h


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
    time_major: bool,
    has_cell_state: bool = False,
    input_size: str = "the module's input size",
    layerless: bool = False,
) -> _checks.ArgumentNames:
    """The words the modules' errors use (``_checks.check_inputs``): their own arguments, x in their layout, the
    carry's parts as ``initial_carry[1]`` (h) and ``initial_carry[0]`` (c) when it holds a cell state (Flax's
    ``(c, h)``); ``input_size`` says what sets x's last axis; ``layerless``: a carry of Flax's cells' [batch, hidden]
    shape (one layer, one direction)."""
    h0, c0 = ("initial_carry[1] (h)", "initial_carry[0] (c)") if has_cell_state else ("initial_carry",) * 2
    return _checks.ArgumentNames(
        params="rnn_params",
        x="x",
        h0=h0,
        c0=c0,
        input_size=input_size,
        dtype=None,
        axes=("time", "batch", "features"),
        state_axes=(None if layerless else "num_layers*num_directions", "num_units"),
        batch_major=not time_major,
        caller="The module",
        layout_fix=f"pass jnp.swapaxes(x, 0, 1), or build the module with time_major={not time_major}",
    )


def _split_carry(initial_carry: Any, config: RNNConfig) -> tuple[Any, Any]:
    """(h0, c0) from ``initial_carry``: Flax's pair ``(c, h)`` for an LSTM, ``h`` alone (c0 None) otherwise."""

    def described(value):
        if isinstance(value, (tuple, list)):
            return f"a {type(value).__name__} of {len(value)}"
        shape = getattr(value, "shape", None)
        return f"an array of shape {tuple(shape)}" if shape is not None else f"a {type(value).__name__}"

    hidden = "proj_size" if config.proj_size else "num_units"
    if config.has_cell_state:
        if not isinstance(initial_carry, (tuple, list)) or len(initial_carry) != 2:
            raise TypeError(
                f"initial_carry is {described(initial_carry)}; mode 'lstm' carries Flax's pair (c, h) of "
                f"[num_layers*num_directions, batch, num_units] and [num_layers*num_directions, batch, {hidden}] "
                "arrays ([batch, ...] each for one layer and one direction, as Flax's cells carry them)"
            )
        return initial_carry[1], initial_carry[0]
    if isinstance(initial_carry, (tuple, list)):
        raise TypeError(
            f"initial_carry is {described(initial_carry)}; mode {config.mode!r} carries h alone, one "
            f"[num_layers*num_directions, batch, {hidden}] array"
        )
    return initial_carry, None


def apply_rnn(
    params: RNNParams | Pieces,
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
    """Runs ``params`` (an ``RNNParams``, or a module's named tensors as ``Parameterization.pieces`` gives them) over x
    ([B, T, I], or [T, B, I] when ``time_major``) in ``compute_dtype`` (x, the carry and the parameters are cast to
    it).

    ``initial_carry``: Flax's ``(c0, h0)`` for an LSTM, ``h0`` otherwise, each [num_layers*D, B, hidden], or
    [B, hidden] as Flax's cells carry them for one layer and one direction; zeros when None. ``seq_lengths``: integers
    [B] in [0, T] (an array or a list). ``resets``: bool [B, T] (or [T, B] when ``time_major``), ``rnn``'s resets;
    ``max_segments``: ``rnn``'s (cuDNN only). Every argument is checked as the caller passed it, before any cast or
    transposition, by ``_checks.check_inputs`` in the module's words (``argument_names``; ``input_size_name``: what set
    the input size, e.g. NNX's ``in_features``).
    Returns y ([B, T, D*H] or time-major), or ``(carry, y)`` with ``return_carry`` (carry shaped like
    ``initial_carry``), as ``flax.linen.RNN`` does.
    """
    config = params.config
    compute_dtype = jnp.dtype(compute_dtype)
    buffer = params if isinstance(params, Pieces) else params.buffer
    if config.dtype != compute_dtype:
        run_config = RNNConfig(**{**config.to_json(), "dtype": compute_dtype.name})
        buffer = buffer.astype(compute_dtype)
    else:
        run_config = config
    lstm = config.has_cell_state
    names = argument_names(time_major, lstm, input_size_name)
    if initial_carry is None:
        initial_carry = zero_carry(run_config, _checks.x_dims(x, names, config.input_size)[1], compute_dtype)
    h0, c0 = _split_carry(initial_carry, config)
    layerless = config.num_layers * config.num_directions == 1 and getattr(h0, "ndim", None) == 2
    if layerless:
        names = argument_names(time_major, lstm, input_size_name, layerless=True)
    if resets is not None:
        resets = jnp.asarray(resets)
    seq_lengths = _checks.as_lengths(seq_lengths)
    # Pieces were checked by their Parameterization
    _checks.check_inputs(
        None if isinstance(buffer, Pieces) else buffer, x, h0, c0, run_config, seq_lengths, resets, names=names
    )
    x = jnp.asarray(x, compute_dtype)
    xs = x if time_major else jnp.swapaxes(x, 0, 1)
    if resets is not None and not time_major:
        resets = resets.T
    h0 = jnp.asarray(h0, compute_dtype)
    c0 = None if c0 is None else jnp.asarray(c0, compute_dtype)
    if layerless:
        h0, c0 = h0[None], (None if c0 is None else c0[None])
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
    if layerless:
        h_n, c_n = h_n[0], (None if c_n is None else c_n[0])
    return ((c_n, h_n) if lstm else h_n), y


def layer_input_size(tree: Mapping[str, Any], num_units: int) -> int:
    """The input size a module's named parameters were made for: the width of layer 0's input matrices (skip input,
    which has none, takes inputs of num_units features)."""
    for name, value in layout.flatten_tree(tree).items():
        if name.startswith("layer_0/forward/w_input/"):
            return int(np.shape(value)[1])
    return num_units
