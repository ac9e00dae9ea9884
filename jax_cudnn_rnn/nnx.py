"""Flax NNX modules over ``ops.rnn``: ``RNN`` (every mode), ``LSTM`` and ``GRU``.

Built as ``nnx.LSTMCell`` is, sizes first: ``LSTM(in_features, num_units, *, rngs)`` (``hidden_features=``, nnx's
name, works too); NNX creates parameters eagerly, so the input size is a constructor argument.

The parameters are the canonical tensors themselves, one ``nnx.Param`` each, under ``self.rnn_params`` as the
canonical named tree (``layer_{l}/{forward|backward}/{w_input|w_recurrent|b_input|b_recurrent}/{gate}``,
``layout.params_to_tree``'s form), with the config a static attribute. So ``nnx.state(model)`` is that named tree: a
plain ``ocp.StandardCheckpointer`` writes and reads named canonical tensors, an optimizer's state mirrors them, and
optax masks can tell weights from biases by path. Each call packs them into the opaque buffer (``model.params``, the
``RNNParams`` view): under ``jax.jit`` that is one concatenation of the parameters, and its gradient slices the
buffer's gradient, which the pure-JAX implementations build as one concatenation (``layout.unpack``): a gradient step
compiles to the stored buffer's HLO plus the packing (CHANGELOG.md, issue 40's entry, has the numbers). The math is
``flax.apply_rnn``'s, and so is the streaming contract (``initial_carry``/``return_carry``, ``resets``,
``initialize_carry``: see jax_cudnn_rnn/flax.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.flax import apply_rnn, carry_batch, init_canonical, make_config, module_size, zero_carry
from jax_cudnn_rnn.params import RNNParams

__all__ = ["GRU", "LSTM", "RNN"]

# flax >= 0.12 wants a container attribute that holds Variables marked as data; earlier versions took it as it is.
_data = getattr(nnx, "data", lambda value: value)


class RNN(nnx.Module):
    """A stacked LSTM/GRU/RNN layer: ``RNN(in_features, num_units, *, mode="lstm", ..., rngs)``; arguments as the
    linen ``jax_cudnn_rnn.flax.RNN`` fields (``kernel_init``, ``recurrent_kernel_init`` and ``bias_init`` included),
    plus ``in_features`` and ``rngs`` (``rngs.params`` initialises; ``rngs.dropout`` draws the dropout and
    ``recurrent_dropout`` masks when not deterministic); ``hidden_features`` is nnx's name for ``num_units``."""

    #: The mode a subclass stands for (LSTM, GRU); None: any.
    fixed_mode: ClassVar[str | None] = None

    def __init__(
        self,
        in_features: int,
        num_units: int | None = None,
        *,
        mode: str | None = None,
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
        kernel_init: Any = None,
        recurrent_kernel_init: Any = None,
        bias_init: Any = None,
        hidden_features: int | None = None,
        recurrent_dropout: float = 0.0,
        rngs: nnx.Rngs,
    ):
        if mode is None:
            mode = self.fixed_mode or "lstm"
        num_units = module_size(
            type(self).__name__, num_units, "hidden_features", hidden_features, mode, self.fixed_mode, "in_features, "
        )
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
            recurrent_dropout,
        )
        self.precision = precision
        self.algorithm = algorithm
        tree = init_canonical(rngs.params(), self.config, kernel_init, recurrent_kernel_init, bias_init)
        self.rnn_params = _data(jax.tree_util.tree_map(nnx.Param, tree))
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.time_major = time_major
        self.implementation = implementation
        self.deterministic = deterministic
        drops = (self.config.dropout > 0 and num_layers > 1) or self.config.recurrent_dropout > 0
        self.rngs = rngs if drops else None

    @property
    def params(self) -> RNNParams:
        """The parameters packed into the opaque buffer, with its config (what ``rnn`` runs)."""
        values = {name: param[...] for name, param in layout.flatten_tree(self.rnn_params).items()}
        return RNNParams.from_tree(layout.unflatten_tree(values), self.config)

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

    fixed_mode: ClassVar[str | None] = "lstm"


class GRU(RNN):
    """``RNN`` with ``mode="gru"``: ``GRU(in_features, num_units, **RNN's keyword arguments)``."""

    fixed_mode: ClassVar[str | None] = "gru"
