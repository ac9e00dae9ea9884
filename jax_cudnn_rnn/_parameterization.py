"""A frontend's parameters on the kernels' weight space: which canonical tensors it trains, the rest held at zero.

Every implementation runs cuDNN's weight space. Flax's and Equinox's cells train fewer biases than cuDNN's double-bias
cells: where a gate's input and recurrent biases only add up they keep one (Flax's LSTM on the recurrent side, its
SimpleCell and Equinox's cells on the input side), and only the GRU's new-memory gate, whose recurrent bias sits inside
r * (R h + b_R), keeps both. A model ported from them trains as it did only if it trains exactly those (each
duplicated bias would get the gradient twice). Their modules therefore run the double-bias weight space with the
biases their library does not train held at zero: the space cuDNN's persistent algorithms run (they refuse a
single-bias one: jax_cudnn_rnn/backends/cudnn/algorithm.py), so that a frontend's default module takes the same fast
path as ``rnn()`` with cuDNN's double biases.

A ``Parameterization`` is that pair, the config and the biases held at zero (``"b_input/i"``, ``"b_recurrent/r"``:
group and gate). The frontend's parameters are the config's canonical tensors less the held ones, as the named tree
``layout.params_to_tree`` gives (``layer_{l}/{forward|backward}/{group}/{gate}``); ``pack`` assembles them into the
buffer with zeros in the held slots, which are constants: they receive no gradient and never train.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_cudnn_rnn import layout
from jax_cudnn_rnn._buffer import Pieces
from jax_cudnn_rnn.config import BIAS_MODES, RNNConfig


def _held(group: str, gates: str) -> tuple[str, ...]:
    return tuple(f"{group}/{gate}" for gate in gates)


#: Per library, per mode: the biases held at zero on the double-bias weight space, leaving what the library's own cells
#: train. linen's ``nn.LSTMCell``/``OptimizedLSTMCell`` and ``nnx.LSTMCell`` keep each gate's one bias on the recurrent
#: side (``hi``, ``hf``, ...), ``nn.SimpleCell``/``nnx.SimpleCell`` on the input side; linen's ``nn.GRUCell`` keeps r's
#: and z's on the input side and both of n's (``in``, ``hn``); ``nnx.GRUCell`` keeps the input side's three (its
#: ``dense_h`` has no bias); Equinox's cells add one ``bias`` per gate to the summed products, and the GRU's ``bias_n``
#: inside r * (...).
LIBRARY_BIASES: dict[str, dict[str, tuple[str, ...]]] = {
    "flax": {"lstm": _held("b_input", "ifgo"), "gru": _held("b_recurrent", "rz")},
    "nnx": {"lstm": _held("b_input", "ifgo"), "gru": _held("b_recurrent", "rzn")},
    "equinox": {"lstm": _held("b_recurrent", "ifgo"), "gru": _held("b_recurrent", "rz")},
}
for _table in LIBRARY_BIASES.values():
    for _mode in ("rnn_tanh", "rnn_relu"):
        _table.setdefault(_mode, _held("b_recurrent", "h"))
#: The reset-before GRU (Keras's; no Flax or Equinox cell, nor a cuDNN one, so no persistent kernel to reach) only adds
#: its biases up: one bias per gate, the input side's.
OWN_BIAS_MODES = {"gru_reset_before": "single_input"}


def library_biases(
    library: str, mode: str, bias_mode: str | None, use_bias: bool = True
) -> tuple[str, tuple[str, ...]]:
    """(the weight space's bias_mode, the biases held at zero) of a ``library`` frontend's module: its own cells'
    biases when ``bias_mode`` is None (on the double-bias space, the others held; none without ``use_bias``,
    Equinox's switch), else cuDNN's ``bias_mode`` as it is."""
    if bias_mode is None:
        if not use_bias:
            return "none", ()
        if mode in OWN_BIAS_MODES:
            return OWN_BIAS_MODES[mode], ()
        return "double", LIBRARY_BIASES[library].get(mode, ())  # an unknown mode: RNNConfig says which exist
    if bias_mode not in BIAS_MODES:
        raise ValueError(f"bias_mode is {bias_mode!r}; expected None (the {library} cells' own) or one of {BIAS_MODES}")
    if not use_bias and bias_mode != "none":
        raise ValueError(f"use_bias=False and bias_mode={bias_mode!r} contradict each other; pass one of them")
    return bias_mode, ()


@dataclasses.dataclass(frozen=True)
class Parameterization:
    """The tensors a frontend trains: ``config``'s canonical tensors less the biases ``held_biases`` names
    (``"group/gate"``: ``"b_input/i"``, ``"b_recurrent/r"``), which are zero in the buffer."""

    config: RNNConfig
    held_biases: tuple[str, ...] = ()

    def __post_init__(self):
        groups = {"b_input": self.config.has_input_bias, "b_recurrent": self.config.has_recurrent_bias}
        unknown = [
            name
            for name in self.held_biases
            if name.partition("/")[0] not in groups
            or not groups[name.partition("/")[0]]
            or name.partition("/")[2] not in self.config.gate_names
        ]
        if unknown:
            raise ValueError(
                f"held_biases names {unknown}; expected 'b_input/<gate>' or 'b_recurrent/<gate>' of a bias that "
                f"bias_mode {self.config.bias_mode!r} has, the gates of {self.config.mode!r} being "
                f"{list(self.config.gate_names)}"
            )

    def held(self, slot: layout.ParamSlot) -> bool:
        """Whether ``slot`` is held at zero (not a parameter)."""
        return slot.is_bias and f"{slot.group}/{self.config.gate_names[slot.gate]}" in self.held_biases

    def _held_words(self) -> str:
        return f"the biases {list(self.held_biases)} held at zero" if self.held_biases else "no bias held"

    @property
    def slots(self) -> tuple[layout.ParamSlot, ...]:
        """The trained tensors' slots, weights then biases in canonical order."""
        return _slots(self)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """{canonical name: shape} of the trained tensors."""
        return {slot.name(self.config): slot.shape for slot in self.slots}

    def check(self, tree: Any, argument: str) -> dict[str, Any]:
        """``tree`` flattened to {canonical name: array} after checking it holds exactly the trained tensors with
        their shapes; the ValueError/TypeError names ``argument`` and the path."""
        if not isinstance(tree, Mapping):
            raise TypeError(
                f"{argument} is a {type(tree).__name__}; expected the named tree of the canonical tensors "
                f"(layer_0/forward/w_input/..., as the module initialises it)"
            )
        flat = layout.flatten_tree(tree)
        expected = self.shapes
        missing, extra = sorted(set(expected) - set(flat)), sorted(set(flat) - set(expected))
        if missing or extra:
            held = f", {self._held_words()}" if self.held_biases else ""
            raise ValueError(
                f"{argument} does not match the module ({self.config.mode}, bias_mode {self.config.bias_mode!r}"
                f"{held}): missing {missing[:4]}{'...' if len(missing) > 4 else ''}, unexpected "
                f"{extra[:4]}{'...' if len(extra) > 4 else ''}"
            )
        for name, shape in expected.items():
            got = getattr(flat[name], "shape", None)
            if got is None:
                raise TypeError(f"{argument}['{name}'] must be an array, got {type(flat[name]).__name__}")
            if tuple(got) != shape:
                raise ValueError(f"{argument}['{name}'] has shape {tuple(got)}; expected {shape}")
        return flat

    def pieces(self, tree: Any, argument: str = "params") -> Pieces:
        """The trained tensors in ``tree`` as the buffer's ``Pieces`` (what the frontends run: the implementations
        that read the tensors themselves take them unpacked), after ``check``, each cast to ``config.dtype`` as
        ``pack`` casts them into the buffer: parameters kept in another dtype (a mixed-precision step's
        ``jax.tree.map(lambda a: a.astype(jnp.bfloat16), variables)``) compute in the module's dtype on every
        implementation, and their gradients come back in their own dtype."""
        flat = self.check(tree, argument)
        dtype = self.config.dtype
        arrays = [jnp.asarray(flat[slot.name(self.config)]) for slot in self.slots]
        return Pieces([a if a.dtype == dtype else a.astype(dtype) for a in arrays], self.slots, self.config)

    def pack(self, tree: Any, argument: str = "params") -> jax.Array:
        """The opaque buffer (``config.dtype``) of the trained tensors in ``tree``, zeros in the held slots: one
        concatenation, differentiable with respect to the tree's arrays only."""
        return self.pieces(tree, argument).buffer()

    def tree(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The named tree of {canonical name: array} for the trained tensors, in canonical order."""
        return layout.unflatten_tree({name: values[name] for name in self.shapes})

    def from_buffer(self, buffer: Any) -> dict[str, Any]:
        """The trained tensors of an opaque buffer of ``config`` as the named tree (the held slots dropped)."""
        weights, biases = layout.params_to_canonical(buffer, self.config)
        return self.from_canonical(weights, biases, check_held=False)

    def from_canonical(
        self, weights: Sequence[Any], biases: Sequence[Any], *, atol: float = 0.0, check_held: bool = True
    ) -> dict[str, Any]:
        """The named tree of canonical (weights, biases) lists of ``config``. A held bias must be zero (to within
        ``atol``) where it is concrete: a nonzero one has no place among these parameters (a model with both biases
        of every gate trains as it did with ``bias_mode="double"``)."""
        pairs = layout.check_canonical(weights, biases, self.config, check_dtype=False)
        values = {slot.name(self.config): tensor for slot, tensor in pairs}
        for slot, tensor in pairs:
            if check_held and self.held(slot) and not isinstance(tensor, jax.core.Tracer):
                worst = float(np.max(np.abs(np.asarray(tensor, np.float64)))) if np.size(tensor) else 0.0
                if worst > atol:
                    other = "recurrent" if slot.group == "b_input" else "input"
                    raise ValueError(
                        f"{slot.name(self.config)} is {worst} at most, but this module holds {self._held_words()} "
                        f"(the {self.config.mode.upper()} cells it follows have none there); fold it into the {other} "
                        f"bias, or build the module with bias_mode='double'"
                    )
        return self.tree({name: jnp.asarray(values[name]) for name in self.shapes})

    def to_canonical(self, tree: Any, argument: str = "params") -> tuple[list[jax.Array], list[jax.Array]]:
        """Canonical (weights, biases) lists of ``config`` from the named tree, zeros for the held biases."""
        return layout.params_to_canonical(self.pack(tree, argument), self.config)


@functools.cache
def _slots(parameterization: Parameterization) -> tuple[layout.ParamSlot, ...]:
    weights, biases = layout.param_slots(parameterization.config)
    return tuple(slot for slot in weights + biases if not parameterization.held(slot))
