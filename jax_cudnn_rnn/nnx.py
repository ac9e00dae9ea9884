"""Flax NNX modules over ``ops.rnn``: ``RNN`` (every mode), ``LSTM`` and ``GRU``, in NNX's language.

Built as ``nnx.LSTMCell`` is, sizes first: ``LSTM(in_features, num_units, *, rngs)`` (``hidden_features=``, nnx's
name, works too); NNX creates parameters eagerly, so the input size is a constructor argument. A module trains what
nnx's own cells train (``nnx.LSTMCell``: one bias per gate, on the recurrent side; ``nnx.GRUCell``: the input side's
three, its recurrent ``dense_h`` has none; ``nnx.SimpleCell``: one), initialised as they are (lecun_normal input
kernels, orthogonal recurrent kernels, zero biases; a GRU's three gates drawn at once), with Flax's carry ``(c, h)``,
and dropout follows ``nnx.Dropout``: active unless ``deterministic``, which ``model.eval()`` sets and
``model.train()`` clears. cuDNN's conventions are one argument away: ``bias_mode="double"`` (both biases of every
gate, PyTorch's initialisation). ``LSTM.from_cells`` takes trained nnx cells.

nnx.RNN's surface: ``RNN(nnx.LSTMCell(3, 64, rngs=...), return_carry=True)`` is ``nnx.RNN(cell, return_carry=True)``
with the loop over time fused: the module holds that cell (``model.cell``) and reads its Variables at every call, so
they are shared as ``nnx.RNN`` shares them (an optimizer of the module updates the cell; a value written into the cell
is what the next call runs), and its state is the cell's (``cell/ii/kernel``...). ``from_cells`` instead copies its
cells' values into the canonical tensors of a network it owns: a stack of several cells is one network of its own,
whose state the module holds as ``rnn_params`` (the tree a checkpoint of it keeps whatever cells it came from).
``time_major``, ``return_carry``, ``reverse``, ``keep_order`` and ``unroll`` as nnx.RNN takes them (constructor, and
the call's overrides); nnx.RNN's ``state_axes`` and ``broadcast_rngs`` at their defaults only.

The parameters are the named canonical tensors, one ``nnx.Param`` each, under ``self.rnn_params``
(``layer_{l}/{forward|backward}/{w_input|w_recurrent|b_input|b_recurrent}/{gate}``), so ``nnx.state(model)`` is that
named tree: a plain ``ocp.StandardCheckpointer`` writes and reads named canonical tensors, an optimizer's state mirrors
them, and optax masks can tell weights from biases by ``ndim`` or path. Each call packs them into the opaque buffer
(``model.params``, the ``RNNParams`` view). The math and the streaming contract (``initial_carry``/``return_carry``,
``resets``, ``initialize_carry``) are the linen modules' (jax_cudnn_rnn/flax.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jax_cudnn_rnn import _cell_params, _flax_apply, _flax_carry, _flax_core, _flax_surface, layout
from jax_cudnn_rnn._buffer import Pieces
from jax_cudnn_rnn.params import RNNParams

__all__ = ["GRU", "LSTM", "RNN"]

# flax >= 0.12 wants a container attribute that holds Variables marked as data; earlier versions took it as it is.
_data = getattr(nnx, "data", lambda value: value)

# nnx's cells by mode: their Linear layers per gate ({gate: (input layer, recurrent layer)}) or stacked (the gates'
# columns of one layer, in canonical order), and which of them has the bias.
_CELL_LAYERS = {
    "LSTMCell": {g: (f"i{g}" if g != "f" else "if_", f"h{g}") for g in "ifgo"},
    "SimpleCell": {"h": ("dense_i", "dense_h")},
}
_STACKED = {"OptimizedLSTMCell": "lstm", "GRUCell": "gru"}


class RNN(nnx.Module):
    """A stacked LSTM/GRU/RNN layer: ``RNN(in_features, num_units, *, mode="lstm", ..., rngs)``; arguments as the
    linen ``jax_cudnn_rnn.flax.RNN`` fields (``bias_mode`` and the initializers included, None meaning nnx's cells'
    own), plus ``in_features`` and ``rngs`` (``rngs.params`` initialises; ``rngs.dropout`` draws the dropout and
    ``recurrent_dropout`` masks when not deterministic); ``hidden_features`` is nnx's name for ``num_units``.
    ``deterministic`` defaults to False, as ``nnx.Dropout``'s does; ``model.eval()`` / ``model.train()`` set it.

    Or as ``nnx.RNN`` is, from an nnx cell (``LSTMCell``, ``OptimizedLSTMCell``, ``GRUCell``, ``SimpleCell`` with tanh
    or relu): ``RNN(cell, *, time_major=False, return_carry=False, reverse=False, keep_order=False, unroll=1,
    state_axes=None, broadcast_rngs=None, rngs=True, implementation=None, precision=None, algorithm=None)``, one layer
    sharing the cell's Variables (``rngs``: nnx.RNN's, the stream of the cell's ``initialize_carry``)."""

    #: The mode a subclass stands for (LSTM, GRU); None: any.
    fixed_mode: ClassVar[str | None] = None

    def __init__(
        self,
        in_features: Any,
        num_units: int | None = None,
        *,
        mode: str | None = None,
        num_layers: int = 1,
        direction: str = "unidirectional",
        input_mode: str = "linear_input",
        dropout: float = 0.0,
        proj_size: int = 0,
        cell_clip: float | None = None,
        bias_mode: str | None = None,
        precision: Any = None,
        algorithm: str | None = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        time_major: bool = False,
        implementation: str | None = None,
        deterministic: bool = False,
        kernel_init: Any = None,
        recurrent_kernel_init: Any = None,
        bias_init: Any = None,
        hidden_features: int | None = None,
        recurrent_dropout: float = 0.0,
        return_carry: bool = False,
        reverse: bool = False,
        keep_order: bool = False,
        unroll: int = 1,
        merge_fn: Any = None,
        state_axes: Any = None,
        broadcast_rngs: Any = None,
        rngs: Any = None,
    ):
        name = type(self).__name__
        _flax_surface.check_scan_options("nnx", name, state_axes=state_axes, broadcast_rngs=broadcast_rngs)
        _flax_surface.check_unroll(unroll)
        _flax_surface.check_flags(
            name, time_major=time_major, return_carry=return_carry, reverse=reverse, keep_order=keep_order
        )
        if merge_fn is not None and direction != "bidirectional":
            raise ValueError("merge_fn merges a bidirectional module's two directions; this module has one direction")
        self.time_major = time_major
        self.return_carry = return_carry
        self.reverse = reverse
        self.keep_order = keep_order
        self.unroll = unroll
        self.merge_fn = merge_fn
        self.precision = precision
        self.algorithm = algorithm
        self.implementation = implementation
        self.deterministic = deterministic
        if isinstance(in_features, nnx.Module):  # nnx.RNN(cell, ...)
            given = dict(
                num_units=num_units,
                mode=mode,
                num_layers=num_layers,
                direction=direction,
                input_mode=input_mode,
                dropout=dropout,
                proj_size=proj_size,
                cell_clip=cell_clip,
                bias_mode=bias_mode,
                dtype=dtype,
                param_dtype=param_dtype,
                kernel_init=kernel_init,
                recurrent_kernel_init=recurrent_kernel_init,
                bias_init=bias_init,
                hidden_features=hidden_features,
                recurrent_dropout=recurrent_dropout,
            )
            self._from_cell(in_features, given, rngs)
            return
        if not isinstance(rngs, nnx.Rngs):
            got = "" if rngs is None else f", got {type(rngs).__name__}"
            raise TypeError(f"{name} needs rngs=nnx.Rngs(...) to initialise its parameters{got}")
        if mode is None:
            mode = self.fixed_mode or "lstm"
        num_units = _flax_core.module_size(
            name, num_units, "hidden_features", hidden_features, mode, self.fixed_mode, "in_features, "
        )
        self.cell = None
        self.parameters = _flax_core.parameterization(
            "nnx",
            mode,
            num_units,
            num_layers,
            in_features,
            bias_mode,
            direction=direction,
            input_mode=input_mode,
            dropout=dropout,
            dtype=param_dtype,
            proj_size=proj_size,
            cell_clip=cell_clip,
            recurrent_dropout=recurrent_dropout,
        )
        self.config = self.parameters.config
        defaults = "nnx" if bias_mode is None else "uniform"
        inits = (kernel_init, recurrent_kernel_init, bias_init)
        tree = _flax_core.init_tree(rngs.params(), self.parameters, defaults, *inits)
        self.rnn_params = _data(jax.tree_util.tree_map(nnx.Param, tree))
        self.dtype = dtype
        self.param_dtype = param_dtype
        drops = (self.config.dropout > 0 and num_layers > 1) or self.config.recurrent_dropout > 0
        self.rngs = rngs if drops else None

    def _from_cell(self, cell: nnx.Module, given: dict[str, Any], rngs: Any) -> None:
        """A module of one layer holding ``cell`` (shared, as nnx.RNN holds it) and ``rngs`` as nnx.RNN keeps it."""
        network = _cell_params.cell_network(cell, "nnx", "cell")
        name = type(self).__name__
        if self.fixed_mode is not None and network.mode != self.fixed_mode:
            raise TypeError(
                f"cell is an nnx {network.kind}, which {name} does not run (it is the "
                f"{self.fixed_mode!r} module); use RNN(cell)"
            )
        defaults = dict.fromkeys(given) | {
            "num_layers": 1,
            "direction": "unidirectional",
            "input_mode": "linear_input",
            "dropout": 0.0,
            "proj_size": 0,
            "param_dtype": jnp.float32,
            "recurrent_dropout": 0.0,
        }
        _flax_surface.check_cell_fields(name, network.kind, given, defaults)
        self.cell = cell
        self.parameters = _flax_core.parameterization(
            "nnx",
            network.mode,
            network.num_units,
            1,
            network.in_features,
            None,
            dtype=cell.param_dtype,
            **network.fields,
        )
        self.config = self.parameters.config
        self.dtype = cell.dtype
        self.param_dtype = cell.param_dtype
        if rngs is None or rngs is True:
            rngs = nnx.RngStream(0, tag="carry")
        elif isinstance(rngs, nnx.Rngs):
            rngs = rngs.carry.fork()
        elif rngs is False:
            rngs = None
        elif not isinstance(rngs, nnx.RngStream):
            raise TypeError(
                f"rngs is a {type(rngs).__name__}; expected an nnx.Rngs, an RngStream or a bool (nnx.RNN's)"
            )
        self.rngs = _data(rngs)

    @property
    def params(self) -> RNNParams:
        """The parameters packed into the opaque buffer (the held biases zero), with its config (what ``rnn``
        runs)."""
        return RNNParams(self._pieces().buffer(), self.config)

    def _pieces(self) -> Pieces:
        """The named tensors' values as the buffer's pieces (what ``__call__`` runs): the cell's Variables as they
        are now for a module built from a cell."""
        if self.cell is not None:
            return _cell_params.nnx_pieces(self.cell, self.parameters, "cell")
        values = {name: param[...] for name, param in layout.flatten_tree(self.rnn_params).items()}
        return self.parameters.pieces(layout.unflatten_tree(values), "rnn_params")

    def initialize_carry(self, input_shape: tuple[int, ...], rngs: Any = None) -> Any:
        """The carry to start from (``initial_carry`` to start a stream from), like nnx cells' ``initialize_carry``.

        ``input_shape``: one step's input shape (batch..., features), as nnx's cells take it, or the whole x's (rank 3
        or more). A module built from a cell returns its cell's ``initialize_carry((*batch, features), rngs)``; others
        zeros (``rngs`` unused) in the computation dtype, Flax's ``(c, h)`` for an LSTM, ``h`` otherwise, in the form
        its call returns (the linen modules' ``initialize_carry`` says which).
        """
        batch_dims, features = _flax_carry.step_shape(input_shape, self.time_major)
        if self.cell is not None:
            return self.cell.initialize_carry((*batch_dims, features), self._carry_rngs(rngs))
        return _flax_carry.zeros(self.config, batch_dims, self.dtype or self.param_dtype)

    def _carry_rngs(self, rngs: Any) -> Any:
        """nnx.RNN's stream for a cell's ``initialize_carry``: the call's, else the module's."""
        rngs = self.rngs if rngs is None else rngs
        return rngs.carry.fork() if isinstance(rngs, nnx.Rngs) else rngs

    def __call__(
        self,
        x: jax.Array,
        seq_lengths: Any = None,
        initial_carry: Any = None,
        *,
        deterministic: bool | None = None,
        rngs: Any = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
        resets: Any = None,
        max_segments: int | None = None,
    ):
        """See ``_flax_apply.apply_rnn``: nnx.RNN's call (``return_carry``, ``time_major``, ``reverse``, ``keep_order``
        None keep the module's); the carry is ``(c, h)`` for an LSTM; ``resets`` [batch..., T] ([T, batch...] when
        time-major), bool or 0/1. Dropout applies unless ``deterministic`` (this argument, else the attribute), drawn
        from ``rngs`` (an ``nnx.Rngs``, a stream or a key; this argument, else the module's ``rngs.dropout``), as
        ``nnx.Dropout``; a module built from a cell takes ``rngs`` as nnx.RNN does, for the cell's
        ``initialize_carry``."""
        return_carry = _flax_surface.choose("return_carry", return_carry, self.return_carry)
        time_major = _flax_surface.choose("time_major", time_major, self.time_major)
        reverse = _flax_surface.choose("reverse", reverse, self.reverse)
        keep_order = _flax_surface.choose("keep_order", keep_order, self.keep_order)
        if deterministic is None:
            deterministic = self.deterministic
        config = self.config
        dropout_key = None
        default_carry = None
        compute_dtype = self.dtype or self.param_dtype
        if self.cell is not None:
            features = config.input_size
            carry_rngs = self._carry_rngs(rngs)
            default_carry = lambda batch: self.cell.initialize_carry((*batch, features), carry_rngs)  # noqa: E731
            if self.dtype is None and hasattr(x, "dtype"):
                compute_dtype = jnp.result_type(x.dtype, self.param_dtype)
        elif not deterministic and ((config.dropout > 0 and config.num_layers > 1) or config.recurrent_dropout > 0):
            dropout_key = _dropout_key(rngs if rngs is not None else self.rngs)
        return _flax_apply.apply_rnn(
            self._pieces(),
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
            input_size_name="in_features",
            reverse=reverse,
            keep_order=keep_order,
            merge_fn=self.merge_fn,
        )

    @classmethod
    def from_cells(cls, cells: Sequence[Sequence[Any]], **kwargs: Any) -> RNN:
        """A module holding the weights of ``cells[layer][direction]`` (one direction, or [forward, backward]) of
        nnx's ``LSTMCell``/``OptimizedLSTMCell`` (``LSTM``), ``GRUCell`` (``GRU``) or ``SimpleCell`` (``RNN``, tanh or
        relu), their sizes, dtype and biases (nnx's: the module trains what they train); ``kwargs``: the other
        constructor arguments (dropout, implementation, ...; ``rngs`` defaults to ``nnx.Rngs(0)``, used only for
        dropout). Errors name the cell and attribute that do not fit."""
        if isinstance(cells, (str, bytes)) or not isinstance(cells, Sequence) or not cells:
            raise TypeError(f"cells must be a non-empty list of lists cells[layer][direction], got {type(cells)}")
        first = cells[0][0] if isinstance(cells[0], Sequence) and cells[0] else None
        kind = type(first).__name__
        mode = _STACKED.get(kind, "lstm" if kind == "LSTMCell" else "rnn_tanh" if kind == "SimpleCell" else None)
        if mode is None:
            raise TypeError(
                f"cells[0][0] is a {kind}; expected an nnx LSTMCell, OptimizedLSTMCell, GRUCell or SimpleCell"
            )
        if kind == "SimpleCell":
            mode = {jax.nn.relu: "rnn_relu", jnp.tanh: "rnn_tanh", nnx.tanh: "rnn_tanh"}.get(first.activation_fn)
            if mode is None or getattr(first, "residual", False):
                raise ValueError("cells[0][0] is a SimpleCell with another activation than tanh or relu, or residual")
        if cls.fixed_mode is not None and mode != cls.fixed_mode:
            raise TypeError(f"cells[0][0] is a {kind}, which {cls.__name__} does not take (it holds {cls.fixed_mode})")
        directions = len(cells[0])
        if directions not in (1, 2):
            raise ValueError(f"cells[0] has {directions} cells; expected 1 (forward) or 2 (forward, backward)")
        kwargs.setdefault("rngs", nnx.Rngs(0))
        kwargs.setdefault("param_dtype", first.param_dtype)
        module = cls(
            first.in_features,
            first.hidden_features,
            mode=mode,
            num_layers=len(cells),
            direction="bidirectional" if directions == 2 else "unidirectional",
            **kwargs,
        )
        values = {}
        for layer, row in enumerate(cells):
            if len(row) != module.config.num_directions:
                raise ValueError(f"cells[{layer}] has {len(row)} cells; expected {directions}, as cells[0]")
            for direction, cell in enumerate(row):
                values.update(_cell_tensors(cell, f"cells[{layer}][{direction}]", kind, layer, direction, module))
        tree = module.parameters.tree({k: values[k] for k in module.parameters.shapes})
        module.parameters.check(tree, "cells")
        flat = layout.flatten_tree(module.rnn_params)
        for name, value in layout.flatten_tree(tree).items():
            _assign(flat[name], jnp.asarray(value, module.param_dtype))
        return module


