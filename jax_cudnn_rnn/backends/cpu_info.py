"""What /proc/cpuinfo says of this machine's first processor (Linux; nothing elsewhere), read once: what the bench
records beside its times, and the CPU features the xla implementation's one-step products choose by
(``backends/xla.py``, ``_nt_product``)."""

from __future__ import annotations

import functools


@functools.cache
def fields() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo, or {} where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            first = f.read().split("\n\n")[0]
    except OSError:
        return {}
    pairs = (line.split(":", 1) for line in first.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def flags() -> frozenset[str]:
    """The CPU's feature flags ("avx2", "avx512f", "amx_bf16", ...), empty where unknown."""
    return frozenset(fields().get("flags", "").split())
