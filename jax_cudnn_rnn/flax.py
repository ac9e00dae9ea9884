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

nn.RNN's call surface: ``RNN(nn.LSTMCell(64), return_carry=True)`` is ``nn.RNN(nn.LSTMCell(64),
return_carry=True)`` with the loop over time fused: the module holds that cell and its parameters where ``nn.RNN``
holds them (``params["cell"]["hi"]["kernel"]``: a trained ``nn.RNN``'s parameters load as they are), initialises them
with the cell's own initializers and carries the cell's carry. ``time_major``, ``return_carry``, ``reverse``,
``keep_order`` and ``unroll`` are fields, and the call overrides them as ``nn.RNN``'s does (``init_key`` too); x may
have any number of leading batch axes, or none ([time, features]); the module works inside ``nn.Bidirectional``,
``nn.remat``, ``nn.vmap`` and ``nn.jit``. What ``nn.RNN`` does that a fused kernel cannot (another cell, a scan over
variables: ``variable_axes``, ``variable_carry``, ...) is refused with what to do instead. The one difference: outputs
past a sequence's ``seq_lengths`` are zero (``nn.RNN`` runs the cell over the padding and returns what it gives).

Streaming: ``initial_carry`` and ``return_carry`` as in ``flax.linen.RNN``. For a unidirectional network, a sequence fed
window by window, each window's final carry passed on as the next one's ``initial_carry``, gives exactly the outputs,
final carry and gradients of one call over the whole sequence, with ``seq_lengths`` counted per window (a window past a
sequence's end has length 0 and passes its carry through) and ``resets`` sliced per window. ``initialize_carry`` makes
the zero carry to start from. (A bidirectional network's backward direction reads a window from its end, so it cannot
stream.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.core import FrozenDict

from jax_cudnn_rnn import _cell_params, _flax_apply, _flax_carry, _flax_core, _flax_port, _flax_surface
from jax_cudnn_rnn._flax_carry import zero_carry
from jax_cudnn_rnn._parameterization import Parameterization
from jax_cudnn_rnn.config import LAYOUT_FIELDS
from jax_cudnn_rnn.params import RNNParams

__all__ = ["GRU", "LSTM", "RNN", "zero_carry"]

#: The fields a module built from a cell takes from it, at their defaults.
_CELL_FIELDS = {
    "num_units": None,
    "features": None,
    "num_layers": 1,
    "direction": "unidirectional",
    "input_mode": "linear_input",
    "dropout": 0.0,
    "proj_size": 0,
    "cell_clip": None,
    "bias_mode": None,
    "dtype": None,
    "param_dtype": jnp.float32,
    "kernel_init": None,
    "recurrent_kernel_init": None,
    "bias_init": None,
    "recurrent_dropout": 0.0,
}


class RNN(nn.Module):
    """A stacked LSTM/GRU/RNN layer on cuDNN's fused kernels (GPU), oneDNN's (CPU) or the pure-JAX implementation.

    Built as Flax's cells are, size first: ``RNN(64, mode="gru")``, ``LSTM(64)``, ``GRU(64, num_layers=2)``; or as
    ``nn.RNN`` is, from a Flax cell: ``RNN(nn.LSTMCell(64))`` (``nn.OptimizedLSTMCell``, ``nn.GRUCell``,
    ``nn.SimpleCell`` with tanh or relu), one layer holding the cell and its parameters under ``cell`` as ``nn.RNN``
    does (see the module docstring).

    Attributes:
      num_units: hidden size H (Flax's ``features``, accepted as a keyword too), or a Flax cell (``cell``).
      mode: "lstm", "gru", "rnn_tanh" or "rnn_relu" (or "gru_reset_before"); ``LSTM`` and ``GRU`` fix it.
      num_layers: stacked layers.
      direction: "unidirectional" or "bidirectional" (outputs concatenated, forward first: D*H features, or
        ``merge_fn``'s).
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
      time_major: False (default): x is [batch..., T, I]; True: [T, batch..., I] (nn.RNN's).
      implementation: ``rnn``'s (None: the fastest one installed that runs the call).
      deterministic: default for ``__call__``'s argument; True when both are None (Flax's ``nn.Dropout`` convention).
      kernel_init, recurrent_kernel_init, bias_init: Flax's initializers (``init(key, shape, dtype)``) of the input
        matrices, the recurrent matrices and the biases, called per gate as for ``nn.LSTMCell``
        (``_flax_core.init_tree`` says exactly how; a dict by gate name sets single gates).
      features: Flax's name for ``num_units``.
      cell: the Flax cell of a module built from one (given as the first argument, as to ``nn.RNN``).
      return_carry, reverse, keep_order, unroll: nn.RNN's (``unroll`` accepted and without effect: the kernels fuse
        every step).
      merge_fn: a bidirectional module's ``merge_fn(forward outputs, backward outputs)`` (nn.Bidirectional's; None:
        concatenated, forward first).
      variable_axes, variable_broadcast, variable_carry, split_rngs: nn.RNN's arguments of ``nn.scan``, accepted at
        their defaults (what the fused network is) and refused otherwise.

    ``__call__(x, seq_lengths=None, initial_carry=None, *, init_key=None, return_carry=None, time_major=None,
    reverse=None, keep_order=None, deterministic=None, resets=None, max_segments=None)``: nn.RNN's call (its overrides
    None: the fields'), see ``_flax_apply.apply_rnn``. The carry is Flax's ``(c, h)`` for an LSTM, ``h`` otherwise:
    the cell's [batch..., hidden] for one layer and one direction, ``nn.Bidirectional``'s pair of them for one
    bidirectional layer, [num_layers*D, batch..., hidden] for a stack (which every module also takes).
    ``initialize_carry(rng, input_shape)`` gives the zero carry; ``zero_carry(variables, batch)`` gives it from the
    parameters alone (a module nested in another).
    """

    num_units: int | nn.Module | None = None
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
    cell: nn.Module | None = None
    return_carry: bool = False
    reverse: bool = False
    keep_order: bool = False
    unroll: int = 1
    merge_fn: Callable[[Any, Any], Any] | None = None
    variable_axes: Mapping[Any, Any] = FrozenDict()
    variable_broadcast: Any = "params"
    variable_carry: Any = False
    split_rngs: Mapping[Any, bool] = FrozenDict({"params": False})

    #: The mode a subclass stands for (LSTM, GRU); None: any.
    fixed_mode: ClassVar[str | None] = None

    def __post_init__(self):
        if isinstance(self.num_units, nn.Module):  # RNN(nn.LSTMCell(64)), nn.RNN's signature
            if self.cell is not None:
                raise TypeError("RNN got two cells, one as its first argument and one as cell=; pass one")
            object.__setattr__(self, "cell", self.num_units)
            object.__setattr__(self, "num_units", None)
        name = type(self).__name__
        if self.cell is not None:
            network = _cell_params.cell_network(self.cell, "linen")
            if self.fixed_mode is not None and network.mode != self.fixed_mode:
                raise TypeError(
                    f"cell is a {network.kind}, which {name} does not run (it is the {self.fixed_mode!r} "
                    f"module); use RNN({network.kind}(...))"
                )
            if self.fixed_mode is None and self.mode not in ("lstm", network.mode):
                raise ValueError(
                    f"mode is {self.mode!r} but the cell is a {network.kind} ({network.mode!r}); leave mode out"
                )
            given = {field: getattr(self, field) for field in _CELL_FIELDS}
            _flax_surface.check_cell_fields(name, network.kind, given, _CELL_FIELDS)
        else:
            _flax_core.module_size(name, self.num_units, "features", self.features, self.mode, self.fixed_mode)
        _flax_surface.check_scan_options(
            "linen",
            name,
            variable_axes=self.variable_axes,
            variable_broadcast=self.variable_broadcast,
            variable_carry=self.variable_carry,
            split_rngs=self.split_rngs,
        )
        _flax_surface.check_unroll(self.unroll)
        _flax_surface.check_flags(
            name,
            time_major=self.time_major,
            return_carry=self.return_carry,
            reverse=self.reverse,
            keep_order=self.keep_order,
        )
        if self.merge_fn is not None and self.direction != "bidirectional":
            raise ValueError("merge_fn merges a bidirectional module's two directions; this module has one direction")
        super().__post_init__()

    @nn.nowrap
    def parameters(self, input_size: int) -> Parameterization:
        """What this module trains for inputs of ``input_size`` features: the kernels' ``RNNConfig`` (its buffer in
        ``param_dtype``, a cell's own for a module built from one) and the biases held at zero."""
        if self.cell is not None:
            network = _cell_params.cell_network(self.cell, "linen")
            return _flax_core.parameterization(
                "flax",
                network.mode,
                network.num_units,
                1,
                input_size,
                None,
                dtype=self.cell.param_dtype,
                **network.fields,
            )
        return _flax_core.parameterization(
            "flax",
            self.mode,
            self._units,
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
        ``variables``, ``variables["params"]`` or the named tree itself (a module built from a cell: the cell's tree).
        For the interop converters and ``rnn()``."""
        tree = _own_params(params, self.cell is not None)
        if self.cell is not None:
            parameters = _cell_parameterization(self.cell, tree, "params['cell']")
            named = _cell_params.from_linen(tree, parameters.config.mode, parameters.shapes)
            return RNNParams(parameters.pack(parameters.tree(named), "cell"), parameters.config)
        parameters = self.parameters(_flax_core.layer_input_size(tree, self._units))
        return RNNParams(parameters.pack(tree, "rnn_params"), parameters.config)

    @nn.nowrap
    def unpacked(self, params: RNNParams, *, atol: float = 0.0) -> dict[str, Any]:
        """This module's ``params`` collection (``{"rnn_params": named tree}``, a module built from a cell
        ``{"cell": the cell's tree}``) holding ``params``' tensors, whose config must be this module's
        ``rnn_config(input_size)`` (e.g. from ``interop.flax_to_canonical`` with that config); a bias this module
        holds at zero must be zero to within ``atol``."""
        if not isinstance(params, RNNParams):
            raise TypeError(f"params is a {type(params).__name__}; expected an RNNParams (buffer and config)")
        parameters = self.parameters(params.config.input_size)
        _check_layout(params.config, parameters.config)
        weights, biases = params.to_canonical()
        tree = parameters.from_canonical(weights, biases, atol=atol)
        if self.cell is not None:
            return {"cell": _cell_params.to_linen(_flatten(tree), parameters.config.mode)}
        return {"rnn_params": tree}

    @nn.nowrap
    def params_from_flax(self, params: Any, path: Any = None) -> dict[str, Any]:
        """This module's ``params`` collection holding a trained Flax model's recurrent parameters, in one call:
        ``nn.RNN``'s tree (``{"cell": ...}``), a bare cell's (as ``@nn.compact`` keeps a cell built in its parent:
        ``params["GRUCell_0"]``), ``nn.Bidirectional``'s, a stack of those (keys ending in the layer's index: layer_0,
        RNN_1, ...; or a list), at ``path`` ("encoder/RNN_0", or a sequence of keys) in ``params`` (a whole model's
        ``params`` or ``variables``). The cells must be the module's (mode, layers, directions, num_units; the input
        size is theirs); every error names the path and what was expected. A module built from a cell gets that tree
        as it is; any other its named tensors, Flax's biases where its ``bias_mode`` keeps them
        (jax_cudnn_rnn/_flax_port.py). Apply with ``module.apply({"params": result}, x)``."""
        return _flax_port.from_flax(self, params, path)

    @nn.nowrap
    def params_to_flax(self, params: Any) -> Any:
        """This module's parameters (``variables``, ``variables["params"]`` or its own tree) as Flax's own layer of
        the same network keeps them, the inverse of ``params_from_flax``: one layer of one direction
        ``nn.RNN(cell)``'s ``{"cell": ...}``, one bidirectional layer ``nn.Bidirectional``'s ``{"forward_rnn": ...,
        "backward_rnn": ...}``, a stack ``interop.flax_cells.FlaxCellStack``'s ``{"layer_0": ..., ...}`` (the
        cells' biases summed where this module keeps two)."""
        return _flax_port.to_flax(self, params)

    @property
    def _units(self) -> int:
        return self.num_units if self.num_units is not None else self.features

    @nn.nowrap
    def initialize_carry(self, rng: Any, input_shape: tuple[int, ...]) -> Any:
        """The carry to start from (``initial_carry`` to start a stream from), like Flax cells' ``initialize_carry``.

        ``input_shape``: one step's input shape (batch..., features), as Flax's cells take it, or the whole x's
        (rank 3 or more: [batch..., T, features], time-major [T, batch..., features]). A module built from a cell
        returns the cell's ``initialize_carry(rng, (*batch, features))`` (``rng`` None: ``jax.random.key(0)``);
        any other zeros, ``rng`` unused, in the computation dtype: Flax's ``(c, h)`` for an LSTM, ``h`` otherwise, in
        the form its call returns (the cell's [batch..., hidden] for one layer and one direction, nn.Bidirectional's
        pair of them for one bidirectional layer, [num_layers*D, batch..., hidden] for a stack).
        """
        batch_dims, features = _flax_carry.step_shape(input_shape, self.time_major)
        if self.cell is not None:
            return self.cell.initialize_carry(jax.random.key(0) if rng is None else rng, (*batch_dims, features))
        config = self.rnn_config(features)
        return _flax_carry.zeros(config, batch_dims, self.dtype or self.param_dtype)

    @nn.compact
    def __call__(
        self,
        x: jax.Array,
        seq_lengths: Any = None,
        initial_carry: Any = None,
        *,
        init_key: Any = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
        deterministic: bool | None = None,
        resets: Any = None,
        max_segments: int | None = None,
    ):
        """Runs the network over x ([batch..., T, I], or [T, batch..., I] when time-major, or one sequence [T, I]);
        ``seq_lengths`` integers [batch...], ``initial_carry`` (Flax's ``(c, h)`` for an LSTM, ``h`` otherwise),
        ``resets`` [batch..., T] ([T, batch...] time-major; bool or 0/1) and ``max_segments`` as in
        ``_flax_apply.apply_rnn``; ``return_carry``, ``time_major``, ``reverse``, ``keep_order``: nn.RNN's overrides of
        the fields (None keeps the field's); ``init_key``: the key of the cell's ``initialize_carry`` when no carry is
        given (nn.RNN's; a module built by size starts from zeros). Dropout applies unless ``deterministic`` (this
        argument, else the field). Returns y [batch..., T, D*hidden] (time-major like x), or ``(carry, y)`` with
        ``return_carry``. At init, x's last axis sets the input size."""
        return_carry = _flax_surface.choose("return_carry", return_carry, self.return_carry)
        time_major = _flax_surface.choose("time_major", time_major, self.time_major)
        reverse = _flax_surface.choose("reverse", reverse, self.reverse)
        keep_order = _flax_surface.choose("keep_order", keep_order, self.keep_order)
        shape = getattr(x, "shape", None)
        if shape is None or not hasattr(x, "dtype"):
            raise TypeError(f"x must be an array, got {type(x).__name__}")
        if len(shape) < 2:
            layout = "time, *batch" if time_major else "*batch, time"
            raise ValueError(f"x has shape {tuple(shape)}; expected ({layout}, features), or (time, features)")
        input_size = shape[-1]  # x's last axis sizes the parameters at init
        default_carry = None
        if self.cell is not None:
            parameters, params = self._cell_pieces(x, time_major)
            key = jax.random.key(0) if init_key is None else init_key
            default_carry = lambda batch: self.cell.initialize_carry(key, (*batch, input_size))  # noqa: E731
            compute_dtype = self.cell.dtype or jnp.result_type(x.dtype, self.cell.param_dtype)
        else:
            parameters = self.parameters(input_size)
            if self.has_variable("params", "rnn_params"):  # compare before Flax's own, less specific, shape check
                tree = self.get_variable("params", "rnn_params")
                _check_stored(tree, parameters, input_size)
            else:
                tree = self.param("rnn_params", self._init_tree, parameters)
            params = parameters.pieces(tree, "rnn_params")
            compute_dtype = self.dtype or self.param_dtype
        if deterministic is None:
            deterministic = True if self.deterministic is None else self.deterministic
        config = parameters.config
        dropout_key = None
        if not deterministic and ((config.dropout > 0 and config.num_layers > 1) or config.recurrent_dropout > 0):
            dropout_key = self.make_rng("dropout")
        return _flax_apply.apply_rnn(
            params,
            x,
            compute_dtype=compute_dtype,
            time_major=time_major,
            seq_lengths=seq_lengths,
            initial_carry=initial_carry,
            default_carry=default_carry,
            dropout_key=dropout_key,
            implementation=self.implementation,
            precision=self.precision,
            algorithm=self.algorithm,
            return_carry=return_carry,
            resets=resets,
            max_segments=max_segments,
            reverse=reverse,
            keep_order=keep_order,
            merge_fn=self.merge_fn,
        )

    @nn.nowrap
    def _cell_pieces(self, x: jax.Array, time_major: bool) -> tuple[Parameterization, Any]:
        """(the parameterization, the pieces) of a module built from a cell: the cell's parameters, which the cell
        itself creates at init by one step (its initializers and dtypes, under its scope ``cell`` as with
        ``nn.RNN``)."""
        mode = _cell_params.cell_network(self.cell, "linen").mode
        first = next(iter(_cell_params.LINEN_NAMES[mode][0].values()))
        if self.is_mutable_collection("params") and not self.cell.has_variable("params", first):
            step = x[0] if time_major or x.ndim == 2 else x[..., 0, :]
            self.cell(self.cell.initialize_carry(jax.random.key(0), step.shape), step)
        tree = self.cell.variables.get("params", {})
        parameters = _cell_parameterization(self.cell, tree, "params['cell']", x.shape[-1])
        return parameters, _cell_params.linen_pieces(tree, parameters)

    @nn.nowrap
    def _init_tree(self, key: jax.Array, parameters: Parameterization) -> dict[str, Any]:
        defaults = "flax" if self.bias_mode is None else "uniform"
        inits = (self.kernel_init, self.recurrent_kernel_init, self.bias_init)
        return _flax_core.init_tree(key, parameters, defaults, *inits)


def _own_params(params: Any, from_cell: bool) -> Any:
    """The module's own tree in ``variables``, ``variables["params"]`` or the tree itself: the named tree under
    ``rnn_params``, or a module built from a cell the cell's under ``cell``."""
    key = "cell" if from_cell else "rnn_params"
    if isinstance(params, Mapping) and "params" in params:
        params = params["params"]
    if isinstance(params, Mapping) and key in params:
        params = params[key]
    return params


def _flatten(tree: Any) -> dict[str, Any]:
    from jax_cudnn_rnn import layout

    return layout.flatten_tree(tree)


def _cell_parameterization(cell: nn.Module, tree: Any, where: str, input_size: int | None = None) -> Parameterization:
    """The parameterization of a linen cell's parameter ``tree``, after checking that it holds exactly the cell's
    parameters with their shapes for inputs of ``input_size`` features (None: its input kernels' size); the
    ValueError names the path from ``where``."""
    network = _cell_params.cell_network(cell, "linen")
    if not isinstance(tree, Mapping):
        raise TypeError(f"{where} is a {type(tree).__name__}; expected {network.kind}'s parameter tree")
    if input_size is None:
        first = tree.get(next(iter(_cell_params.LINEN_NAMES[network.mode][0].values())), {})
        input_size = int(getattr(first.get("kernel") if isinstance(first, Mapping) else None, "shape", (1,))[0])
    parameters = _flax_core.parameterization(
        "flax", network.mode, network.num_units, 1, input_size, None, dtype=cell.param_dtype, **network.fields
    )
    _cell_params.check_linen_tree(tree, network, parameters.shapes, where)
    return parameters


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