def _assign(param: nnx.Param, value: jax.Array) -> None:
    try:
        param[...] = value  # flax >= 0.12
    except TypeError:  # earlier flax: no item assignment
        param.value = value


def _cell_tensors(cell: Any, where: str, kind: str, layer: int, direction: int, module: RNN) -> dict[str, Any]:
    """{canonical name: array} of one nnx cell, checked against the module's shapes."""
    if type(cell).__name__ != kind:
        raise TypeError(f"{where} is a {type(cell).__name__}; cells[0][0] is a {kind}")
    config = module.config
    prefix = f"layer_{layer}/{layout.DIRECTION_NAMES[direction]}"
    gates = config.gate_names

    def value(layer_name: str, attribute: str) -> np.ndarray:
        linear = getattr(cell, layer_name, None)
        param = getattr(linear, attribute, None)
        if param is None:
            raise ValueError(f"{where}.{layer_name}.{attribute} is missing")
        return np.asarray(param[...])

    out: dict[str, Any] = {}
    if kind in _STACKED:
        for side, group in (("dense_i", "w_input"), ("dense_h", "w_recurrent")):
            kernel = value(side, "kernel")
            units = kernel.shape[1] // len(gates)
            for k, gate in enumerate(gates):
                out[f"{prefix}/{group}/{gate}"] = kernel[:, k * units : (k + 1) * units].T
            linear = getattr(cell, side)
            if getattr(linear, "bias", None) is not None:
                bias = value(side, "bias")
                bias_group = "b_input" if side == "dense_i" else "b_recurrent"
                for k, gate in enumerate(gates):
                    out[f"{prefix}/{bias_group}/{gate}"] = bias[k * units : (k + 1) * units]
    else:
        for gate, (input_layer, recurrent_layer) in _CELL_LAYERS[kind].items():
            out[f"{prefix}/w_input/{gate}"] = value(input_layer, "kernel").T
            out[f"{prefix}/w_recurrent/{gate}"] = value(recurrent_layer, "kernel").T
            for layer_name, group in ((input_layer, "b_input"), (recurrent_layer, "b_recurrent")):
                if getattr(getattr(cell, layer_name), "bias", None) is not None:
                    out[f"{prefix}/{group}/{gate}"] = value(layer_name, "bias")
    expected = module.parameters.shapes
    for name, array in out.items():
        if name not in expected:
            raise ValueError(f"{where} has {name}, which the module does not train (bias_mode {config.bias_mode!r})")
        if array.shape != expected[name]:
            raise ValueError(f"{where}: {name} has shape {array.shape}; expected {expected[name]}")
    return out


