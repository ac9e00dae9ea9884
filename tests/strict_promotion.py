"""The strict configuration every test of tests/core, tests/backends and tests/frontends runs under (their conftest.py
files make ``strict_promotion`` autouse): ``jax.numpy_rank_promotion("raise")``, JAX's own test suite's setting, and
``jax.numpy_dtype_promotion("strict")``. A user's process may set either, so the package must never broadcast a
lower-rank operand or mix dtypes implicitly (a bias [N] added to [B, N] is spelled out as [1, N]); running these
suites so checks that at no extra CI time (issue 37 item 4).

The fixture sets both through ``jax.config.update`` for the test's duration, so that worker threads the test starts run
under them too (JAX's config context managers are thread-local); a subprocess runs JAX's defaults.

A test that exercises a peer library's own computation that is not strict-clean itself (Keras's layers, Optax's Adam)
leaves it with ``peer_promotion``: the marker ``@pytest.mark.peer_promotion(reason=...)`` for the whole test, or
``with peer_promotion(reason):`` around the peer's call alone, which keeps the rest of the test strict. Either states
why; the package's own calls never need it."""

from __future__ import annotations

import contextlib

import jax
import pytest

MARKER = "peer_promotion"
SETTINGS = {"jax_numpy_rank_promotion": "raise", "jax_numpy_dtype_promotion": "strict"}
#: Optax's Adam is not strict-clean: its bias correction raises a Python float (b1, b2) to the int32 step count.
OPTAX_ADAM = "optax.adam's bias correction raises a Python float to the int32 step count"


@contextlib.contextmanager
def peer_promotion(reason: str):
    """JAX's default promotion ("allow" ranks, "standard" dtypes) for a peer library's call that relies on it;
    ``reason`` says which call and what it promotes (required, so that every exemption is explained)."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"peer_promotion needs a reason (which peer call promotes what), got {reason!r}")
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        yield


@contextlib.contextmanager
def configured(**settings):
    """JAX's config options ``settings`` (name: value) set through ``jax.config.update`` for the block, so that every
    thread sees them, and restored after."""
    previous = {name: getattr(jax.config, name) for name in settings}
    try:
        for name, value in settings.items():
            jax.config.update(name, value)
        yield
    finally:
        for name, value in previous.items():
            jax.config.update(name, value)


def enable_x64(enabled: bool = True):
    """jax_enable_x64 set to ``enabled`` for the block: written so that it also runs on the declared floor, jax 0.7.2,
    which has no ``jax.enable_x64`` context manager."""
    return configured(jax_enable_x64=enabled)


@pytest.fixture(autouse=True)
def strict_promotion(request):
    """The test under rank promotion "raise" and dtype promotion "strict", unless it is marked ``peer_promotion``
    (which must give its reason)."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        reason = marker.kwargs.get("reason", marker.args[0] if marker.args else "")
        with peer_promotion(reason):
            yield
        return
    with configured(**SETTINGS):
        yield
