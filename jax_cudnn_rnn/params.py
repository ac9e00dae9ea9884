"""``RNNParams``: the opaque buffer together with the config that gives it meaning, as a pytree.

The buffer is the only child and the ``RNNConfig`` is static aux data, so ``jax.tree.map`` (and every optax
transformation built on it) returns an ``RNNParams`` of the same config: Adam's ``mu`` and ``nu`` mirror the params
and stay recognisable, which is what lets the Orbax handler (``checkpoint.py``) find every buffer in a whole training
state and write it in canonical form.

Construction checks the buffer's shape and dtype against the config; unflattening does not (JAX puts tracers,
``jax.ShapeDtypeStruct``, ``None`` or sentinel objects there while transforming trees).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import RNNConfig, check_config

__all__ = ["bias_mask", "is_rnn_params", "param_labels"]


@jax.tree_util.register_pytree_with_keys_class
class RNNParams:
    """One stacked RNN's parameters: ``buffer`` (1-D, ``params_size(config)`` elements of ``config.dtype``, cuDNN's
    weight space) and ``config`` (static).

    ``jax.tree_util.tree_leaves(p) == [p.buffer]``; two RNNParams with different configs have different tree
    structures, so mixing them up in a tree operation fails loudly instead of silently.
    """

    __slots__ = ("buffer", "config")

    def __init__(self, buffer: Any, config: RNNConfig):
        check_config(config)
        shape = getattr(buffer, "shape", None)
        if shape is None or not hasattr(buffer, "dtype"):
            raise TypeError(f"buffer must be an array (or jax.ShapeDtypeStruct), got {type(buffer).__name__}")
        size = layout.params_size(config)
        if tuple(shape) != (size,):
            raise ValueError(
                f"buffer has shape {tuple(shape)}; expected ({size},) = (params_size(config),) for {config}"
            )
        if np.dtype(buffer.dtype) != config.dtype:
            raise TypeError(
                f"buffer has dtype {np.dtype(buffer.dtype).name}; expected {config.dtype.name} (config.dtype)"
            )
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "config", config)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"RNNParams is immutable; build a new one (tried to set {name!r})")

    def __reduce__(self):
        # pickle's default sets the slots through __setattr__, which refuses; rebuild the way pytrees do instead
        return RNNParams.tree_unflatten, (self.config, (self.buffer,))

    # Pytree protocol: the buffer is the only child, the config the aux data.
    def tree_flatten_with_keys(self):
        """Pytree protocol: the buffer, under the key ``buffer``, is the only child; the config is static aux data."""
        return ((jax.tree_util.GetAttrKey("buffer"), self.buffer),), self.config

    def tree_flatten(self):
        """Pytree protocol: ``((buffer,), config)``."""
        return (self.buffer,), self.config

    @classmethod
    def tree_unflatten(cls, config: RNNConfig, children: Sequence[Any]) -> RNNParams:
        """Pytree protocol: rebuilds from ``tree_flatten``'s output without checks (the child may be a tracer or an
        optimizer's state leaf of any shape)."""
        self = object.__new__(cls)
        (buffer,) = children
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "config", config)
        return self

    # Constructors.
    @classmethod
    def init(cls, key: jax.Array, config: RNNConfig, *, scale: float | None = None) -> RNNParams:
        """Fresh params, every weight and bias from U(-k, k), k = 1/sqrt(hidden_size) (``layout.init_params``)."""
        return cls(layout.init_params(key, config, scale=scale), config)

    @classmethod
    def from_canonical(cls, weights: Sequence[Any], biases: Sequence[Any], config: RNNConfig) -> RNNParams:
        """From canonical (weights, biases) lists (docs/architecture.md's order); errors name the first tensor that
        is wrong."""
        return cls(layout.canonical_to_params(weights, biases, config), config)

    @classmethod
    def from_tree(cls, tree: Any, config: RNNConfig) -> RNNParams:
        """From the canonical named tree ``layer_{l}/{forward|backward}/{w_input|w_recurrent|b_input|b_recurrent}/
        {gate}`` (``to_tree``'s output); errors name the missing, unexpected or misshapen paths."""
        return cls(layout.tree_to_params(tree, config), config)

    # Views.
    def to_canonical(self) -> tuple[list[jax.Array], list[jax.Array]]:
        """(weights, biases): matrices [H, in] and biases [H] in canonical order."""
        return layout.params_to_canonical(self.buffer, self.config)

    def to_tree(self) -> dict[str, Any]:
        """The canonical named tree, e.g. ``p.to_tree()['layer_0']['forward']['w_input']['i']`` is W_i [H, I]."""
        return layout.params_to_tree(self.buffer, self.config)

    @property
    def shape(self) -> tuple[int, ...]:
        """The buffer's shape, ``(params_size(config),)``."""
        return tuple(self.buffer.shape)

    @property
    def dtype(self) -> np.dtype:
        """The buffer's dtype (``config.dtype`` unless an optimizer state holds it in another)."""
        return np.dtype(self.buffer.dtype)

    def __repr__(self) -> str:
        buffer = self.buffer
        what = (
            f"{type(buffer).__name__}{tuple(buffer.shape)}:{np.dtype(buffer.dtype).name}"
            if hasattr(buffer, "shape") and hasattr(buffer, "dtype")
            else repr(buffer)
        )
        return f"RNNParams({what}, {self.config})"


def is_rnn_params(value: Any) -> bool:
    """``is_leaf`` for tree walks that must stop at RNNParams."""
    return isinstance(value, RNNParams)


def _config_of(source: Any) -> RNNConfig:
    if isinstance(source, RNNConfig):
        return source
    if isinstance(source, RNNParams):
        return source.config
    raise TypeError(f"expected an RNNConfig or an RNNParams, got {type(source).__name__}")


def param_labels(source: RNNConfig | RNNParams) -> np.ndarray:
    """What each entry of the opaque buffer is: a NumPy string array of ``params_size(config)`` entries, each its
    tensor's canonical name (``ParamSlot.name``: ``layer_1/backward/w_recurrent/f``, ``layer_0/forward/b_input/i``,
    ``layer_0/forward/w_projection``), computed from the layout alone (no buffer, no conversion).

    Optax masks and labels are per leaf and the buffer is one leaf, so select entries with these labels and use the
    mask elementwise, e.g. weight decay on the matrices alone: ``optax.add_decayed_weights(wd * ~bias_mask(config))``
    over the buffer (inside ``optax.multi_transform`` or ``optax.masked`` when the tree holds other parameters); a
    per-gate choice is ``np.char.endswith(param_labels(config), "/f")``.
    """
    config = _config_of(source)
    weights, biases = layout.param_slots(config)
    slots = weights + biases
    labels = np.full(layout.params_size(config), "", dtype=f"<U{max(len(s.name(config)) for s in slots)}")
    for slot in slots:
        labels[slot.offset : slot.offset + slot.size] = slot.name(config)
    return labels


def bias_mask(source: RNNConfig | RNNParams) -> np.ndarray:
    """A NumPy bool array over the opaque buffer's entries: True on biases, False on matrices (``param_labels``)."""
    config = _config_of(source)
    mask = np.zeros(layout.params_size(config), bool)
    for slot in layout.param_slots(config)[1]:
        mask[slot.offset : slot.offset + slot.size] = True
    return mask