_NO_DROPOUT_STREAM = (
    "dropout applies (deterministic=False) but the module has no rngs.dropout stream: build it with "
    "rngs=nnx.Rngs(params=..., dropout=...), pass rngs= to the call, or call model.eval()"
)


def _dropout_key(rngs: Any) -> jax.Array:
    """A key for this call's dropout masks from an ``nnx.Rngs`` (its dropout stream), a stream, or a key."""
    if rngs is None:
        raise ValueError(_NO_DROPOUT_STREAM)
    if isinstance(rngs, nnx.Rngs):
        try:
            stream = rngs.dropout
        except (AttributeError, KeyError):  # Rngs without a dropout stream (nnx raises either, by version)
            raise ValueError(_NO_DROPOUT_STREAM) from None
        return stream()
    if isinstance(rngs, jax.Array):
        return rngs
    if isinstance(rngs, nnx.RngStream):
        return rngs()
    raise TypeError(
        f"rngs must be an nnx.Rngs, an nnx.RngStream or a key (as nnx.Dropout's), got {type(rngs).__name__}"
    )


class LSTM(RNN):
    """``RNN`` with ``mode="lstm"``: ``LSTM(in_features, num_units, **RNN's keyword arguments)``."""

    fixed_mode: ClassVar[str | None] = "lstm"


class GRU(RNN):
    """``RNN`` with ``mode="gru"``: ``GRU(in_features, num_units, **RNN's keyword arguments)``."""

    fixed_mode: ClassVar[str | None] = "gru"
