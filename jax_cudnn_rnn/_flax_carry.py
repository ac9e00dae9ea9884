"""Flax's carries on this library's states: what the linen and NNX modules take as ``initial_carry`` and return with
``return_carry``, and ``rnn()``'s h and c [num_layers*D, batch, hidden] they stand for.

An LSTM carries Flax's ``(c, h)``, the other modes ``h``, in one of three forms:

* ``CELL``: a network of one layer and one direction carries what its Flax cell carries, arrays [batch..., hidden]
  (``nn.RNN(nn.LSTMCell(H))``'s carry; [hidden] for an unbatched sequence);
* ``PAIR``: one bidirectional layer carries what ``nn.Bidirectional`` carries, the forward cell's carry and the backward
  one's: ``((c_f, h_f), (c_b, h_b))`` for an LSTM, ``(h_f, h_b)`` otherwise;
* ``STACKED``: every network may carry ``rnn()``'s states [num_layers*D, batch..., hidden] (index layer*D + direction),
  a stack of layers only these, as Flax has no one layer for a stack.

A module returns the form it was given, its own (``native_form``: the first that fits) when it started from zeros.

Private: the modules' call (jax_cudnn_rnn/_flax_apply.py) and their ``initialize_carry``/``zero_carry`` use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from jax_cudnn_rnn import _flax_core
from jax_cudnn_rnn.config import RNNConfig, check_int
from jax_cudnn_rnn.params import RNNParams

CELL, PAIR, STACKED = "cell", "pair", "stacked"


def native_form(config: RNNConfig) -> str:
    """The carry's form of a module that starts from zeros: the cell's for one layer and one direction,
    ``nn.Bidirectional``'s for one bidirectional layer, the stacked states for a stack."""
    if config.num_layers == 1:
        return CELL if config.num_directions == 1 else PAIR
    return STACKED


def from_states(h: Any, c: Any, config: RNNConfig, form: str) -> Any:
    """The carry in ``form`` of states h [L*D, batch..., hidden] and c (None unless an LSTM)."""
    lstm = config.has_cell_state
    if form == STACKED:
        return (c, h) if lstm else h
    if form == CELL:
        return (c[0], h[0]) if lstm else h[0]
    return tuple((c[d], h[d]) if lstm else h[d] for d in range(2))


def zeros(config: RNNConfig, batch_dims: tuple[int, ...], dtype: Any, form: str | None = None) -> Any:
    """The zero carry for sequences of batch axes ``batch_dims`` (() for one unbatched sequence) in ``form`` (None:
    ``native_form``)."""
    stacked = config.num_layers * config.num_directions
    h = jnp.zeros((stacked, *batch_dims, config.hidden_size), dtype)
    c = jnp.zeros((stacked, *batch_dims, config.num_units), dtype) if config.has_cell_state else None
    return from_states(h, c, config, form or native_form(config))


