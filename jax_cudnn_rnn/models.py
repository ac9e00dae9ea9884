"""Seed-style classes: ``CudnnLSTM``, ``CudnnGRU``, ``CudnnRNNTanh``, ``CudnnRNNRelu`` (``tf.contrib.cudnn_rnn``'s API),
documented as ``jax_cudnn_rnn.CudnnLSTM`` etc., their one public path.

The typical use case of the seeds carries over: create a model, query ``params_size()``, initialise the opaque buffer
(``init_params``) or load canonical weights (``canonical_to_params``), call the model, convert back with
``params_to_canonical`` to save or port the weights. The classes hold only configuration; params are explicit.
"""

from __future__ import annotations

from typing import Any

import jax

from jax_cudnn_rnn import _checks, layout, ops
from jax_cudnn_rnn.config import RNNConfig

__all__ = []

Array = jax.Array

#: The seeds' argument names, in every error the call raises (rnn() checks them under these names).
ARGUMENTS = _checks.ArgumentNames(
    x="input_data",
    h0="input_h",
    c0="input_c",
    input_size="input_size",
    params_size="params_size()",
    dtype="the model's dtype",
    caller="The model",
    layout_fix="pass jnp.swapaxes(input_data, 0, 1)",
)


class _CudnnRNN:
    _rnn_mode: str = ""

    def __init__(
        self,
        num_layers: int,
        num_units: int,
        input_size: int,
        input_mode: str = "linear_input",
        direction: str = "unidirectional",
        dtype: Any = "float32",
        dropout: float = 0.0,
        seed: int = 0,
    ):
        """Args as in ``tf.contrib.cudnn_rnn``: ``input_mode`` is "linear_input", "skip_input" (input_size must equal
        num_units) or "auto_select"; ``direction`` "unidirectional" or "bidirectional"; ``dropout`` the inter-layer
        dropout rate used when ``is_training``; ``seed`` gives the default dropout key ``jax.random.key(seed)``."""
        self._config = RNNConfig(
            mode=self._rnn_mode,
            num_layers=num_layers,
            num_units=num_units,
            input_size=input_size,
            direction=direction,
            input_mode=input_mode,
            dropout=dropout,
            dtype=dtype,
        )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
        self._seed = seed

    @property
    def config(self) -> RNNConfig:
        """The network: the ``RNNConfig`` the constructor's arguments make."""
        return self._config

    @property
    def rnn_mode(self) -> str:
        """``config.mode``: "lstm", "gru", "rnn_tanh" or "rnn_relu" (``tf.contrib.cudnn_rnn``'s name)."""
        return self._config.mode

    @property
    def num_layers(self) -> int:
        """Stacked layers L."""
        return self._config.num_layers

    @property
    def num_units(self) -> int:
        """Hidden size H."""
        return self._config.num_units

    @property
    def input_size(self) -> int:
        """Features I of input_data."""
        return self._config.input_size

    @property
    def input_mode(self) -> str:
        """ "linear_input" or "skip_input" ("auto_select" is resolved on construction)."""
        return self._config.input_mode

    @property
    def direction(self) -> str:
        """ "unidirectional" or "bidirectional"."""
        return self._config.direction

    @property
    def dtype(self):
        """The dtype of the parameters, input_data and the states."""
        return self._config.dtype

    def params_size(self) -> int:
        """Number of elements of the opaque parameter buffer."""
        return layout.params_size(self._config)

    def init_params(self, key: Array) -> Array:
        """A fresh opaque buffer (U(-1/sqrt(num_units), 1/sqrt(num_units)) everywhere)."""
        return layout.init_params(key, self._config)

    def canonical_to_params(self, weights, biases) -> Array:
        """Canonical (weights, biases) lists to the opaque buffer."""
        return layout.canonical_to_params(weights, biases, self._config)

    def params_to_canonical(self, params: Array) -> tuple[list[Array], list[Array]]:
        """The opaque buffer to canonical (weights, biases) lists."""
        return layout.params_to_canonical(params, self._config)

    def _run(self, input_data, input_h, input_c, params, is_training, seq_lengths, dropout_key, implementation):
        if dropout_key is None and self._config.dropout > 0 and is_training is True:
            dropout_key = jax.random.key(self._seed)
        return ops.rnn(
            params,
            input_data,
            input_h,
            input_c,
            self._config,
            seq_lengths=seq_lengths,
            is_training=is_training,
            dropout_key=dropout_key,
            implementation=implementation,
            argument_names=ARGUMENTS,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._config})"


class CudnnLSTM(_CudnnRNN):
    """Stacked LSTM: ``output, output_h, output_c = lstm(input_data, input_h, input_c, params)``."""

    _rnn_mode = "lstm"

    def __call__(
        self,
        input_data: Array,
        input_h: Array,
        input_c: Array,
        params: Array,
        is_training: bool = True,
        *,
        seq_lengths: Array | None = None,
        dropout_key: Array | None = None,
        implementation: str | None = None,
    ) -> tuple[Array, Array, Array]:
        """input_data [T, B, input_size]; input_h/input_c [num_layers * num_directions, B, num_units].

        Returns (output [T, B, num_directions * num_units], output_h, output_c). ``dropout_key`` defaults to
        ``jax.random.key(seed)`` (the same mask at every call); pass a fresh key per step to vary it.
        """
        return self._run(input_data, input_h, input_c, params, is_training, seq_lengths, dropout_key, implementation)


class _CudnnRNNNoCell(_CudnnRNN):
    def __call__(
        self,
        input_data: Array,
        input_h: Array,
        params: Array,
        is_training: bool = True,
        *,
        seq_lengths: Array | None = None,
        dropout_key: Array | None = None,
        implementation: str | None = None,
    ) -> tuple[Array, Array]:
        """input_data [T, B, input_size]; input_h [num_layers * num_directions, B, num_units].

        Returns (output [T, B, num_directions * num_units], output_h).
        """
        output, output_h, _ = self._run(
            input_data, input_h, None, params, is_training, seq_lengths, dropout_key, implementation
        )
        return output, output_h


class CudnnGRU(_CudnnRNNNoCell):
    """Stacked GRU: ``output, output_h = gru(input_data, input_h, params)``."""

    _rnn_mode = "gru"


class CudnnRNNTanh(_CudnnRNNNoCell):
    """Stacked vanilla RNN with tanh: ``output, output_h = rnn(input_data, input_h, params)``."""

    _rnn_mode = "rnn_tanh"


class CudnnRNNRelu(_CudnnRNNNoCell):
    """Stacked vanilla RNN with relu: ``output, output_h = rnn(input_data, input_h, params)``."""

    _rnn_mode = "rnn_relu"
