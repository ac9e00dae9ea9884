"""``Supports``: what a backend runs, as it declares it to the registry (jax_cudnn_rnn/backends/registry.py), and what a
call needs that it lacks, in the words every error and ``jax-cudnn-rnn info`` repeat."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.cells import activations


@dataclasses.dataclass(frozen=True)
class Supports:
    """What a backend runs, stated once; ``why_not(call)`` says what a call needs that it lacks.

    label: how messages name what lacks a feature ("oneDNN's RNN primitives").
    modes, dtypes: the modes and dtype names it runs; None for every one.
    seq_lengths, resets, cell_clip: whether it runs calls with per-sequence lengths, with resets, with a clipped cell.
    activations: whether it runs other activations than the cells' own (``RNNConfig.activation``,
      ``recurrent_activation``).
    recurrent_dropout: whether it runs calls that apply recurrent dropout (``Call.recurrent_dropout``).
    other: the rules only this backend has (``other(call)``: what the call lacks, or None).
    """

    label: str
    modes: tuple[str, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    seq_lengths: bool = True
    resets: bool = True
    cell_clip: bool = True
    activations: bool = True
    recurrent_dropout: bool = True
    other: Callable[[Call], str | None] = lambda call: None

    def why_not(self, call: Call) -> str | None:
        """What ``call`` needs that these do not give, or None. A call without a config (``implementation_for``
        asking about a platform in general) is only checked for what it says."""
        if call.resets and not self.resets:
            return f"no resets ({self.label} cannot zero the state mid-sequence)"
        if call.seq_lengths and not self.seq_lengths:
            return f"no per-sequence lengths (seq_lengths), which {self.label} do not take"
        if call.recurrent_dropout and not self.recurrent_dropout:
            return (
                f"no recurrent dropout in training (recurrent_dropout > 0 with is_training=True), which {self.label} "
                "do not have"
            )
        config = call.config
        if config is None:
            return None
        if self.modes is not None and config.mode not in self.modes:
            return f"mode {' or '.join(map(repr, self.modes))}: {self.label} do not run {config.mode!r}"
        if self.dtypes is not None and config.dtype.name not in self.dtypes:
            return f"{' or '.join(self.dtypes)}: {self.label} do not run {config.dtype.name}"
        if config.cell_clip is not None and not self.cell_clip:
            return f"no cell clipping (cell_clip), which {self.label} do not have"
        if not config.default_activations and not self.activations:
            given = [
                f"{name}={activations.activation_name(value)}"
                for name in ("activation", "recurrent_activation")
                if (value := getattr(config, name)) is not None
            ]
            own = "the cell's own activations (activation=None, recurrent_activation=None)"
            return f"{own}: {self.label} do not run {', '.join(given)}"
        return self.other(call)
