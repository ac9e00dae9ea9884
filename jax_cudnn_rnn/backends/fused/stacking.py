"""A stacked network run one layer at a time with inter-layer dropout, for the fused kernels.

Their kernels run all layers in one call without dropout (cuDNN's masks cannot match the other implementations';
oneDNN has none). With inter-layer dropout the network runs
layer by layer instead: each layer a single-layer call over its own slice of the opaque buffer
(``_buffer.sub_params``), and layer l's output multiplied by ``dropout.dropout_masks(key, ...)[l]`` before entering
layer l + 1, as the xla implementation does; gradients flow back to the full buffer through the slicing.
"""

from __future__ import annotations

import jax.numpy as jnp

from jax_cudnn_rnn import _buffer, dropout
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.fused.convention import Kernel, part


def rnn_with_masks(run_layer: Kernel, call: Call, inputs: Inputs):
    """``call``'s network one ``run_layer(layer_call, layer_inputs)`` call per layer (a one-layer network over its
    slice of the buffer, no dropout masks), layer l's output times ``inputs.dropout_masks[l]`` (float32/64
    [T, B, D*hidden]; None or [] for no dropout) before layer l + 1. Returns (y, h_n, c_n or None) as ``rnn``."""
    config, masks = call.config, inputs.dropout_masks
    compute_dtype = dropout.compute_dtype(config.dtype)
    directions = config.num_directions
    layer_input, h_n, c_n = inputs.x, [], []
    for layer in range(config.num_layers):
        states = slice(layer * directions, (layer + 1) * directions)
        layer_inputs = inputs._replace(
            params=_buffer.sub_params(inputs.params, config, layer),
            x=layer_input,
            h0=inputs.h0[states],
            c0=None if inputs.c0 is None else inputs.c0[states],
            dropout_masks=None,
        )
        y, h_last, c_last = run_layer(part(call, layer_inputs, _buffer.sub_config(config, layer)), layer_inputs)
        h_n.append(h_last)
        c_n.append(c_last)
        if masks and layer < config.num_layers - 1:
            y = (y.astype(compute_dtype) * masks[layer]).astype(config.dtype)
        layer_input = y
    return layer_input, jnp.concatenate(h_n), (jnp.concatenate(c_n) if config.has_cell_state else None)
