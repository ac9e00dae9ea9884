"""The activations a cell may use by name (``RNNConfig.activation``, ``RNNConfig.recurrent_activation``): every
elementwise activation of Keras 3 (``keras.activations``), with Keras's definitions and default arguments, in
jax.numpy / jax.nn.

Keras's softmax, log_softmax, glu and sparsemax act along an axis and ``threshold`` has no defaults for its
arguments, so none of them is a cell activation. ``swish`` and ``hard_swish`` are Keras's aliases of ``silu`` and
``hard_silu``; ``canonical_name`` resolves them, so that a config records one name per function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["ACTIVATIONS", "ALIASES", "activation_name", "canonical_name", "resolve"]


def _soft_shrink(x):
    return jnp.where(x > 0.5, x - 0.5, jnp.where(x < -0.5, x + 0.5, jnp.zeros((), x.dtype)))


def _hard_shrink(x):
    return jnp.where(jnp.abs(x) > 0.5, x, jnp.zeros((), x.dtype))


#: Every activation by its Keras 3 name.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "celu": jax.nn.celu,  # alpha 1
    "elu": jax.nn.elu,  # alpha 1
    "exponential": jnp.exp,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),  # keras.activations.gelu's default: the exact erf form
    "hard_shrink": _hard_shrink,  # threshold 0.5
    "hard_sigmoid": jax.nn.hard_sigmoid,  # Keras 3's relu6(x + 3) / 6 (Keras 2's was clip(0.2 x + 0.5, 0, 1))
    "hard_silu": jax.nn.hard_silu,
    "hard_tanh": jax.nn.hard_tanh,
    "leaky_relu": lambda x: jax.nn.leaky_relu(x, negative_slope=0.2),  # Keras's slope, not jax.nn's 0.01
    "linear": lambda x: x,
    "log_sigmoid": jax.nn.log_sigmoid,
    "mish": lambda x: x * jnp.tanh(jax.nn.softplus(x)),
    "relu": jax.nn.relu,
    "relu6": jax.nn.relu6,
    "selu": jax.nn.selu,
    "sigmoid": jax.nn.sigmoid,
    "silu": jax.nn.silu,
    "soft_shrink": _soft_shrink,  # threshold 0.5
    "softplus": jax.nn.softplus,
    "softsign": jax.nn.soft_sign,
    "sparse_plus": jax.nn.sparse_plus,
    "sparse_sigmoid": jax.nn.sparse_sigmoid,
    "squareplus": lambda x: jax.nn.squareplus(x, b=4),
    "tanh": jnp.tanh,
    "tanh_shrink": lambda x: x - jnp.tanh(x),
}

#: Keras's other names for some of them.
ALIASES = {"swish": "silu", "hard_swish": "hard_silu"}


def canonical_name(name: str, argument: str) -> str:
    """``name`` with Keras's aliases resolved; ValueError naming ``argument`` for an unknown name."""
    name = ALIASES.get(name, name)
    if name not in ACTIVATIONS:
        raise ValueError(
            f"{argument} is {name!r}; expected None (the cell's own), a callable, or one of "
            f"{sorted(ACTIVATIONS) + sorted(ALIASES)}"
        )
    return name


def resolve(activation: str | Callable[..., Any]) -> Callable[[jax.Array], jax.Array]:
    """The function of an activation given by name or as a callable."""
    return ACTIVATIONS[activation] if isinstance(activation, str) else activation


def activation_name(activation: str | Callable[..., Any]) -> str:
    """How messages name an activation: its name, or the callable's qualified name."""
    if isinstance(activation, str):
        return repr(activation)
    return f"the callable {getattr(activation, '__module__', '?')}.{getattr(activation, '__qualname__', activation)}"
