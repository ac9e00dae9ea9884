"""Flax NNX modules over ``ops.rnn``: ``RNN`` (every mode), ``LSTM`` and ``GRU``, in NNX's language.

Built as ``nnx.LSTMCell`` is, sizes first: ``LSTM(in_features, num_units, *, rngs)`` (``hidden_features=``, nnx's
name, works too); NNX creates parameters eagerly, so the input size is a constructor argument. A module trains what
nnx's own cells train (``nnx.LSTMCell``: one bias per gate, on the recurrent side; ``nnx.GRUCell``: the input side's
three, its recurrent ``dense_h`` has none; ``nnx.SimpleCell``: one), initialised as they are (lecun_normal input
kernels, orthogonal recurrent kernels, zero biases; a GRU's three gates drawn at once), with Flax's carry ``(c, h)``,
and dropout follows ``nnx.Dropout``: active unless ``deterministic``, which ``model.eval()`` sets and
``model.train()`` clears. cuDNN's conventions are one argument away: ``bias_mode="double"`` (both biases of every
gate, PyTorch's initialisation). ``LSTM.from_cells`` takes trained nnx cells.

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

from jax_cudnn_rnn import _flax_core, layout
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
    ``deterministic`` defaults to False, as ``nnx.Dropout``'s does; ``model.eval()`` / ``model.train()`` set it."""

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
        rngs: nnx.Rngs,
    ):
        if mode is None:
            mode = self.fixed_mode or "lstm"
        num_units = _flax_core.module_size(
            type(self).__name__, num_units, "hidden_features", hidden_features, mode, self.fixed_mode, "in_features, "
        )
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
        self.precision = precision
        self.algorithm = algorithm
        defaults = "nnx" if bias_mode is None else "uniform"
        inits = (kernel_init, recurrent_kernel_init, bias_init)
        tree = _flax_core.init_tree(rngs.params(), self.parameters, defaults, *inits)
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
        """The parameters packed into the opaque buffer (the held biases zero), with its config (what ``rnn``
        runs)."""
        return RNNParams(self._pieces().buffer(), self.config)

    def _pieces(self) -> Pieces:
        """The named tensors' values as the buffer's pieces (what ``__call__`` runs)."""
        values = {name: param[...] for name, param in layout.flatten_tree(self.rnn_params).items()}
        return self.parameters.pieces(layout.unflatten_tree(values), "rnn_params")

    def initialize_carry(self, input_shape: tuple[int, ...], rngs: Any = None) -> Any:
        """The zero carry (``initial_carry`` to start a stream from), like nnx cells' ``initialize_carry``.

        ``input_shape`` is the shape of x or of one step's input (batch, features); ``rngs`` is accepted for nnx's
        signature and unused (the carry is zero). Returns Flax's ``(c, h)`` for an LSTM, ``h`` otherwise: c
        [num_layers*D, B, num_units], h [num_layers*D, B, hidden], in the module's computation dtype.
        """
        del rngs
        batch = _flax_core.carry_batch(input_shape, self.time_major)
        return _flax_core.zero_carry(self.config, batch, self.dtype or self.param_dtype)

    def __call__(
        self,
        x: jax.Array,
        seq_lengths: Any = None,
        initial_carry: Any = None,
        *,
        deterministic: bool | None = None,
        rngs: Any = None,
        return_carry: bool = False,
        resets: Any = None,
        max_segments: int | None = None,
    ):
        """See ``_flax_core.apply_rnn``: the carry is ``(c, h)`` for an LSTM; ``resets`` bool [B, T] ([T, B] when
        time_major). Dropout applies unless ``deterministic`` (this argument, else the attribute), drawn from
        ``rngs`` (an ``nnx.Rngs``, a stream or a key; this argument, else the module's ``rngs.dropout``), as
        ``nnx.Dropout``."""
        if deterministic is None:
            deterministic = self.deterministic
        config = self.config
        dropout_key = None
        if not deterministic and ((config.dropout > 0 and config.num_layers > 1) or config.recurrent_dropout > 0):
            dropout_key = _dropout_key(rngs if rngs is not None else self.rngs)
        return _flax_core.apply_rnn(
            self._pieces(),
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
        kwargs.setdefault("rngs", nnx.Rngs(0))
        kwargs.setdefault("param_dtype", first.param_dtype)
        module = cls(
            first.in_features,
            first.hidden_features,
            mode=mode,
            num_layers=len(cells),
            direction="bidirectional" if len(cells[0]) == 2 else "unidirectional",
            **kwargs,
        )
        values = {}
        for layer, row in enumerate(cells):
            if len(row) != module.config.num_directions:
                raise ValueError(f"cells[{layer}] has {len(row)} cells; cells[0] has {module.config.num_directions}")
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


def _dropout_key(rngs: Any) -> jax.Array:
    """A key for this call's dropout masks from an ``nnx.Rngs`` (its dropout stream), a stream, or a key."""
    if rngs is None:
        raise ValueError(
            "dropout applies (deterministic=False) but the module has no rngs.dropout stream: build it with "
            "rngs=nnx.Rngs(params=..., dropout=...), pass rngs= to the call, or call model.eval()"
        )
    if isinstance(rngs, nnx.Rngs):
        return rngs.dropout()
    if isinstance(rngs, jax.Array):
        return rngs
    return rngs()


class LSTM(RNN):
    """``RNN`` with ``mode="lstm"``: ``LSTM(in_features, num_units, **RNN's keyword arguments)``."""

    fixed_mode: ClassVar[str | None] = "lstm"


class GRU(RNN):
    """``RNN`` with ``mode="gru"``: ``GRU(in_features, num_units, **RNN's keyword arguments)``."""

    fixed_mode: ClassVar[str | None] = "gru"
