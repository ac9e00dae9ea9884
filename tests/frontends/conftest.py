"""Every test here runs under JAX's strict promotion settings (tests/strict_promotion.py: why, and the peer
exemptions)."""

from strict_promotion import strict_promotion  # noqa: F401 - the autouse fixture, by its name
