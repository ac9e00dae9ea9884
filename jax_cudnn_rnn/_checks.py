"""The checks of ``rnn()``'s arguments, shared by every frontend, in each frontend's own words (``ArgumentNames``).

Private: the frontends are in the package and use it; users see only the errors, which name the argument as they
passed it, what was expected and what came.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import RNNConfig, check_config

__all__ = [
    "RNN_ARGUMENTS",
    "ArgumentNames",
    "as_lengths",
    "check_inputs",
    "check_params",
    "check_pieces",
    "x_dims",
    "x_shape_dims",
]


@dataclasses.dataclass(frozen=True)
class ArgumentNames:
    """The words ``check_inputs`` reports errors in: how a frontend calls ``rnn``'s arguments, and its x's layout.

    A frontend (the seed-style classes, the Flax and NNX modules, the Keras layers, the Equinox modules, the
    ``jax.experimental.rnn`` drop-in) validates what its user passed through ``check_inputs(..., names=
    ArgumentNames(...))``, before it converts anything, so that every error names the argument the user passed, in the
    user's layout: ``initial_carry[0] has shape (1, 3, 8); expected (1, 2, 8)``, not ``h0 has shape ...``. One set of
    checks for every frontend; only the words differ.

    Fields:

    * params, x, h0, c0, seq_lengths, resets: what the caller calls them (an expression is fine:
      ``"initial_carry[0]"``).
    * input_size: what sets x's last axis (``"config.input_size"``, ``"in_features"``); params_size: what gives the
      size of params (``"params_size(config)"``, ``"params_size()"``).
    * dtype: what sets the dtype of params, x, h0 and c0 (``"config.dtype"``, ``"the model's dtype"``), or None for a
      frontend that casts x, h0 and c0 to it itself (then only that they are arrays is checked for those three).
    * axes: the words for x's time, batch and feature axes, in that order whatever the layout. A batch word of None
      is an unbatched frontend (an Equinox module, which ``jax.vmap`` batches): x is [time, features], h0 and c0
      have no batch axis and seq_lengths is one length, a scalar.
    * state_axes: the words for the first and the last axis of h0 and c0 (their middle one is the batch). A first
      word of None is a frontend whose network has one layer and one direction (a Keras layer): h0 and c0 are then
      [batch, hidden] without the layer axis. The last word is replaced by ``"proj_size"`` in h0's shape for a
      projected LSTM.
    * batch_major: x is [B, T, features] and resets [B, T] (else time-major: [T, B, features], [T, B]).
    * caller: who takes x, starting a sentence (``"rnn()"``, ``"The module"``), and layout_fix: how to pass an x
      given in the other layout; both complete the error that blames x, rather than h0, when h0's batch is x's
      time axis. For an unbatched frontend, layout_fix says how to run a batch (``"jax.vmap the model over a
      batch"``) when x comes with one axis too many.

    ``rnn(argument_names=...)`` takes time-major, batched names (a frontend that calls ``rnn`` with its own arguments
    as they came); any other frontend calls ``check_inputs`` itself, then reshapes or transposes and calls ``rnn``.
    """

    params: str = "params"
    x: str = "x"
    h0: str = "h0"
    c0: str = "c0"
    seq_lengths: str = "seq_lengths"
    resets: str = "resets"
    input_size: str = "config.input_size"
    params_size: str = "params_size(config)"
    dtype: str | None = "config.dtype"
    axes: tuple[str, str | None, str] = ("max_time", "batch", "input_size")
    state_axes: tuple[str | None, str] = ("num_layers*num_directions", "num_units")
    batch_major: bool = False
    caller: str = "rnn()"
    layout_fix: str = "pass jnp.swapaxes(x, 0, 1) (the Flax modules take batch-major x unless time_major=True)"

    @property
    def batched(self) -> bool:
        """Whether x, h0, c0 and seq_lengths have a batch axis (False: an unbatched frontend, ``axes[1]`` None)."""
        return self.axes[1] is not None

    def x_layout(self, input_size: Any = None) -> tuple[str, str]:
        """(x's axes in words, in the caller's order; the same as letters, the features as ``input_size`` when
        given): ``("(max_time, batch, input_size)", "(T, B, 4)")``; unbatched ``("(time, input_size)", "(T, 4)")``."""
        time, batch, features = self.axes
        last = features if input_size is None else input_size
        if batch is None:
            return f"({time}, {features})", f"(T, {last})"
        letters = ("B", "T") if self.batch_major else ("T", "B")
        words = (batch, time) if self.batch_major else (time, batch)
        return f"({words[0]}, {words[1]}, {features})", f"({letters[0]}, {letters[1]}, {last})"

    def state(self, shape: tuple[int, ...], last_word: str) -> tuple[tuple[int, ...], str]:
        """(the caller's shape of a state that ``rnn`` shapes ``shape`` = [num_layers*D, B, hidden], the same in
        words with ``last_word`` for the last axis): the axes the caller's state lacks are left out."""
        present = (self.state_axes[0] is not None, self.batched, True)
        words = (self.state_axes[0], self.axes[1], last_word)
        kept = tuple(n for n, keep in zip(shape, present, strict=True) if keep)
        return kept, "(" + ", ".join(w for w, keep in zip(words, present, strict=True) if keep) + ")"


#: ``rnn()``'s own words: its argument names, time-major x.
RNN_ARGUMENTS = ArgumentNames()


def _shape_of(argument: str, value: Any) -> tuple[int, ...]:
    shape = getattr(value, "shape", None)
    if shape is None or not hasattr(value, "dtype"):
        raise TypeError(f"{argument} must be an array, got {type(value).__name__}")
    return tuple(shape)


def _check_array(
    argument: str, value: Any, expected_shape: tuple[int, ...], meaning: str, dtype: np.dtype, dtype_source: str | None
) -> None:
    """Shape, then dtype unless ``dtype_source`` (what sets the dtype, for the message) is None."""
    shape = _shape_of(argument, value)
    if shape != expected_shape:
        raise ValueError(f"{argument} has shape {shape}; expected {expected_shape} = {meaning}")
    if dtype_source is not None and np.dtype(value.dtype) != dtype:
        raise TypeError(f"{argument} has dtype {np.dtype(value.dtype).name}; expected {dtype.name} ({dtype_source})")


def as_lengths(seq_lengths: Any) -> Any:
    """``seq_lengths`` as an array for ``check_inputs``: a list or tuple (or, for an unbatched caller, one Python or
    NumPy integer) becomes a NumPy array; anything else is returned as it is. ``check_inputs`` then checks that the
    lengths are integers (of any width: NumPy's default int64 too) in range, and the caller converts them to int32."""
    if isinstance(seq_lengths, (list, tuple, int, np.integer)) and not isinstance(seq_lengths, bool):
        return np.asarray(seq_lengths)
    return seq_lengths


def _is_concrete(value: Any) -> bool:
    return not isinstance(value, jax.core.Tracer)


def _check_flags(argument: str, flags: Any) -> None:
    """Reset flags as ``jnp.where`` takes a condition: bool, or integers or floats that are 0 or 1 (checked where
    concrete; ``ops.run_checked`` converts them with ``!= 0``)."""
    dtype = np.dtype(flags.dtype)
    if dtype == np.bool_:
        return
    if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
        raise TypeError(f"{argument} has dtype {dtype.name}; expected bool, or integer or float flags 0 and 1")
    if _is_concrete(flags):
        values = np.asarray(flags)
        bad = np.argwhere((values != 0) & (values != 1))
        if bad.size:
            where = "[" + ", ".join(str(i) for i in bad[0]) + "]"
            raise ValueError(f"{argument}{where} is {values[tuple(bad[0])]}; expected a flag, 0 or 1 (or bool)")


def x_shape_dims(
    shape: tuple[Any, ...], names: ArgumentNames = RNN_ARGUMENTS, input_size: int | None = None
) -> tuple[Any, Any, Any]:
    """(time steps, batch, features) of an x of ``shape`` in the caller's layout (batch 1 for an unbatched caller),
    after checking its rank, that it has at least one step and one sequence, and, when ``input_size`` is given, that
    its last axis is that. For a frontend that sees x's shape before x (Keras's ``build``); axes of unknown size
    (None) pass."""
    shape = tuple(shape)
    words, letters = names.x_layout(input_size)
    rank = 3 if names.batched else 2
    if len(shape) != rank:
        hint = f" ({names.layout_fix})" if not names.batched and len(shape) == rank + 1 else ""
        raise ValueError(
            f"{names.x} has shape {shape}; expected rank {rank} {words}"
            + ("" if input_size is None else f" = {letters}")
            + hint
        )
    if not names.batched:
        num_steps, batch = shape[0], 1
    else:
        num_steps, batch = (shape[1], shape[0]) if names.batch_major else (shape[0], shape[1])
    if input_size is not None and shape[-1] is not None and shape[-1] != input_size:
        raise ValueError(f"{names.x} has shape {shape}; expected {letters}: its last axis must be {names.input_size}")
    if num_steps == 0 or batch == 0:
        subject = f"{names.axes[0]} and {names.axes[1]}" if names.batched else names.axes[0]
        raise ValueError(f"{names.x} has shape {shape}; {subject} must be at least 1")
    return num_steps, batch, shape[-1]


def x_dims(x: Any, names: ArgumentNames = RNN_ARGUMENTS, input_size: int | None = None) -> tuple[int, int, int]:
    """(time steps, batch, features) of x in the caller's layout (batch 1 for an unbatched caller), after checking
    that x is an array of rank 3 (2 unbatched) with at least one step and one sequence, and, when ``input_size`` is
    given, that its last axis is that. The first of ``check_inputs``' checks, for a frontend that needs x's sizes
    before it has a config (a module that takes its input size from x at init). A symbolic dimension (``jax.export``'s
    shape polymorphism) is a ValueError: every implementation plans a call from its concrete sizes."""
    shape = _shape_of(names.x, x)
    symbolic = [str(d) for d in shape if not isinstance(d, int | np.integer)]
    if symbolic:
        raise ValueError(
            f"{names.x} has shape ({', '.join(map(str, shape))}) with the symbolic dimension(s) "
            f"{', '.join(symbolic)} (jax.export's shape polymorphism), but the recurrent network's implementations "
            f"plan each call from concrete sizes (the time steps and the batch choose the kernels and size their "
            f"buffers): export with concrete shapes, one artifact per shape"
        )
    return x_shape_dims(shape, names, input_size)


def _check_layout(x_shape: tuple[int, ...], h0: Any, names: ArgumentNames) -> None:
    """Blames x, not h0, when h0's batch axis matches x's time axis instead of its batch axis: x is then most likely
    in the other layout (batch-major [B, T, I] given to rnn(), the layout of the Flax modules and of
    ``flax.linen.RNN``; or time-major given to a batch-major module)."""
    if not names.batched:
        return
    h0_shape = getattr(h0, "shape", None)
    state_batch = 0 if names.state_axes[0] is None else 1
    time_axis, batch_axis = (1, 0) if names.batch_major else (0, 1)
    if (
        h0_shape is None
        or len(h0_shape) != state_batch + 2
        or h0_shape[state_batch] == x_shape[batch_axis]
        or h0_shape[state_batch] != x_shape[time_axis]
    ):
        return
    layout, other = ("batch-major", "time-major") if names.batch_major else ("time-major", "batch-major")
    _, letters = names.x_layout()
    _, other_letters = dataclasses.replace(names, batch_major=not names.batch_major).x_layout()
    raise ValueError(
        f"{names.x} has shape {x_shape} and {names.h0} {tuple(h0_shape)}: {names.h0}'s batch is "
        f"{h0_shape[state_batch]}, {names.x}'s {('first', 'second')[time_axis]} axis. {names.caller} "
        f"takes {layout} {names.x} [{letters[1:-1]}]; {names.x} looks {other} [{other_letters[1:-1]}]: "
        f"{names.layout_fix}"
    )


def check_params(params: Any, config: RNNConfig, names: ArgumentNames = RNN_ARGUMENTS) -> None:
    """Raises ValueError/TypeError unless ``params`` is a 1-D array of ``params_size(config)`` elements of
    ``config.dtype``, naming it as ``names`` does (``check_inputs``' check of params, for a frontend that takes the
    buffer alone, as ``jax.experimental.rnn.unpack_lstm_weights`` does)."""
    _check_array(
        names.params,
        params,
        (layout.params_size(config),),
        f"({names.params_size},)",
        config.dtype,
        names.dtype or "config.dtype",
    )


def check_pieces(pieces: Any, config: RNNConfig) -> None:
    """Raises ValueError/TypeError unless ``pieces`` (a frontend's named tensors on their way to an implementation,
    ``_buffer.Pieces``) are pieces of ``config``'s buffer, each of its slot's size and of ``config.dtype``: what
    ``check_params`` is for the buffer. A frontend casts its parameters to the module's dtype before (its
    ``Parameterization.pieces``), so that only a caller that builds Pieces itself meets these errors."""
    if pieces.config != config:
        raise ValueError(f"params are the pieces of {pieces.config}, but config is {config}")
    for slot, array in zip(pieces.slots, pieces.arrays, strict=True):
        name = f"params['{slot.name(config)}']"
        size = int(np.prod(_shape_of(name, array)))
        if size != slot.size:
            raise ValueError(f"{name} has shape {tuple(array.shape)}; expected {slot.size} elements {slot.shape}")
        if np.dtype(array.dtype) != config.dtype:
            raise TypeError(
                f"{name} has dtype {np.dtype(array.dtype).name}; expected {config.dtype.name} (config.dtype)"
            )


def check_inputs(
    params: Any,
    x: Any,
    h0: Any,
    c0: Any,
    config: RNNConfig,
    seq_lengths: Any = None,
    resets: Any = None,
    names: ArgumentNames = RNN_ARGUMENTS,
) -> None:
    """Raises ValueError/TypeError naming the first argument whose type, shape, dtype or value is wrong, in the words
    and the layout of ``names`` (``rnn``'s own by default; see ``ArgumentNames`` for a frontend's).

    ``params`` None is a frontend that builds the buffer itself (a Keras layer, from its variables): it is not
    checked here (``rnn`` checks it). For an unbatched frontend (``names.axes[1]`` None) x is [T, features], h0 and c0
    [num_layers*D, hidden], seq_lengths a scalar and resets [T]; for one without the layer axis
    (``names.state_axes[0]`` None, only for a config of one layer and one direction) h0 and c0 are [batch, hidden].
    """
    check_config(config)
    if config.dtype == np.float64 and not jax.config.jax_enable_x64:
        raise TypeError(
            "config.dtype is float64 but jax_enable_x64 is off; enable it with "
            "jax.config.update('jax_enable_x64', True)"
        )
    if names.state_axes[0] is None and config.num_layers * config.num_directions != 1:
        raise ValueError(
            f"names.state_axes[0] is None (states without a layer axis), but the config has "
            f"{config.num_layers} layer(s) and {config.num_directions} direction(s); expected one of each"
        )
    num_steps, batch, _ = x_dims(x, names, config.input_size)
    if names.dtype is not None and np.dtype(x.dtype) != config.dtype:
        raise TypeError(f"{names.x} has dtype {np.dtype(x.dtype).name}; expected {config.dtype.name} ({names.dtype})")
    if params is not None:
        check_params(params, config, names)
    _check_layout(tuple(x.shape), h0, names)
    shape, meaning = names.state(config.state_shape(batch), "proj_size" if config.proj_size else names.state_axes[1])
    _check_array(names.h0, h0, shape, meaning, config.dtype, names.dtype)
    if config.has_cell_state:
        shape, meaning = names.state(config.cell_shape(batch), names.state_axes[1])
        if c0 is None:
            raise ValueError(
                f"{names.c0} is None; mode 'lstm' needs an initial cell state of shape {shape} = {meaning}"
            )
        _check_array(names.c0, c0, shape, meaning, config.dtype, names.dtype)
    elif c0 is not None:
        raise ValueError(f"{names.c0} was given but mode {config.mode!r} has no cell state; pass {names.c0}=None")
    time_word, batch_word, _ = names.axes
    if resets is not None:
        shape = _shape_of(names.resets, resets)
        if not names.batched:
            expected, words = (num_steps,), f"({time_word},)"
        elif names.batch_major:
            expected, words = (batch, num_steps), f"({batch_word}, {time_word})"
        else:
            expected, words = (num_steps, batch), f"({time_word}, {batch_word})"
        if shape != expected:
            what = "the first two axes" if names.batched else "the first axis"
            raise ValueError(f"{names.resets} has shape {shape}; expected {expected} = {words}, {what} of {names.x}")
        _check_flags(names.resets, resets)
    if seq_lengths is None:
        return
    shape = _shape_of(names.seq_lengths, seq_lengths)
    if not names.batched:
        if shape != ():
            raise ValueError(
                f"{names.seq_lengths} has shape {shape}; expected () (one sequence's length; {names.layout_fix})"
            )
    elif shape != (batch,):
        raise ValueError(f"{names.seq_lengths} has shape {shape}; expected ({batch},) = ({batch_word},)")
    if not np.issubdtype(np.dtype(seq_lengths.dtype), np.integer):  # a cast would truncate 2.7 to 2 without a word
        raise TypeError(
            f"{names.seq_lengths} has dtype {np.dtype(seq_lengths.dtype).name}; expected "
            f"{'integers' if names.batched else 'an integer'} (int32 or another integer type, converted after the "
            "range check)"
        )
    if _is_concrete(seq_lengths):
        lengths = np.asarray(seq_lengths).reshape(-1)
        bad = np.flatnonzero((lengths < 0) | (lengths > num_steps))
        if bad.size:
            which = f"{names.seq_lengths}[{bad[0]}]" if names.batched else names.seq_lengths
            raise ValueError(
                f"{which} is {lengths[bad[0]]}; every length must be in [0, {num_steps}] = [0, {time_word}]"
            )
