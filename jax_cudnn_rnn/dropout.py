"""Dropout masks, drawn from a JAX key so that every implementation (and every device) applies the same mask for the
same key: between layers (``RNNConfig.dropout``, cuDNN's: a new mask at every step) and on the recurrent input
(``RNNConfig.recurrent_dropout``, Keras's: one mask per gate, layer and direction for the whole sequence)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn.config import RNNConfig

__all__ = ["RECURRENT_STREAM", "dropout_masks", "recurrent_masks"]

#: The recurrent masks are drawn from ``jax.random.fold_in(key, RECURRENT_STREAM)``, a stream apart from the
#: inter-layer masks' ``fold_in(key, l)`` (l < num_layers - 1 < 2**31 - 1).
RECURRENT_STREAM = 2**31 - 1


def check_key(key: Any, argument: str = "dropout_key") -> None:
    """Raises a TypeError or ValueError naming ``argument`` unless ``key`` is one JAX PRNG key: a typed key of shape ()
    (``jax.random.key(seed)``) or a raw one (``jax.random.PRNGKey(seed)``, uint32 key data)."""
    dtype = getattr(key, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        typed = key
    else:
        try:
            typed = jax.random.wrap_key_data(key)
        except (TypeError, ValueError) as e:
            got = repr(key) if dtype is None else f"an array of shape {tuple(key.shape)} and dtype {dtype}"
            raise TypeError(
                f"{argument} must be a JAX PRNG key (jax.random.key(seed), or jax.random.PRNGKey(seed)), got {got}"
            ) from e
    if typed.shape != ():
        raise ValueError(
            f"{argument} holds keys of shape {typed.shape}; expected one key (shape ()), e.g. one of jax.random.split's"
        )


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


def recurrent_masks(key: jax.Array, config: RNNConfig, batch: int, dtype=None) -> jax.Array:
    """Keras's recurrent-dropout masks for a batch of ``batch`` sequences: [L*D, G, B, hidden] in ``dtype``
    (default ``compute_dtype(config.dtype)``), already scaled by 1/(1-recurrent_dropout).

    ``masks[l*D + d, k]`` multiplies the state h_{t-1} [B, hidden] where gate k's recurrent product R_k h_{t-1} of
    layer l, direction d reads it, at every step of the sequence (Keras's LSTM, GRU and SimpleRNN cells with
    ``recurrent_dropout``: one mask per gate, drawn once per call); it is
    ``jax.random.bernoulli(fold_in(fold_in(key, RECURRENT_STREAM), l*D + d), 1 - recurrent_dropout, [G, B, hidden])``
    divided by 1 - recurrent_dropout.
    """
    dtype = compute_dtype(config.dtype) if dtype is None else dtype
    keep = 1.0 - config.recurrent_dropout
    stream = jax.random.fold_in(key, RECURRENT_STREAM)
    shape = (config.num_gates, batch, config.hidden_size)
    return jnp.stack(
        [
            jax.random.bernoulli(jax.random.fold_in(stream, index), keep, shape).astype(dtype)
            / jnp.asarray(keep, dtype)
            for index in range(config.num_layers * config.num_directions)
        ]
    )
