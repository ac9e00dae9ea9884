"""Inter-layer dropout masks, drawn from a JAX key so that every implementation (and every device) applies the same
mask for the same key."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_cudnn_rnn.config import RNNConfig


def dropout_masks(key: jax.Array, config: RNNConfig, shape: tuple[int, ...], dtype) -> list[jax.Array]:
    """``num_layers - 1`` masks of ``shape`` ([T, B, D*H]), already scaled by 1/(1-dropout).

    Mask ``l`` multiplies layer ``l``'s output before it enters layer ``l + 1``; it is drawn from
    ``jax.random.fold_in(key, l)`` so that it does not depend on the implementation or on the other layers.
    """
    keep = 1.0 - config.dropout
    return [jax.random.bernoulli(jax.random.fold_in(key, layer), keep, shape).astype(dtype) / jnp.asarray(keep, dtype)
            for layer in range(config.num_layers - 1)]
