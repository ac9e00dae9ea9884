"""``custom_vjp``: ``jax.custom_vjp`` whose function JAX sees with one array per argument.

Every custom_vjp of the package (the xla implementation's recurrence and input GEMM, the fused kit's kernel call, the
oneDNN hybrids) has static arguments (``nondiff_argnums``: the mode, the config, the kernels' ``Static``) and optional
ones that are None (c0, seq_lengths, the biases). JAX's custom_vjp takes them, but the implementation JAX prepares to
make the default (``jax_custom_vjp3``, jax._src.hijax.custom_vjp3; jax 0.10) counts its forward-mode nonzero flags per
argument (``CustomVJPTraced.jvp``: ``[True] * len(tangents)``) where the transpose reads one per array: under
``jax.grad(jax.checkpoint(f))`` (remat differentiates by jvp and partial evaluation) any custom_vjp whose arguments
are not one array each fails with "safe_zip() argument 1 has length 13 but argument 0 has length 6". This wrapper
keeps the static arguments in a closure and hands JAX a ``jax.custom_vjp`` of the array leaves alone, built once per
(static values with their types, argument structure), so that both implementations differentiate it the same way;
the rules keep ``jax.custom_vjp``'s signatures: ``fwd(*args) -> (outputs, residuals)``, ``bwd(*static_args,
residuals, cotangents) -> one cotangent (or None) per differentiable argument``, where a record's cotangent may hold
None for a field that gets none (a mask, the lengths).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax


def static_key(value: Any) -> Any:
    """``value`` as a cache key that tells apart what compares equal but is not the same: ``1 == True == 1.0`` (and
    ``hash`` agrees), so keyed by value alone the closure built for one would run for the others, with their types
    (a ``True`` flag taken for the integer 1). Tuples, lists and dicts are keyed element by element; any other value
    by (its type, itself), so it must be hashable, as a static argument of ``jax.custom_vjp`` must."""
    if isinstance(value, tuple | list):
        return type(value), tuple(static_key(item) for item in value)
    if isinstance(value, dict):
        return dict, tuple((static_key(k), static_key(v)) for k, v in value.items())
    return type(value), value


class custom_vjp:
    """``jax.custom_vjp(fun, nondiff_argnums)`` (lower case, as JAX names it) with positional arguments only, static
    ones hashable (one closure per static values of one type each: ``static_key``)."""

    def __init__(self, fun: Callable[..., Any], nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._nondiff = tuple(sorted(nondiff_argnums))
        self._rules: tuple[Callable[..., Any], Callable[..., Any]] | None = None
        self._built: dict[Any, Callable[..., Any]] = {}

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """The rules, as ``jax.custom_vjp.defvjp`` takes them (no symbolic zeros)."""
        self._rules = (fwd, bwd)
        self._built.clear()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = getattr(self._fun, "__qualname__", repr(self._fun))
        if kwargs:
            raise TypeError(f"custom_vjp function {name} takes positional arguments only; got {sorted(kwargs)}")
        if self._rules is None:
            raise AttributeError(f"no VJP defined for custom_vjp function {name}: call defvjp(fwd, bwd) first")
        statics = tuple(args[i] for i in self._nondiff)
        leaves, treedef = jax.tree.flatten([arg for i, arg in enumerate(args) if i not in self._nondiff])
        key = (static_key(statics), treedef, len(args))
        flat = self._built.get(key)
        if flat is None:
            flat = self._built[key] = self._build(statics, treedef, len(args))
        return flat(*leaves)

    def _build(self, statics: tuple[Any, ...], treedef: Any, num_args: int) -> Callable[..., Any]:
        """The ``jax.custom_vjp`` of the leaves for one (static values, structure of the other arguments)."""
        fun, (fwd, bwd) = self._fun, self._rules
        nondiff = self._nondiff
        arg_trees = treedef.children()

        def full_args(leaves: Sequence[Any]) -> list[Any]:
            others = iter(jax.tree.unflatten(treedef, leaves))
            static = iter(statics)
            return [next(static) if i in nondiff else next(others) for i in range(num_args)]

        def flat_fun(*leaves):
            return fun(*full_args(leaves))

        def flat_fwd(*leaves):
            return fwd(*full_args(leaves))

        def flat_bwd(residuals, cotangents):
            per_arg = tuple(bwd(*statics, residuals, cotangents))
            if len(per_arg) != len(arg_trees):
                raise ValueError(
                    f"the bwd rule of custom_vjp function {flat_fun.__qualname__} returned {len(per_arg)} "
                    f"cotangents for its {len(arg_trees)} differentiable arguments"
                )
            return tuple(
                leaf for tree, ct in zip(arg_trees, per_arg, strict=True) for leaf in _cotangent_leaves(tree, ct)
            )

        flat_fun.__name__ = getattr(self._fun, "__name__", "fun")
        flat_fun.__qualname__ = getattr(self._fun, "__qualname__", flat_fun.__name__)
        flat = jax.custom_vjp(flat_fun)
        flat.defvjp(flat_fwd, flat_bwd)
        return flat


def _cotangent_leaves(tree: Any, cotangent: Any) -> list[Any]:
    """The leaves of ``cotangent`` in the structure ``tree`` of its primal argument, None for every leaf under a None
    (no cotangent: zero)."""
    leaves: list[Any] = [None] * tree.num_leaves
    if cotangent is None:
        return leaves
    positions = tree.unflatten(range(tree.num_leaves))  # each leaf replaced by its index

    def place(value: Any, where: Any) -> None:
        if value is not None:
            (index,) = jax.tree.leaves(where)
            leaves[index] = value

    jax.tree.map(place, cotangent, positions, is_leaf=lambda value: value is None)
    return leaves
