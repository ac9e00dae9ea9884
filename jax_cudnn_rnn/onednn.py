"""The oneDNN backend's public names (its code: jax_cudnn_rnn/backends/onednn/)."""

from __future__ import annotations

from jax_cudnn_rnn import _deprecated
from jax_cudnn_rnn.backends import registry as _registry
from jax_cudnn_rnn.backends.call import Call as _Call
from jax_cudnn_rnn.backends.onednn import backend as _backend
from jax_cudnn_rnn.backends.onednn import cpu_rule as _cpu_rule
from jax_cudnn_rnn.backends.onednn import extension as _extension
from jax_cudnn_rnn.backends.onednn import tuned as _tuned
from jax_cudnn_rnn.backends.onednn.backend import unsupported_reason
from jax_cudnn_rnn.backends.onednn.extension import (
    cpu_runtime,
    effective_cpu_isa,
    extension_error,
    extension_loaded,
    release_scratch,
)
from jax_cudnn_rnn.config import RNNConfig

__all__ = [
    "DTYPES",
    "MEASUREMENTS",
    "cpu_choice",
    "cpu_runtime",
    "effective_cpu_isa",
    "extension_error",
    "extension_loaded",
    "library_version",
    "release_scratch",
    "tuned_table",
    "unsupported_reason",
]

# The raw pybind11 module is the backend's own (jax_cudnn_rnn.backends.onednn.extension.module).
__getattr__ = _deprecated.module_getattr(
    "jax_cudnn_rnn.onednn",
    {"module": ("jax_cudnn_rnn.backends.onednn.extension", "module", "onednn.cpu_runtime() and the other names here")},
)

#: The dtypes ``implementation="onednn"`` runs (names as ``np.dtype(...).name``).
DTYPES = _backend.DTYPES
#: The measurements the default's rule is fitted to (``cpu_measurements.json``), one entry per CPU measured, each with
#: its model, oneDNN instruction set, cores, and cells (oneDNN's time over the xla implementation's, forward and
#: training step, per shape).
MEASUREMENTS = _cpu_rule.MEASUREMENTS


def cpu_choice(config: RNNConfig, batch: int | None) -> tuple[str, str]:
    """(what runs undifferentiated, what runs under jax.grad) when ``rnn(implementation=None)`` runs a call of
    ``config`` over ``batch`` sequences on this CPU: the registry's choice, e.g. ("onednn", "onednn:plain") or
    ("onednn", "xla") (``jax_cudnn_rnn.implementation_for("cpu", ...)`` names the pair as one string)."""
    choice = _registry.decide("cpu", _Call(config, batch=batch))
    return choice.forward, choice.training


def tuned_table() -> str | None:
    """The path of this machine's tuned table (``jax-cudnn-rnn tune``), which the default's estimates come from where
    it measured the call's mode and dtype, or None where this machine and software have none."""
    return None if _tuned.this_machine() is None else str(_tuned.path_for(_tuned.machine_key()))


def library_version() -> tuple[int, int, int] | None:
    """The version of the oneDNN library the loaded extension runs, as (major, minor, patch), or None when it is not
    loaded."""
    return tuple(_extension.module().onednn_version()) if extension_loaded() else None