def _described(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    shape = getattr(value, "shape", None)
    return f"an array of shape {tuple(shape)}" if shape is not None else f"a {type(value).__name__}"


def expected(config: RNNConfig) -> str:
    """The carries a module of ``config`` takes, in words (for the messages)."""
    hidden = "proj_size" if config.proj_size else "num_units"
    if config.has_cell_state:
        one = "(c, h), each [*batch, num_units]" + (f" (h [*batch, {hidden}])" if config.proj_size else "")
        stacked = f"(c, h) of [num_layers*num_directions, *batch, num_units] and [..., {hidden}] arrays"
    else:
        one = f"h [*batch, {hidden}]"
        stacked = f"h [num_layers*num_directions, *batch, {hidden}]"
    if config.num_layers > 1:
        return stacked
    if config.num_directions == 1:
        return f"the cell's carry {one}, or {stacked}"
    return f"nn.Bidirectional's (forward, backward) carries, each the cell's {one}, or {stacked}"


def form_of(carry: Any, config: RNNConfig, batch_rank: int) -> str:
    """The form of a given ``carry`` for inputs of ``batch_rank`` batch axes, after checking its structure (a
    TypeError says what the module takes); the arrays' shapes are the caller's to check."""
    lstm = config.has_cell_state
    pair = config.num_layers == 1 and config.num_directions == 2
    is_pair = isinstance(carry, (tuple, list)) and len(carry) == 2
    if lstm:
        if not is_pair:
            raise TypeError(
                f"initial_carry is {_described(carry)}; mode 'lstm' carries Flax's pair (c, h): {expected(config)}"
            )
        if pair and isinstance(carry[0], (tuple, list)):
            for d in range(2):
                if not (isinstance(carry[d], (tuple, list)) and len(carry[d]) == 2):
                    raise TypeError(f"initial_carry[{d}] is {_described(carry[d])}; expected {expected(config)}")
            return PAIR
        h = carry[1]
    else:
        if pair and is_pair:
            return PAIR
        if isinstance(carry, (tuple, list)):
            raise TypeError(
                f"initial_carry is {_described(carry)}; mode {config.mode!r} carries h alone: {expected(config)}"
            )
        h = carry
    if config.num_layers * config.num_directions == 1 and getattr(h, "ndim", None) == batch_rank + 1:
        return CELL
    return STACKED


def parts(carry: Any, config: RNNConfig, form: str) -> list[tuple[str, Any, str]]:
    """[(how the message names it, array, "h" or "c")] of a carry in ``form``."""
    lstm = config.has_cell_state
    if form == PAIR:
        found = []
        for d, direction in enumerate(("forward", "backward")):
            if lstm:
                found += [(f"initial_carry[{d}][0] (c, {direction})", carry[d][0], "c")]
                found += [(f"initial_carry[{d}][1] (h, {direction})", carry[d][1], "h")]
            else:
                found += [(f"initial_carry[{d}] ({direction})", carry[d], "h")]
        return found
    if lstm:
        return [("initial_carry[0] (c)", carry[0], "c"), ("initial_carry[1] (h)", carry[1], "h")]
    return [("initial_carry", carry, "h")]


def states(carry: Any, config: RNNConfig, form: str, batch_dims: tuple[int, ...]) -> tuple[Any, Any]:
    """(h, c) as given in ``CELL``'s [batch..., hidden] and ``STACKED``'s [L*D, batch..., hidden] (the caller's check
    sees them as they came), ``PAIR``'s two directions stacked after checking each is [batch..., hidden] (c:
    num_units), a ValueError naming the part; c None unless an LSTM."""
    found: dict[str, list[Any]] = {"h": [], "c": []}
    for name, array, kind in parts(carry, config, form):
        if form == PAIR:
            width = config.hidden_size if kind == "h" else config.num_units
            want = (*batch_dims, width)
            shape = getattr(array, "shape", None)
            if shape is None or not hasattr(array, "dtype"):
                raise TypeError(f"{name} must be an array, got {type(array).__name__}")
            if tuple(shape) != want:
                raise ValueError(f"{name} has shape {tuple(shape)}; expected {want} = (*batch, {_width(config, kind)})")
        found[kind].append(array)
    if form == PAIR:
        return jnp.stack(found["h"]), (jnp.stack(found["c"]) if found["c"] else None)
    return found["h"][0], (found["c"][0] if found["c"] else None)


def _width(config: RNNConfig, kind: str) -> str:
    return "proj_size" if kind == "h" and config.proj_size else "num_units"


# ---------------------------------------------------------------------------------------------- from parameters


def zero_carry(source: Any, batch: Any, dtype: Any = None) -> Any:
    """The zero carry for ``batch`` sequences (an int, or a tuple of batch axes, () for one unbatched sequence) in
    ``dtype``, in the form a module of the network returns (Flax's ``(c, h)`` for an LSTM, ``h`` otherwise): a
    network of one layer and one direction the cell's [batch..., hidden] arrays, one bidirectional layer
    ``nn.Bidirectional``'s pair of them, a stack [num_layers*D, batch..., hidden] (hidden = proj_size or num_units; c's
    last axis num_units).

    ``source`` says which network: its ``RNNConfig``, its ``RNNParams``, or a parameter tree holding exactly one
    module's parameters (a parent module's ``variables`` or ``variables["params"]``: the named tree under
    ``rnn_params``, or an ``RNNParams``), so a stream through a module nested in another starts from
    ``zero_carry(variables, batch)`` without building the inner module. ``dtype`` defaults to the parameters'; give
    the module's ``dtype`` when it computes in another, so that the first window's carry has the type every later one
    has and a jitted step compiles once (with ``initial_carry=None`` on the first call and arrays after, ``jax.jit``
    traces twice).
    """
    if isinstance(source, (RNNConfig, RNNParams)):
        config = source if isinstance(source, RNNConfig) else source.config
    else:
        found: list[tuple[str, Any]] = []

        def visit(path: str, node: Any) -> None:
            if isinstance(node, RNNParams) or _flax_core.is_named_tree(node):
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
        node = found[0][1]
        config = node.config if isinstance(node, RNNParams) else _flax_core.tree_config(node)
    batch_dims = tuple(batch) if isinstance(batch, (tuple, list)) else (check_int("batch", batch, 1),)
    for size in batch_dims:
        check_int("batch", size, 1)
    return zeros(config, batch_dims, config.dtype if dtype is None else dtype)


def step_shape(input_shape: Any, time_major: bool) -> tuple[tuple[int, ...], int]:
    """(batch axes, features) of ``input_shape``: one step's input (batch..., features), as Flax's cells'
    ``initialize_carry`` takes it (rank 1 or 2), or the whole input's ([batch..., T, features], time-major
    [T, batch..., features]; rank 3 or more)."""
    shape = tuple(input_shape)
    if len(shape) in (1, 2):
        return shape[:-1], shape[-1]
    if len(shape) >= 3:
        return (shape[1:-1] if time_major else shape[:-2]), shape[-1]
    raise ValueError(
        f"input_shape is {shape}; expected one step's input shape (*batch, features), as for Flax's cells, or the "
        f"whole input's ({'time, *batch' if time_major else '*batch, time'}, features)"
    )
