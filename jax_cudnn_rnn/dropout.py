"""Inter-layer dropout masks, drawn from a JAX key so that every implementation (and every device) applies the same
mask for the same key."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn.config import RNNConfig

__all__ = ["compute_dtype", "dropout_masks", "masks_for"]


def compute_dtype(dtype: Any) -> Any:
    """The dtype every implementation computes in, and draws the masks in: float64 stays float64; everything else is
    computed in float32."""
    return jnp.float64 if np.dtype(dtype) == np.float64 else jnp.float32


def dropout_masks(key: jax.Array, config: RNNConfig, shape: tuple[int, ...], dtype) -> list[jax.Array]:
    """``num_layers - 1`` masks of ``shape`` ([T, B, D*H]), already scaled by 1/(1-dropout).

    Mask ``l`` multiplies layer ``l``'s output before it enters layer ``l + 1``; it is drawn from
    ``jax.random.fold_in(key, l)`` so that it does not depend on the implementation or on the other layers.
    """
    keep = 1.0 - config.dropout
    return [
        jax.random.bernoulli(jax.random.fold_in(key, layer), keep, shape).astype(dtype) / jnp.asarray(keep, dtype)
        for layer in range(config.num_layers - 1)
    ]


def masks_for(key: jax.Array, config: RNNConfig, x_shape: tuple[int, ...]) -> list[jax.Array]:
    """``dropout_masks`` for a call on x of shape [T, B, ...]: masks [T, B, D*hidden] in ``compute_dtype``, what every
    implementation multiplies each layer's output with."""
    return dropout_masks(key, config, (x_shape[0], x_shape[1], config.output_size), compute_dtype(config.dtype))
