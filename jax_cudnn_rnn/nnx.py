"""Flax NNX modules over ``ops.rnn``: ``RNN`` (every mode), ``LSTM`` and ``GRU``.

NNX creates parameters eagerly, so the input size is a constructor argument (``in_features``, as in ``nnx.Linear``).
The parameter is the opaque buffer itself, ``self.rnn_params = nnx.Param(buffer)``, with the config a static attribute:
nnx's Optimizer does not accept a custom pytree inside a Variable (flax 0.12), so ``model.params`` gives the
``RNNParams`` view (for ``to_tree()``, interop or the checkpoint handler). The math is ``flax.apply_rnn``'s, and so is
the streaming contract (``initial_carry``/``return_carry``, ``resets``, ``initialize_carry``: see
jax_cudnn_rnn/flax.py).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jax_cudnn_rnn.flax import apply_rnn, carry_batch, make_config, zero_carry
from jax_cudnn_rnn.params import RNNParams

__all__ = ["GRU", "LSTM", "RNN"]


class RNN(nnx.Module):
    """A stacked LSTM/GRU/RNN layer; arguments as the linen ``jax_cudnn_rnn.flax.RNN`` fields, plus ``in_features``
    and ``rngs`` (``rngs.params`` initialises; ``rngs.dropout`` draws dropout masks when not deterministic)."""

    def __init__(
        self,
        in_features: int,
        num_units: int,
        *,
        mode: str = "lstm",
        num_layers: int = 1,
        direction: str = "unidirectional",
        input_mode: str = "linear_input",
        dropout: float = 0.0,
        proj_size: int = 0,
        cell_clip: float | None = None,
        bias_mode: str = "double",
        precision: Any = None,
        algorithm: str | None = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        time_major: bool = False,
        implementation: str | None = None,
        deterministic: bool = True,
        rngs: nnx.Rngs,
    ):
        self.config = make_config(
            mode,
            num_units,
            num_layers,
            in_features,
            direction,
            input_mode,
            dropout,
            param_dtype,
            proj_size,
            cell_clip,
            bias_mode,
        )
        self.precision = precision
        self.algorithm = algorithm
        self.rnn_params = nnx.Param(RNNParams.init(rngs.params(), self.config).buffer)
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.time_major = time_major
        self.implementation = implementation
        self.deterministic = deterministic
        self.rngs = rngs if dropout > 0 and num_layers > 1 else None

    @property
    def params(self) -> RNNParams:
        """The buffer with its config."""
        return RNNParams.tree_unflatten(self.config, [self.rnn_params[...]])

    def initialize_carry(self, input_shape: tuple[int, ...], rngs: Any = None) -> Any:
        """The zero carry (``initial_carry`` to start a stream from), like nnx cells' ``initialize_carry``.

        ``input_shape`` is the shape of x or of one step's input (batch, features); ``rngs`` is accepted for nnx's
        signature and unused (the carry is zero). Returns ``(h, c)`` for LSTM, ``h`` otherwise: h
        [num_layers*D, B, hidden], c [num_layers*D, B, num_units], in the module's computation dtype.
        """
        del rngs
        return zero_carry(self.config, carry_batch(input_shape, self.time_major), self.dtype or self.param_dtype)

    def __call__(
        self,
        x: jax.Array,
        seq_lengths: Any = None,
        initial_carry: Any = None,
        *,
        deterministic: bool | None = None,
        return_carry: bool = False,
        resets: Any = None,
        max_segments: int | None = None,
    ):
        """See ``flax.apply_rnn``; ``resets`` bool [B, T] ([T, B] when time_major)."""
        if deterministic is None:
            deterministic = self.deterministic
        dropout_key = None
        if not deterministic and self.rngs is not None:
            dropout_key = self.rngs.dropout()
        return apply_rnn(
            self.params,
            x,
            compute_dtype=self.dtype or self.param_dtype,
            time_major=self.time_major,
            seq_lengths=seq_lengths,
            initial_carry=initial_carry,
            dropout_key=dropout_key,
            implementation=self.implementation,
            precision=self.precision,
            algorithm=self.algorithm,
            return_carry=return_carry,
            resets=resets,
            max_segments=max_segments,
            input_size_name="in_features",
        )


class LSTM(RNN):
    """``RNN`` with ``mode="lstm"``: ``LSTM(in_features, num_units, **RNN's keyword arguments)``."""

    def __init__(self, in_features: int, num_units: int, **kwargs):
        super().__init__(in_features, num_units, mode="lstm", **kwargs)


class GRU(RNN):
    """``RNN`` with ``mode="gru"``: ``GRU(in_features, num_units, **RNN's keyword arguments)``."""

    def __init__(self, in_features: int, num_units: int, **kwargs):
        super().__init__(in_features, num_units, mode="gru", **kwargs)
