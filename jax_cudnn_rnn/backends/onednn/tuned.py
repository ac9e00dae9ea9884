"""This machine's own measurements, where its user ran ``jax-cudnn-rnn tune`` (jax_cudnn_rnn/tools/tune.py): one file
per machine and software in the user's cache directory, which the CPU rule (cpu_rule.py) prefers to the shipped
measurements for what it measured.

A file holds the machine it was measured on (``machine_key``: the CPU model, oneDNN's instruction set, the cores this
process may use, this package's, jax's and oneDNN's versions) and the measurements; its name is a hash of that key, so
that another machine sharing the home directory, or the same machine after an upgrade, finds none and uses the rule
until tuned again. It is read once per process, when the registry first asks what a call costs on oneDNN, and written
atomically (a temporary file renamed over it), so that a process reading it never sees half a file.
"""

from __future__ import annotations

import functools
import os
import pathlib
from typing import Any

import jax

from jax_cudnn_rnn.backends import cpu_info, tuned_files
from jax_cudnn_rnn.backends.onednn import extension
from jax_cudnn_rnn.backends.onednn.cpu_rule import Measured, as_json, measured_from


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's first "model name"), or "" where it cannot be read."""
    return cpu_info.fields().get("model name", "")


def machine_key() -> dict[str, Any]:
    """What a tuned table holds for: this machine and the software whose speed it measured."""
    native = extension.module() if extension.extension_loaded() else None
    return {
        "cpu": cpu_model(),
        "isa": extension.effective_cpu_isa(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "jax-cudnn-rnn": tuned_files.version("jax-cudnn-rnn"),
        "jax": jax.__version__,
        "onednn": None if native is None else ".".join(map(str, native.onednn_version())),
    }


def path_for(key: dict[str, Any]) -> pathlib.Path:
    """The file of the tuned table for ``key``."""
    return tuned_files.path_for(key, "cpu")


@functools.cache
def this_machine() -> Measured | None:
    """This machine's tuned table, or None (never tuned, tuned with other software, or unreadable: then a warning
    says so once and the rule decides)."""
    key = machine_key()
    return tuned_files.read(path_for(key), key, measured_from, "the rule")


def save(measured: Measured) -> pathlib.Path:
    """Writes ``measured`` as this machine's tuned table (atomically) and returns its path; this process uses it from
    then on."""
    key = machine_key()
    path = tuned_files.write(path_for(key), key, as_json(measured))
    this_machine.cache_clear()
    return path
