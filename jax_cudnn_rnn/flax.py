"""Flax linen modules over ``ops.rnn``: ``RNN`` (every mode), ``LSTM`` and ``GRU``, in Flax's language.

A module trains what Flax's own cells train, so a model ported from ``nn.RNN(nn.LSTMCell(...))`` (or
``OptimizedLSTMCell``, ``GRUCell``, ``SimpleCell``) trains as it did: the LSTM one bias per gate (Flax's recurrent
side), the GRU one for r and z and two for n, the vanilla RNN one; Flax's initializers (lecun_normal input kernels,
orthogonal recurrent kernels, zero biases); Flax's carry ``(c, h)``. cuDNN's conventions are one argument away:
``bias_mode="double"`` trains both biases of every gate and initialises as PyTorch does, U(-1/sqrt(H), 1/sqrt(H)).

The parameters are the named canonical tensors, ``params["rnn_params"]["layer_0"]["forward"]["w_recurrent"]["f"]``
[H, hidden] (``layer_{l}/{forward|backward}/{w_input|w_recurrent|w_projection|b_input|b_recurrent}/{gate}``, the
canonical format: jax_cudnn_rnn/_parameterization.py says which biases a module has), so optax's masks by
``ndim`` or by path, ``nn.tabulate`` and parameter counts see weight matrices and biases as on Flax's cells, and a plain
Orbax checkpointer writes canonical tensors. Each call packs them into the opaque buffer the kernels run
(``packed``). Batch-major by default like ``flax.linen.RNN``; the input size is taken from the input at init.

Streaming: ``initial_carry`` and ``return_carry`` as in ``flax.linen.RNN``. For a unidirectional network, a sequence fed
window by window, each window's final carry passed on as the next one's ``initial_carry``, gives exactly the outputs,
final carry and gradients of one call over the whole sequence, with ``seq_lengths`` counted per window (a window past a
sequence's end has length 0 and passes its carry through) and ``resets`` sliced per window. ``initialize_carry`` makes
the zero carry to start from. (A bidirectional network's backward direction reads a window from its end, so it cannot
stream.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from jax_cudnn_rnn import _checks, _flax_core
from jax_cudnn_rnn._flax_core import zero_carry
from jax_cudnn_rnn._parameterization import Parameterization
from jax_cudnn_rnn.config import LAYOUT_FIELDS
from jax_cudnn_rnn.params import RNNParams

__all__ = ["GRU", "LSTM", "RNN", "zero_carry"]


class RNN(nn.Module):
    """A stacked LSTM/GRU/RNN layer on cuDNN's fused kernels (GPU), oneDNN's (CPU) or the pure-JAX implementation.

    Built as Flax's cells are, size first: ``RNN(64, mode="gru")``, ``LSTM(64)``, ``GRU(64, num_layers=2)``.

    Attributes:
      num_units: hidden size H (Flax's ``features``, accepted as a keyword too).
      mode: "lstm", "gru", "rnn_tanh" or "rnn_relu" (or "gru_reset_before"); ``LSTM`` and ``GRU`` fix it.
      num_layers: stacked layers.
      direction: "unidirectional" or "bidirectional" (outputs concatenated, forward first: D*H features).
      input_mode: "linear_input", "skip_input" or "auto_select" (see RNNConfig).
      dropout: inter-layer dropout rate, applied when not deterministic (rng stream 'dropout').
      recurrent_dropout: Keras's recurrent (variational) dropout rate (``RNNConfig.recurrent_dropout``), applied when
        not deterministic, from the same 'dropout' rng; it runs on the xla implementation in training.
      proj_size, cell_clip: the projected/clipped LSTM options of ``RNNConfig``.
      bias_mode: None (the default): the biases Flax's cell of the mode trains (LSTM: one per gate, on the recurrent
        side as ``nn.LSTMCell``'s ``hi``...; GRU: ``nn.GRUCell``'s ``ir``, ``iz``, ``in`` and ``hn``; vanilla RNN: one),
        with Flax's initializers for those left None. "double" (cuDNN's and PyTorch's: both biases of every gate),
        "single_input", "single_recurrent" or "none": that bias mode of cuDNN's, with PyTorch's
        U(-1/sqrt(H), 1/sqrt(H)) for the initializers left None.
      precision: float32 matmul precision (``rnn``'s argument): None, "float32" or "tensorfloat32".
      algorithm: cuDNN's RNN algorithm (``rnn``'s argument); ignored by the other implementations.
      dtype: computation dtype (default: param_dtype); the parameters are cast to it.
      param_dtype: dtype of the parameters.
      time_major: False (default): x is [B, T, I]; True: [T, B, I].
      implementation: ``rnn``'s (None: the fastest one installed that runs the call).
      deterministic: default for ``__call__``'s argument; True when both are None (Flax's ``nn.Dropout`` convention).
      kernel_init, recurrent_kernel_init, bias_init: Flax's initializers (``init(key, shape, dtype)``) of the input
        matrices, the recurrent matrices and the biases, called per gate as for ``nn.LSTMCell``
        (``_flax_core.init_tree`` says exactly how; a dict by gate name sets single gates).
      features: Flax's name for ``num_units``.

    ``__call__(x, seq_lengths=None, initial_carry=None, *, deterministic=None, return_carry=False, resets=None,
    max_segments=None)``: see ``_flax_core.apply_rnn`` (resets bool [B, T], or [T, B] when time_major). The carry is
    Flax's ``(c, h)`` for an LSTM, ``h`` otherwise, each [num_layers*D, B, hidden], or [B, hidden] as Flax's cells carry
    it for one layer and one direction. ``initialize_carry(rng, input_shape)`` gives the zero carry;
    ``zero_carry(variables, batch)`` gives it from the parameters alone (a module nested in another).
    """

    num_units: int | None = None
    mode: str = "lstm"
    num_layers: int = 1
    direction: str = "unidirectional"
    input_mode: str = "linear_input"
    dropout: float = 0.0
    proj_size: int = 0
    cell_clip: float | None = None
    bias_mode: str | None = None
    precision: Any = None
    algorithm: str | None = None
    dtype: Any = None
    param_dtype: Any = jnp.float32
    time_major: bool = False
    implementation: str | None = None
    deterministic: bool | None = None
    kernel_init: Any = None
    recurrent_kernel_init: Any = None
    bias_init: Any = None
    features: int | None = None
    recurrent_dropout: float = 0.0

    #: The mode a subclass stands for (LSTM, GRU); None: any.
    fixed_mode: ClassVar[str | None] = None

    def __post_init__(self):
        _flax_core.module_size(
            type(self).__name__, self.num_units, "features", self.features, self.mode, self.fixed_mode
        )
        super().__post_init__()

    @nn.nowrap
    def parameters(self, input_size: int) -> Parameterization:
        """What this module trains for inputs of ``input_size`` features: the kernels' ``RNNConfig`` (its buffer in
        ``param_dtype``) and the biases held at zero."""
        return _flax_core.parameterization(
            "flax",
            self.mode,
            self.num_units if self.num_units is not None else self.features,
            self.num_layers,
            input_size,
            self.bias_mode,
            direction=self.direction,
            input_mode=self.input_mode,
            dropout=self.dropout,
            dtype=self.param_dtype,
            proj_size=self.proj_size,
            cell_clip=self.cell_clip,
            recurrent_dropout=self.recurrent_dropout,
        )

    @nn.nowrap
    def rnn_config(self, input_size: int) -> Any:
        """The ``RNNConfig`` the kernels run for inputs of ``input_size`` features (``parameters(...).config``)."""
        return self.parameters(input_size).config

    @nn.nowrap
    def packed(self, params: Any) -> RNNParams:
        """The opaque buffer with its config (what ``rnn`` runs; the held biases zero) of this module's parameters:
        ``variables``, ``variables["params"]`` or the named tree itself. For the interop converters and
        ``rnn()``."""
        tree = _rnn_params(params)
        parameters = self.parameters(_flax_core.layer_input_size(tree, self._units))
        return RNNParams(parameters.pack(tree, "rnn_params"), parameters.config)

    @nn.nowrap
    def unpacked(self, params: RNNParams, *, atol: float = 0.0) -> dict[str, Any]:
        """This module's ``params`` collection (``{"rnn_params": named tree}``) holding ``params``' tensors, whose
        config must be this module's ``rnn_config(input_size)`` (e.g. from ``interop.flax_to_canonical`` with that
        config); a bias this module holds at zero must be zero to within ``atol``."""
        if not isinstance(params, RNNParams):
            raise TypeError(f"params is a {type(params).__name__}; expected an RNNParams (buffer and config)")
        parameters = self.parameters(params.config.input_size)
        _check_layout(params.config, parameters.config)
        weights, biases = params.to_canonical()
        return {"rnn_params": parameters.from_canonical(weights, biases, atol=atol)}

    @property
    def _units(self) -> int:
        return self.num_units if self.num_units is not None else self.features

    @nn.nowrap
    def initialize_carry(self, rng: Any, input_shape: tuple[int, ...]) -> Any:
        """The zero carry (``initial_carry`` to start a stream from), like Flax cells' ``initialize_carry``.

        ``rng`` is accepted for Flax's signature and unused (the carry is zero); ``input_shape`` is the shape of x or of
        one step's input (batch, features). Returns Flax's ``(c, h)`` for an LSTM, ``h`` otherwise: c
        [num_layers*D, B, num_units], h [num_layers*D, B, hidden], in the module's computation dtype.
        """
        del rng
        config = self.rnn_config(input_shape[-1])
        return zero_carry(config, _flax_core.carry_batch(input_shape, self.time_major), self.dtype or self.param_dtype)

    @nn.compact
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
        """Runs the network over x ([B, T, I], or [T, B, I] when ``time_major``); ``seq_lengths`` integers [B],
        ``initial_carry`` (``(c, h)`` for an LSTM, ``h`` otherwise), ``resets`` bool [B, T] ([T, B] when
        ``time_major``) and ``max_segments`` as in ``_flax_core.apply_rnn``; dropout applies unless ``deterministic``
        (this argument, else the field). Returns y [B, T, D*hidden] (time-major like x), or ``(carry, y)`` with
        ``return_carry``. At init, x's last axis sets the input size."""
        # x's last axis sizes the parameters at init: x_dims reports an x that is not a rank-3 array first
        input_size = _checks.x_dims(x, _flax_core.argument_names(self.time_major))[2]
        parameters = self.parameters(input_size)
        if self.has_variable("params", "rnn_params"):  # compare before Flax's own, less specific, shape check
            tree = self.get_variable("params", "rnn_params")
            _check_stored(tree, parameters, input_size)
        else:
            tree = self.param("rnn_params", self._init_tree, parameters)
        params = parameters.pieces(tree, "rnn_params")
        if deterministic is None:
            deterministic = True if self.deterministic is None else self.deterministic
        config = parameters.config
        dropout_key = None
        if not deterministic and ((config.dropout > 0 and config.num_layers > 1) or config.recurrent_dropout > 0):
            dropout_key = self.make_rng("dropout")
        return _flax_core.apply_rnn(
            params,
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
        )

    @nn.nowrap
    def _init_tree(self, key: jax.Array, parameters: Parameterization) -> dict[str, Any]:
        defaults = "flax" if self.bias_mode is None else "uniform"
        inits = (self.kernel_init, self.recurrent_kernel_init, self.bias_init)
        return _flax_core.init_tree(key, parameters, defaults, *inits)


