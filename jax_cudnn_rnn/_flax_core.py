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

from jax_cudnn_rnn import _checks, layout
from jax_cudnn_rnn._parameterization import Parameterization, library_biases
from jax_cudnn_rnn.config import MODES, RNNConfig


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


def tree_config(tree: Mapping[str, Any]) -> RNNConfig:
    """The ``RNNConfig`` of a module's named parameters (its mode from the gates' names; bias mode and the rest at
    their defaults): what its carry's shapes follow."""
    fields = tree_fields(tree)
    modes = {("f", "g", "i", "o"): "lstm", ("n", "r", "z"): "gru", ("h",): "rnn_tanh"}
    return RNNConfig(
        mode=modes[fields["gates"]],
        num_layers=fields["num_layers"],
        num_units=fields["num_units"],
        input_size=layer_input_size(tree, fields["num_units"]),
        direction=fields["direction"],
        proj_size=fields["proj_size"],
        dtype=fields["dtype"],
    )


def is_named_tree(value: Any) -> bool:
    """Whether ``value`` is a module's named parameters: a mapping of ``layer_{l}`` entries."""
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(isinstance(key, str) and key.startswith("layer_") and key[6:].isdigit() for key in value)
    )


def argument_names(
    time_major: bool,
    has_cell_state: bool = False,
    input_size: str = "the module's input size",
    layerless: bool = False,
    batched: bool = True,
) -> _checks.ArgumentNames:
    """The words the modules' errors use (``_checks.check_inputs``): their own arguments, x in their layout, the
    carry's parts as ``initial_carry[1]`` (h) and ``initial_carry[0]`` (c) when it holds a cell state (Flax's
    ``(c, h)``); ``input_size`` says what sets x's last axis; ``layerless``: a carry of Flax's cells' [batch, hidden]
    shape (one layer, one direction); ``batched`` False: one unbatched sequence x [time, features], as ``nn.RNN``
    takes it (the carry without a batch axis, ``seq_lengths`` a scalar, ``resets`` [time])."""
    h0, c0 = ("initial_carry[1] (h)", "initial_carry[0] (c)") if has_cell_state else ("initial_carry",) * 2
    fix = f"pass jnp.swapaxes(x, 0, 1), or build the module with time_major={not time_major}"
    return _checks.ArgumentNames(
        params="rnn_params",
        x="x",
        h0=h0,
        c0=c0,
        input_size=input_size,
        dtype=None,
        axes=("time", "batch" if batched else None, "features"),
        state_axes=(None if layerless else "num_layers*num_directions", "num_units"),
        batch_major=not time_major,
        caller="The module",
        layout_fix=fix
        if batched
        else "x is one sequence [time, features]; a batch of them is x [batch, time, features]",
    )


def layer_input_size(tree: Mapping[str, Any], num_units: int) -> int:
    """The input size a module's named parameters were made for: the width of layer 0's input matrices (skip input,
    which has none, takes inputs of num_units features)."""
    for name, value in layout.flatten_tree(tree).items():
        if name.startswith("layer_0/forward/w_input/"):
            return int(np.shape(value)[1])
    return num_units
