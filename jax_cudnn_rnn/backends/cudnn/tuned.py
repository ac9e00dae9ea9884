"""This machine's own GPU measurements, where its user ran ``jax-cudnn-rnn tune`` on a GPU
(jax_cudnn_rnn/tools/tune.py): one file per GPU kind and software in the user's cache directory, which the GPU rule
(gpu_rule.py) prefers to the shipped measurements for what it measured.

A file holds what it was measured on (``machine_key``: jax's ``device_kind`` of the GPU, the cuDNN library loaded, this
package's and jax's versions) and the measurements; its name is a hash of that key, so that another GPU kind, or the
same one after an upgrade, finds none and uses the shipped measurements until tuned again. It is read once per process
and kind, when a cuDNN call's cost or algorithm is first asked, and written atomically (a temporary file renamed over
it). A run of several JAX processes reads none: each process would read its own machine's table and could run another
program than the others, as ``algorithm="autotune"`` could (jax_cudnn_rnn/backends/cudnn/algorithm.py); the shipped
measurements are the same in every process.
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import jax

from jax_cudnn_rnn.backends import tuned_files
from jax_cudnn_rnn.backends.cudnn import extension
from jax_cudnn_rnn.backends.cudnn.gpu_rule import Measured, as_json, measured_from


def machine_key(kind: str) -> dict[str, Any]:
    """What a tuned table of GPU kind ``kind`` holds for: the kind and the software whose speed it measured."""
    return {
        "device_kind": kind,
        "cudnn": extension.format_cudnn_version(extension.cudnn_version()),
        "jax-cudnn-rnn": tuned_files.version("jax-cudnn-rnn"),
        "jax": jax.__version__,
    }


def path_for(key: dict[str, Any]) -> pathlib.Path:
    """The file of the tuned table for ``key``."""
    return tuned_files.path_for(key, "gpu")


def for_kind(kind: str) -> Measured | None:
    """This machine's tuned table of GPU kind ``kind``, or None: never tuned, tuned with other software, unreadable
    (a warning says so once), or a run of several JAX processes (see the module docstring)."""
    if not kind or jax.process_count() > 1:
        return None
    return _read(kind)


@functools.cache
def _read(kind: str) -> Measured | None:
    key = machine_key(kind)
    return tuned_files.read(path_for(key), key, measured_from, "the shipped measurements")


def path_of(kind: str) -> pathlib.Path | None:
    """The path of this machine's tuned table of GPU kind ``kind`` where ``for_kind`` reads one, else None."""
    return None if for_kind(kind) is None else path_for(machine_key(kind))


def save(measured: Measured) -> pathlib.Path:
    """Writes ``measured`` as this machine's tuned table of its GPU kind (atomically) and returns its path; this
    process uses it from then on."""
    key = machine_key(measured.device_kind)
    path = tuned_files.write(path_for(key), key, as_json(measured))
    _read.cache_clear()
    return path
