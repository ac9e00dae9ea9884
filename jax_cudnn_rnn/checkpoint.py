"""Orbax checkpoints in canonical form: ``CanonicalCheckpointHandler`` with ``CanonicalSave`` / ``CanonicalRestore``.

The JAX counterpart of ``tf.contrib.cudnn_rnn.RNNParamsSaveable``. Saving walks any pytree (params, a whole optax
state), replaces every ``RNNParams`` by its canonical named tree (``layer_{l}/{forward|backward}/{w_input|
w_recurrent|b_input|b_recurrent}/{gate}``, plain dicts of arrays) and writes everything with Orbax's standard pytree
machinery. The configs (``RNNConfig.to_json``, keyed by tree path) and a format version go to the checkpoint's
``custom_metadata`` under ``"jax_cudnn_rnn"``. Hence:

* someone without this library reads the item with ``ocp.StandardCheckpointer().restore(path)`` and gets the
  canonical weights and biases as arrays (the opaque cuDNN layout never reaches the disk);
* restoring into a target (concrete or abstract, e.g. ``jax.eval_shape(make_state)``) rebuilds each buffer for the
  target's config, so a checkpoint written on GPU restores on CPU and the other way round; a config or shape that
  disagrees raises ``ValueError`` naming the tree path, the tensor and both shapes. Fields that do not change the
  weights (dtype, dropout, cell_clip) may differ: the target's win, values are cast to its dtype.

Sharding (``sharding/canonical.py`` has the rules and their costs). Saving converts each buffer where it lives, in every
process: a replicated buffer gives replicated canonical tensors, a buffer split over mesh axes gives tensors split over
the same axes (a tensor that no split divides is replicated), so in a multi-process job each process writes the shards
it holds and no buffer is gathered onto one device or process. A ``NamedSharding`` buffer's sharding is recorded in
the metadata. Restoring puts every canonical tensor and the rebuilt buffer on the target buffer's sharding (any
``jax.sharding.Sharding``: a concrete array's, or a ``jax.ShapeDtypeStruct``'s ``sharding``), as Orbax does for plain
arrays, and Orbax reads from disk only what each process's devices hold. A target without a sharding (e.g. from
``jax.eval_shape``) gets the recorded sharding when its devices all exist here, as Orbax does for plain arrays, else
the first local device (never ``jax.devices()[0]``, which belongs to process 0 alone).

Usage::

    with ocp.Checkpointer(CanonicalCheckpointHandler()) as ckptr:
        ckptr.save(path, args=CanonicalSave(state))
        state = ckptr.restore(path, args=CanonicalRestore(abstract_state))

    with ocp.CheckpointManager(directory) as mngr:
        mngr.save(step, args=ocp.args.Composite(state=CanonicalSave(state)))
        mngr.wait_until_finished()
        state = mngr.restore(step, args=ocp.args.Composite(state=CanonicalRestore(abstract_state)))["state"]

Atomicity is Orbax's: the item is written to a temporary directory (``<step>.orbax-checkpoint-tmp``) and renamed when
complete, so a save that fails midway leaves no step behind and earlier steps intact. Tested
(tests/core/test_checkpoint.py) for a process killed while it writes the arrays (the previous step stays
``latest_step()`` and restores bit for bit; ``CheckpointManagerOptions(cleanup_tmp_directories=True)`` removes the
leftover temporary directory on the next start) and for a full disk (the error names the step's temporary directory:
Orbax's names the file it could not write, or where Orbax's names none, the handler adds the directory; the steps saved
before stay, also with ``max_to_keep``). After a failed save, the same CheckpointManager's
``latest_step()``/``all_steps()`` can miss the earlier steps (Orbax 0.12 drops the steps it meant to replace from its
list when the save starts): call ``manager.reload()``, which reads them from disk again. Exception to the atomicity:
``Checkpointer.save(path, force=True)`` deletes an existing ``path`` *before* writing; use a CheckpointManager (a new
directory per step) or a fresh path instead.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import jax
import orbax.checkpoint as ocp

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import LAYOUT_FIELDS, RNNConfig
from jax_cudnn_rnn.params import RNNParams, is_rnn_params
from jax_cudnn_rnn.sharding import canonical as sharded_canonical

__all__ = [
    "CanonicalCheckpointHandler",
    "CanonicalRestore",
    "CanonicalSave",
    "CheckpointError",
    "FORMAT_VERSION",
    "METADATA_KEY",
]

#: The version of the canonical checkpoint layout, stored in the metadata (restoring checks it).
FORMAT_VERSION = 1
#: The key of this library's entry (format version, configs, shardings) in Orbax's custom metadata.
METADATA_KEY = "jax_cudnn_rnn"


class CheckpointError(ValueError):
    """The checkpoint is damaged, incomplete (its metadata missing), or not one this handler wrote. (A directory
    that does not exist is Orbax's ``FileNotFoundError``, raised before the handler is called.)"""


def path_str(keypath: tuple[Any, ...]) -> str:
    """A tree path as ``a/b/0/mu``: dict keys, attribute names and sequence indices joined by '/'. The key of each
    RNNParams in the metadata; it is also how a restored dict-of-dicts tree is addressed."""
    parts = []
    for key in keypath:
        if isinstance(key, jax.tree_util.DictKey):
            parts.append(str(key.key))
        elif isinstance(key, jax.tree_util.GetAttrKey):
            parts.append(key.name)
        elif isinstance(key, jax.tree_util.SequenceKey):
            parts.append(str(key.idx))
        elif isinstance(key, jax.tree_util.FlattenedIndexKey):
            parts.append(str(key.key))
        else:
            parts.append(str(key))
    return "/".join(parts)


def _is_array_like(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _convert(tree: Any) -> tuple[Any, dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(canonical tree, {path: config json}, {path: the buffer's NamedSharding as Orbax's JSON metadata})."""
    configs: dict[str, dict[str, Any]] = {}
    shardings: dict[str, dict[str, Any]] = {}

    def convert(keypath, leaf):
        if not isinstance(leaf, RNNParams):
            return leaf
        if not _is_array_like(leaf.buffer):  # e.g. optax.MaskedNode inside a masked state: nothing to store
            return leaf.buffer
        path = path_str(keypath)
        configs[path] = leaf.config.to_json()
        sharding = getattr(leaf.buffer, "sharding", None)
        if isinstance(sharding, jax.sharding.NamedSharding):
            shardings[path] = json.loads(
                ocp.metadata.NamedShardingMetadata.from_jax_sharding(sharding).to_serialized_string()
            )
        return sharded_canonical.params_to_tree_sharded(leaf.buffer, leaf.config)

    converted = jax.tree_util.tree_map_with_path(convert, tree, is_leaf=is_rnn_params)
    return converted, configs, shardings


def to_canonical_tree(tree: Any) -> tuple[Any, dict[str, dict[str, Any]]]:
    """(tree with each RNNParams replaced by its canonical named tree, {path: config json}). Exposed for tests and
    for writing the same format with other tools. Each canonical tensor is placed as ``sharding/canonical.py`` says."""
    converted, configs, _ = _convert(tree)
    return converted, configs


def _recorded_sharding(fields: Any) -> jax.sharding.Sharding | None:
    """The buffer's NamedSharding as recorded at save time, or None if none was recorded or its devices are not all
    here (another topology)."""
    if not isinstance(fields, Mapping):
        return None
    try:
        return ocp.metadata.NamedShardingMetadata.from_deserialized_dict(dict(fields)).to_jax_sharding()
    except (ValueError, KeyError, TypeError):
        return None


def _buffer_sharding(target_buffer: Any, recorded: jax.sharding.Sharding | None) -> jax.sharding.Sharding:
    """Where a restored buffer goes: the target's sharding, else the recorded one, else the first local device (in a
    multi-process job ``jax.devices()[0]`` belongs to process 0 alone)."""
    sharding = getattr(target_buffer, "sharding", None)
    if sharding is not None:
        return sharding
    return recorded or jax.sharding.SingleDeviceSharding(jax.local_devices()[0])


def _canonical_shapes(config: RNNConfig) -> dict[str, tuple[int, ...]]:
    weights, biases = layout.param_slots(config)
    return {slot.name(config): slot.shape for slot in weights + biases}


def _subtree(tree: Any, path: str) -> Any:
    node = tree
    for part in path.split("/") if path else []:
        if isinstance(node, Mapping):
            if part not in node:
                return None
            node = node[part]
        elif isinstance(node, (list, tuple)):
            index = int(part) if part.isdigit() else -1
            if not 0 <= index < len(node):
                return None
            node = node[index]
        else:
            return None
    return node


def _compare(path: str, saved: RNNConfig, target: RNNConfig) -> None:
    differing = [f for f in LAYOUT_FIELDS if getattr(saved, f) != getattr(target, f)]
    if not differing:
        return
    saved_shapes, target_shapes = _canonical_shapes(saved), _canonical_shapes(target)
    detail = ""
    for name in list(target_shapes) + [n for n in saved_shapes if n not in target_shapes]:
        a, b = saved_shapes.get(name), target_shapes.get(name)
        if a != b:
            detail = f"; first differing tensor {name}: checkpoint shape {a or 'absent'}, target shape {b or 'absent'}"
            break
    fields = ", ".join(f"{f}: checkpoint {getattr(saved, f)!r} vs target {getattr(target, f)!r}" for f in differing)
    raise ValueError(f"RNNParams at {path!r}: the checkpoint's config differs from the target's ({fields}){detail}")


def _naming(error: OSError, directory) -> OSError:
    """``error`` with the checkpoint's ``directory`` in its message where it names no path: Orbax writes some of a
    step's files with Python's ``write_text``, whose ``OSError`` (a full disk's ``[Errno 28] No space left on device``)
    says which error but not where."""
    if str(directory) in str(error):
        return error
    return type(error)(error.errno, f"{error.strerror or error} (saving the checkpoint into {directory})")


class _NamingFuture:
    """One of Orbax's commit futures whose ``OSError`` names the checkpoint's directory (``_naming``)."""

    def __init__(self, future, directory):
        self._future, self._directory = future, directory

    def result(self, timeout: float | None = None) -> Any:
        try:
            return self._future.result(timeout=timeout)
        except OSError as e:
            raise _naming(e, self._directory) from e

    def cancel(self) -> bool | None:
        return self._future.cancel() if hasattr(self._future, "cancel") else None


class CanonicalCheckpointHandler(ocp.StandardCheckpointHandler):
    """Orbax handler for pytrees containing ``RNNParams``; see the module docstring. Constructor arguments are
    ``ocp.StandardCheckpointHandler``'s."""

    async def async_save(self, directory, item=None, save_args=None, args=None):
        """Writes ``args.item`` (a ``CanonicalSave``; or ``item``) with every RNNParams replaced by its canonical
        named tree, and the configs, the format version and the buffers' shardings in the custom metadata under
        ``"jax_cudnn_rnn"``. Returns Orbax's commit futures."""
        if args is not None:
            item, custom = args.item, args.custom_metadata
        else:
            custom = None
        if item is None:
            raise ValueError("CanonicalSave needs an item: the pytree to save")
        converted, configs, shardings = _convert(item)
        metadata = dict(custom or {})
        metadata[METADATA_KEY] = {
            "format_version": FORMAT_VERSION,
            "rnn_params": configs,
            "buffer_shardings": shardings,
        }
        try:
            standard = ocp.args.StandardSave(converted, custom_metadata=metadata)
            futures = await super().async_save(directory, args=standard)
        except OSError as e:
            raise _naming(e, directory) from e
        return [_NamingFuture(f, directory) for f in futures or []]

    # -------------------------------------------------------------------------------------------------- reading
    def saved_configs(self, directory) -> dict[str, RNNConfig]:
        """{tree path: RNNConfig} of every RNNParams in the checkpoint at ``directory``."""
        return {path: saved.config for path, saved in self._read_metadata(directory).items()}

    def _read_metadata(self, directory) -> dict[str, _Saved]:
        """{path: what the checkpoint holds there}, checked for consistency."""
        try:
            metadata = super().metadata(directory)
        except Exception as e:  # Orbax raises many types for a missing/damaged _METADATA
            raise CheckpointError(
                f"cannot read the checkpoint metadata in {directory} (damaged or incomplete?): {type(e).__name__}: {e}"
            ) from e
        custom = metadata.custom_metadata or {}
        ours = custom.get(METADATA_KEY)
        if ours is None:
            return {}
        version = ours.get("format_version") if isinstance(ours, Mapping) else None
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"checkpoint in {directory} has jax_cudnn_rnn format_version {version!r}; this "
                f"library reads version {FORMAT_VERSION}"
            )
        tree = metadata.tree
        recorded = ours.get("buffer_shardings") or {}  # absent in checkpoints written before it was recorded
        configs = ours.get("rnn_params", {})
        for name, value in (("rnn_params", configs), ("buffer_shardings", recorded)):
            if not isinstance(value, Mapping):
                raise CheckpointError(
                    f"checkpoint in {directory} is damaged: its jax_cudnn_rnn metadata's {name} is a "
                    f"{type(value).__name__}; expected a mapping of tree path -> fields"
                )
        result = {}
        for path, fields in configs.items():
            try:
                config = RNNConfig.from_json(fields)
            except (TypeError, ValueError) as e:
                raise CheckpointError(
                    f"checkpoint in {directory}: the config stored for {path!r} is invalid: {e}"
                ) from e
            saved = _subtree(tree, path)
            if not isinstance(saved, Mapping):
                raise CheckpointError(
                    f"checkpoint in {directory}: metadata lists RNNParams at {path!r} but the "
                    "saved tree has no canonical tensors there"
                )
            tensors = layout.flatten_tree(saved)
            expected = _canonical_shapes(config)
            missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
            if missing or extra:
                raise CheckpointError(
                    f"checkpoint in {directory} is inconsistent at {path!r}: its stored config "
                    f"expects tensors it lacks {missing[:4]} or has unexpected {extra[:4]}"
                )
            for name, shape in expected.items():
                got = tuple(getattr(tensors[name], "shape", ()) or ())
                if got != shape:
                    raise CheckpointError(
                        f"checkpoint in {directory} is inconsistent at {path!r}: tensor {name} "
                        f"has shape {got} but its stored config {config} implies {shape}"
                    )
            result[path] = _Saved(config, _recorded_sharding(recorded.get(path)))
        return result

    def restore(self, directory, item=None, args=None):
        """Reads the checkpoint at ``directory`` into ``args.item`` (a ``CanonicalRestore``; or ``item``): each
        RNNParams rebuilt for the target's config (a differing layout is a ValueError naming the path and the first
        differing tensor) and placed on the target buffer's sharding. Without a target, the saved tree (see
        ``CanonicalRestore``)."""
        target = args.item if args is not None else item
        strict = args.strict if args is not None else True
        saved = self._read_metadata(directory)
        if target is None:
            raw = self._restore_standard(directory, None, True)
            if args is not None and not args.rebuild:
                return raw
            return _rebuild_untargeted(raw, saved)

        leaves, treedef = jax.tree_util.tree_flatten_with_path(target, is_leaf=is_rnn_params)
        converted_leaves, buffer_shardings = [], []
        for keypath, leaf in leaves:
            if not isinstance(leaf, RNNParams):
                converted_leaves.append(leaf)
                continue
            path = path_str(keypath)
            if path not in saved:
                raise ValueError(
                    f"target has RNNParams at {path!r} but the checkpoint has none there; it has "
                    f"RNNParams at {sorted(saved)}"
                )
            _compare(path, saved[path].config, leaf.config)
            dtype = leaf.config.dtype
            sharding = _buffer_sharding(leaf.buffer, saved[path].buffer_sharding)
            size = layout.params_size(leaf.config)
            try:
                sharding.shard_shape((size,))
            except ValueError as e:
                raise ValueError(
                    f"RNNParams at {path!r}: the target's sharding {sharding} cannot hold its buffer of "
                    f"{size} elements: {e}"
                ) from e
            buffer_shardings.append(sharding)
            converted_leaves.append(
                layout.unflatten_tree(
                    {
                        name: jax.ShapeDtypeStruct(
                            shape, dtype, sharding=sharded_canonical.canonical_sharding(sharding, shape)
                        )
                        for name, shape in _canonical_shapes(leaf.config).items()
                    }
                )
            )
        abstract = jax.tree_util.tree_unflatten(treedef, converted_leaves)
        restored = self._restore_standard(directory, abstract, strict)
        restored_leaves = treedef.flatten_up_to(restored)
        placements = iter(buffer_shardings)
        rebuilt = [
            _rebuild(sub, leaf.config, next(placements)) if isinstance(leaf, RNNParams) else sub
            for (_, leaf), sub in zip(leaves, restored_leaves, strict=True)
        ]
        return jax.tree_util.tree_unflatten(treedef, rebuilt)

    def _restore_standard(self, directory, abstract, strict):
        try:
            return super().restore(directory, args=ocp.args.StandardRestore(abstract, strict=strict))
        except ValueError as e:
            if "shape" in str(e).lower() or "structure" in str(e).lower() or "mismatch" in str(e).lower():
                raise ValueError(f"checkpoint in {directory} does not match the target: {e}") from e
            raise CheckpointError(f"cannot read the checkpoint in {directory}: {e}") from e
        except Exception as e:  # tensorstore/OCDBT errors for truncated or missing files
            raise CheckpointError(
                f"cannot read the checkpoint in {directory} (damaged or incomplete?): {type(e).__name__}: {e}"
            ) from e


@dataclasses.dataclass(frozen=True)
class _Saved:
    """One RNNParams in a checkpoint: its config and where its buffer was (None: not recorded or not here)."""

    config: RNNConfig
    buffer_sharding: jax.sharding.Sharding | None


def _rebuild(tree: Any, config: RNNConfig, sharding: jax.sharding.Sharding | None) -> RNNParams:
    """RNNParams from restored canonical tensors, its buffer placed on ``sharding``."""
    return RNNParams(sharded_canonical.tree_to_params_sharded(tree, config, sharding), config)


def _rebuild_untargeted(raw: Any, saved: Mapping[str, _Saved]) -> Any:
    """Puts RNNParams back at the recorded paths of a tree restored without a target (dicts and lists), each buffer
    on its recorded sharding (the tensors are on theirs, Orbax's choice without a target)."""

    def walk(node: Any, path: str) -> Any:
        if path in saved and isinstance(node, Mapping):
            return _rebuild(dict(node), saved[path].config, _buffer_sharding(None, saved[path].buffer_sharding))
        if isinstance(node, Mapping):
            return {k: walk(v, f"{path}/{k}" if path else str(k)) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(walk(v, f"{path}/{i}" if path else str(i)) for i, v in enumerate(node))
        return node

    return walk(raw, "")


@ocp.args.register_with_handler(CanonicalCheckpointHandler, for_save=True)
@dataclasses.dataclass
class CanonicalSave(ocp.args.CheckpointArgs):
    """Save ``item`` (any pytree; RNNParams inside are written canonically). ``custom_metadata``: optional
    JSON-serialisable dict stored alongside (the key "jax_cudnn_rnn" is reserved)."""

    item: Any
    custom_metadata: dict[str, Any] | None = None


@ocp.args.register_with_handler(CanonicalCheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CanonicalRestore(ocp.args.CheckpointArgs):
    """Restore into ``item``: a pytree like the saved one whose leaves are arrays or ``jax.ShapeDtypeStruct`` and
    whose RNNParams (buffer concrete or abstract) give the configs to rebuild. Without ``item``: the saved tree as
    nested dicts/lists, with RNNParams rebuilt from the stored configs unless ``rebuild=False`` (then the canonical
    dicts as written). ``strict=False`` lets Orbax pad/truncate non-RNN arrays whose shapes differ."""

    item: Any = None
    strict: bool = True
    rebuild: bool = True
