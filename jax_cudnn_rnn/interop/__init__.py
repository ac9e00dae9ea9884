"""Converters between the canonical format and other frameworks' parameters. NumPy in, NumPy out (Equinox: cells).

* PyTorch: the ``state_dict`` of ``torch.nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (``weight_ih_l{l}[_reverse]``,
  ``weight_hh_l…``, ``bias_ih_l…``, ``bias_hh_l…``, ``weight_hr_l…`` with ``proj_size``). PyTorch's rows are the gates
  in the canonical order, so this is concatenation and slicing. ``torch_module_kwargs(config)`` gives the
  constructor arguments of the matching module, ``torch_config(module)`` the config of a module;
  ``torch_to_canonical`` takes the module itself, or a larger model's state_dict with ``prefix="encoder.rnn."``.
  torch itself is never imported: torch tensors are read with ``.detach().cpu().numpy()``; pass the result to
  ``torch.from_numpy`` / ``load_state_dict``.
* Plain Flax linen cells (``nn.LSTMCell``, ``nn.GRUCell``, ``nn.SimpleCell``) stacked per layer as in
  ``flax_cells.FlaxCellStack``: kernels are the canonical matrices transposed ([in, H]); Flax cells keep one bias per
  gate (GRUCell: plus the separate ``hn`` bias), so the canonical input and recurrent biases are summed going to Flax,
  and coming back the sum goes to the input bias and the recurrent one is zero (GRU's new-memory gate keeps both
  exactly). Outputs are identical either way; only the split of a summed bias is not recoverable. Skip input becomes
  an identity input kernel (and must be one coming back).

* Keras 3 (``keras.layers.LSTM``, ``GRU`` with ``reset_after=True``, ``SimpleRNN``, each optionally inside
  ``Bidirectional``; ``keras_layers(config)`` builds them): one ``get_weights()`` list per layer, ``[kernel [in, G*H],
  recurrent_kernel [H, G*H], bias]`` (forward, then backward), kernels transposed and the gates side by side in
  Keras's order (LSTM i, f, c, o as ours; GRU z, r, h). LSTM and SimpleRNN keep one bias [G*H] (summed, as for Flax);
  GRU's bias is [2, 3H] (input row, recurrent row), exact both ways. Weights are independent of the Keras backend.
* Equinox (``eqx.nn.LSTMCell``, ``eqx.nn.GRUCell``; Equinox has no vanilla tanh/relu cell): ``cells[layer][direction]``
  with ``weight_ih`` [G*H, in] and ``weight_hh`` [G*H, H] in the canonical gate order, LSTM's one bias [4H] summed,
  GRU's ``bias`` [3H] on the input side (summed for r and z, the input bias for n) and ``bias_n`` [H] = the
  recurrent bias of n, so GRU is exact both ways.

For Flax, Keras and Equinox a summed bias comes back as the input bias with a zero recurrent bias (or as the only
bias ``bias_mode`` keeps), skip input is an identity input kernel both ways, and a value the canonical form has no room
for must be zero (to within ``atol``). Keras and Equinox are imported only by the functions that need them.

Every converter checks names, counts and shapes and says what is missing, unexpected or misshapen.
``canonical`` below means the ``(weights, biases)`` lists of ``layout.params_to_canonical``.
"""

from jax_cudnn_rnn.interop import _common, _keras
from jax_cudnn_rnn.interop._equinox import canonical_to_equinox, equinox_to_canonical
from jax_cudnn_rnn.interop._flax import canonical_to_flax, flax_stack_kwargs, flax_to_canonical
from jax_cudnn_rnn.interop._keras import canonical_to_keras, keras_layers, keras_to_canonical
from jax_cudnn_rnn.interop._torch import (
    canonical_to_torch,
    torch_config,
    torch_module_kwargs,
    torch_module_name,
    torch_to_canonical,
)

#: ``(weights, biases)``: the canonical lists, as ``layout.params_to_canonical`` returns them, in NumPy.
Canonical = _common.Canonical
#: The gates side by side in Keras's kernels, recurrent kernels and biases, as canonical gate names (the traceable
#: conversion of jax_cudnn_rnn/keras.py reads the same order, so that this fact lives in one place).
KERAS_GATES = _keras.KERAS_GATES

__all__ = [
    "canonical_to_equinox",
    "canonical_to_flax",
    "canonical_to_keras",
    "canonical_to_torch",
    "equinox_to_canonical",
    "flax_stack_kwargs",
    "flax_to_canonical",
    "keras_layers",
    "keras_to_canonical",
    "torch_config",
    "torch_module_kwargs",
    "torch_module_name",
    "torch_to_canonical",
]