def _rnn_params(params: Any) -> Any:
    """The named tree under ``rnn_params`` in ``variables``, ``variables["params"]``, or the tree itself."""
    if isinstance(params, Mapping) and "params" in params:
        params = params["params"]
    if isinstance(params, Mapping) and "rnn_params" in params:
        params = params["rnn_params"]
    return params


def _check_layout(given: Any, own: Any) -> None:
    differing = [f for f in (*LAYOUT_FIELDS, "dtype") if getattr(given, f) != getattr(own, f)]
    if differing:
        fields = ", ".join(f"{f}={getattr(given, f)!r} (module: {getattr(own, f)!r})" for f in differing)
        raise ValueError(f"params does not match this module: its config has {fields}")


def _check_stored(tree: Any, parameters: Parameterization, input_size: int) -> None:
    """The stored ``rnn_params`` against the module's: the tree of its tensors, made for inputs of ``input_size``."""
    if isinstance(tree, RNNParams):
        raise TypeError(
            "rnn_params is an RNNParams (one opaque buffer, the linen modules' parameters before 0.2); the modules "
            "now keep the named canonical tensors: convert with module.unpacked(params) (a module with "
            "bias_mode='double' holds exactly the tensors such a buffer trained)"
        )
    if isinstance(tree, Mapping) and _flax_core.is_named_tree(tree):
        config = parameters.config
        stored = _flax_core.tree_fields(tree)
        own = {field: getattr(config, field) for field in ("num_layers", "direction", "num_units", "proj_size")}
        own["gates"] = tuple(sorted(config.gate_names))
        differing = [field for field, value in own.items() if stored[field] != value]
        if differing:
            fields = ", ".join(f"{f}={stored[f]!r} (module: {own[f]!r})" for f in differing)
            raise ValueError(f"rnn_params does not match this module: the parameters have {fields}")
        size = _flax_core.layer_input_size(tree, config.num_units)
        if size != input_size and not config.skip_input:
            raise ValueError(
                f"x has {input_size} features (its last axis) but the module's parameters were made for "
                f"input_size={size}"
            )
    parameters.check(tree, "rnn_params")


class LSTM(RNN):
    """``RNN`` with mode "lstm": ``LSTM(num_units, **RNN's other fields)``; Flax's ``nn.LSTMCell`` parameters and
    carry ``(c, h)`` by default."""

    mode: str = "lstm"
    fixed_mode: ClassVar[str | None] = "lstm"


class GRU(RNN):
    """``RNN`` with mode "gru" (cuDNN's, ``nn.GRUCell``'s equations): ``GRU(num_units, **RNN's other fields)``;
    ``nn.GRUCell``'s parameters by default."""

    mode: str = "gru"
    fixed_mode: ClassVar[str | None] = "gru"
