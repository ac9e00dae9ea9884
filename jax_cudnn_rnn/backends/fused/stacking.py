"""A stacked network run one layer at a time with inter-layer dropout, for the fused kernels.

Their kernels run all layers in one call without dropout (cuDNN's masks cannot match the other implementations';
oneDNN has none). With inter-layer dropout the network runs
layer by layer instead: each layer a single-layer call over its own slice of the opaque buffer
(``layout.sub_params``), and layer l's output multiplied by ``dropout.dropout_masks(key, ...)[l]`` before entering
layer l + 1, as the xla implementation does; gradients flow back to the full buffer through the slicing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jax_cudnn_rnn import dropout, layout
from jax_cudnn_rnn.config import RNNConfig

# run_layer(params, x, h0, c0, config) -> (y, h_n, c_n or None) for a single-layer config.
LayerFn = Callable[[jax.Array, jax.Array, jax.Array, Any, RNNConfig], tuple[jax.Array, jax.Array, Any]]


def rnn_with_masks(run_layer: LayerFn, params, x, h0, c0, config: RNNConfig, masks):
    """``config``'s network one ``run_layer`` call per layer, layer l's output times ``masks[l]`` (float32/64
    [T, B, D*hidden]; None or [] for no dropout) before layer l + 1. Arrays as ``rnn``'s (x [T, B, I],
    h0 [L*D, B, hidden], c0 [L*D, B, H] or None); returns (y, h_n, c_n or None)."""
    compute_dtype = dropout.compute_dtype(config.dtype)
    directions = config.num_directions
    layer_input, h_n, c_n = x, [], []
    for layer in range(config.num_layers):
        states = slice(layer * directions, (layer + 1) * directions)
        y, h_last, c_last = run_layer(
            layout.sub_params(params, config, layer),
            layer_input,
            h0[states],
            None if c0 is None else c0[states],
            layout.sub_config(config, layer),
        )
        h_n.append(h_last)
        c_n.append(c_last)
        if masks and layer < config.num_layers - 1:
            y = (y.astype(compute_dtype) * masks[layer]).astype(config.dtype)
        layer_input = y
    return layer_input, jnp.concatenate(h_n), (jnp.concatenate(c_n) if config.has_cell_state else None)
