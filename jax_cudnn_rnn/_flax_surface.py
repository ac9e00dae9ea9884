"""``nn.RNN``'s and ``nnx.RNN``'s arguments on the linen and NNX modules: those a fused network honours as Flax does,
and those it cannot, refused with what to do instead (a TypeError or ValueError naming the argument).

Private: jax_cudnn_rnn/flax.py and jax_cudnn_rnn/nnx.py check their fields with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

#: ``nn.RNN``'s arguments of ``nn.scan`` and their defaults, which the fused network is: its parameters broadcast
#: over time ('params' not split), no variable scanned or carried. nnx.RNN's ``state_axes`` and
#: ``broadcast_rngs``: None.
SCAN_DEFAULTS = {
    "linen": {
        "variable_axes": {},
        "variable_broadcast": "params",
        "variable_carry": False,
        "split_rngs": {"params": False},
    },
    "nnx": {"state_axes": None, "broadcast_rngs": None},
}


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def check_scan_options(library: str, owner: str, **given: Any) -> None:
    """Refuses a value of ``nn.RNN``'s (``nnx.RNN``'s) scan arguments other than its default: those ask ``nn.scan`` to
    scan, carry or split what the cell holds beside its parameters, which a fused kernel cannot run."""
    prefix = "nn" if library == "linen" else "nnx"
    for name, value in given.items():
        default = SCAN_DEFAULTS[library][name]
        if _plain(value) != default:
            raise ValueError(
                f"{name} is {value!r}; {owner} runs its cell's arithmetic in one fused kernel, with the parameters "
                f"broadcast over time and nothing else scanned, carried or split ({name}={default!r}, nn.RNN's "
                f"default). For a cell whose variables or random streams the scan must handle, keep {prefix}.RNN"
            )


def check_unroll(unroll: Any) -> int:
    """``unroll``, nn.RNN's: an int >= 1, accepted and without effect (the fused kernels run every step of the
    sequence in one call; Flax's results do not depend on it either)."""
    if isinstance(unroll, bool) or not isinstance(unroll, (int, np.integer)) or unroll < 1:
        raise ValueError(f"unroll is {unroll!r}; expected an int >= 1 (nn.RNN's; the fused kernels need none)")
    return int(unroll)


def check_flags(owner: str, **flags: Any) -> None:
    """``time_major``, ``return_carry``, ``reverse``, ``keep_order`` as fields: Python bools (they choose the
    computation)."""
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} is a {type(value).__name__}; {owner} takes a Python bool, as nn.RNN does")


def choose(name: str, call: Any, field: Any) -> bool:
    """A call's override of a field (``nn.RNN``'s rule: None keeps the field's value), checked to be a bool."""
    value = field if call is None else call
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} is a {type(value).__name__}; expected None or a Python bool")
    return bool(value)


def check_cell_fields(owner: str, cell_kind: str, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Refuses the fields that a module built from a cell takes from that cell or cannot have (one layer, one
    direction, the cell's sizes, dtypes, initializers and biases) when they differ from their defaults."""
    differing = [name for name, value in given.items() if value is not defaults[name] and value != defaults[name]]
    if differing:
        settings = ", ".join(f"{name}={given[name]!r}" for name in differing)
        raise ValueError(
            f"{owner} built from a {cell_kind} runs that one cell over time as nn.RNN does: its sizes, dtypes, "
            f"initializers and biases are the cell's, and it is one layer in one direction; {settings} "
            f"contradict{'s' if len(differing) == 1 else ''} that. Set them on the cell, or build the module by "
            f"size for a network of cuDNN's options (e.g. LSTM(64, num_layers=2, direction='bidirectional'))"
        )
