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
import hashlib
import importlib.metadata
import json
import os
import pathlib
import tempfile
import warnings
from typing import Any

import jax

from jax_cudnn_rnn.backends.onednn import extension
from jax_cudnn_rnn.backends.onednn.cpu_rule import Measured, as_json, measured_from


def cache_dir() -> pathlib.Path:
    """Where tuned tables live: ``$XDG_CACHE_HOME/jax-cudnn-rnn``, or ``~/.cache/jax-cudnn-rnn``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "jax-cudnn-rnn"


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's first "model name"), or "" where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return ""


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_key() -> dict[str, Any]:
    """What a tuned table holds for: this machine and the software whose speed it measured."""
    native = extension.module() if extension.extension_loaded() else None
    return {
        "cpu": cpu_model(),
        "isa": extension.effective_cpu_isa(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "jax-cudnn-rnn": _version("jax-cudnn-rnn"),
        "jax": jax.__version__,
        "onednn": None if native is None else ".".join(map(str, native.onednn_version())),
    }


def path_for(key: dict[str, Any]) -> pathlib.Path:
    """The file of the tuned table for ``key``."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"cpu-{digest}.json"


@functools.cache
def this_machine() -> Measured | None:
    """This machine's tuned table, or None (never tuned, tuned with other software, or unreadable: then a warning
    says so once and the rule decides)."""
    key = machine_key()
    path = path_for(key)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data["machine"] != key:
            return None
        return measured_from(data["measured"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.warn(
            f"the tuned table {path} cannot be read ({type(e).__name__}: {e}); rnn(implementation=None) uses the "
            f"rule instead. Run `jax-cudnn-rnn tune` again to replace it.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def save(measured: Measured) -> pathlib.Path:
    """Writes ``measured`` as this machine's tuned table (atomically) and returns its path; this process uses it from
    then on."""
    key = machine_key()
    path = path_for(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"machine": key, "measured": as_json(measured)}, indent=1)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".tmp-", suffix=".json", delete=False) as f:
        f.write(text)
        temporary = f.name
    os.replace(temporary, path)
    this_machine.cache_clear()
    return path
