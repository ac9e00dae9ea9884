"""The files of tuned tables, the CPU's (jax_cudnn_rnn/backends/onednn/tuned.py) and the GPU's
(jax_cudnn_rnn/backends/cudnn/tuned.py): one per machine key in the user's cache directory, named by a hash of the key
(what the table was measured on), read with a warning where it cannot be, and written atomically (a temporary file
renamed over it), so that a process reading it never sees half a file."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import pathlib
import tempfile
import warnings
from collections.abc import Callable
from typing import Any


def cache_dir() -> pathlib.Path:
    """Where tuned tables live: ``$XDG_CACHE_HOME/jax-cudnn-rnn``, or ``~/.cache/jax-cudnn-rnn``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "jax-cudnn-rnn"


def version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def path_for(key: dict[str, Any], prefix: str) -> pathlib.Path:
    """The file of the tuned table for ``key`` ("cpu" or "gpu" ``prefix``)."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"{prefix}-{digest}.json"


def read(path: pathlib.Path, key: dict[str, Any], measured_from: Callable[[dict], Any], what: str) -> Any | None:
    """The table at ``path`` as ``measured_from`` reads its measurements, or None: no file, one of another key, or
    one that cannot be read (a warning says so, naming ``what`` the default then uses instead)."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data["machine"] != key:
            return None
        return measured_from(data["measured"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.warn(
            f"the tuned table {path} cannot be read ({type(e).__name__}: {e}); rnn(implementation=None) uses {what} "
            f"instead. Run `jax-cudnn-rnn tune` again to replace it.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def write(path: pathlib.Path, key: dict[str, Any], measured: dict[str, Any]) -> pathlib.Path:
    """Writes the table of ``key`` and ``measured`` (its JSON form) to ``path``, atomically; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"machine": key, "measured": measured}, indent=1)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".tmp-", suffix=".json", delete=False) as f:
        f.write(text)
        temporary = f.name
    os.replace(temporary, path)
    return path
