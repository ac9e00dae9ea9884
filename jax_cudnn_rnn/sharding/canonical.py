"""Where the canonical tensors of a sharded opaque buffer live, and the conversions that keep them there.

A training state's buffers may be replicated over a mesh (data parallelism) or split along their one axis (the
optimizer state sharded ZeRO-style); in a multi-process job each process holds only its own devices' shards. The
conversions here run as one jitted computation with explicit output shardings, which every process calls, so each
process computes and keeps only its own devices' shards and nothing is funneled through one device or process:

* a replicated buffer gives replicated tensors (local slices, no communication);
* a buffer split over mesh axes A gives tensors split over A along their first axis that A's size divides (a matrix's
  rows, else its columns; a bias's units), and a tensor with no such axis replicated over the mesh (Orbax then writes
  it once). The buffer is all-gathered once, so each device transiently holds all of it, as every training step
  that reads the parameters does, and keeps its block of each tensor;
* a buffer on one device gives tensors on that device;
* any other sharding gives tensors replicated over the buffer's devices.

The opposite direction builds the buffer on whatever sharding it is asked for (any ``jax.sharding.Sharding``); for
a split buffer XLA gathers each canonical tensor across the devices and keeps each device's chunk, so there too a
device transiently holds whole tensors.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.sharding.placement import spec_axes


def canonical_sharding(
    buffer_sharding: jax.sharding.Sharding | None, shape: tuple[int, ...]
) -> jax.sharding.Sharding | None:
    """The sharding of a canonical tensor of ``shape`` cut from a buffer placed on ``buffer_sharding`` (rules in the
    module docstring); None for None."""
    if buffer_sharding is None or isinstance(buffer_sharding, SingleDeviceSharding):
        return buffer_sharding
    if isinstance(buffer_sharding, NamedSharding):
        mesh, axes = buffer_sharding.mesh, spec_axes(buffer_sharding.spec, 0)
        count = math.prod(mesh.shape[name] for name in axes)
        spec = PartitionSpec()
        for dim, size in enumerate(shape):
            if axes and size % count == 0:
                spec = PartitionSpec(*[None] * dim, axes if len(axes) > 1 else axes[0])
                break
        return NamedSharding(mesh, spec, memory_kind=buffer_sharding.memory_kind)
    devices = np.array(sorted(buffer_sharding.device_set, key=lambda device: device.id))
    return NamedSharding(jax.sharding.Mesh(devices, ("devices",)), PartitionSpec())


def canonical_shardings(
    buffer_sharding: jax.sharding.Sharding | None, config: RNNConfig
) -> dict[str, jax.sharding.Sharding | None]:
    """{tensor name (``ParamSlot.name``): its sharding} for every canonical tensor of ``config``."""
    weights, biases = layout.param_slots(config)
    return {slot.name(config): canonical_sharding(buffer_sharding, slot.shape) for slot in weights + biases}


def _local_part(tensor: jax.Array, spec: PartitionSpec, mesh: jax.sharding.Mesh) -> jax.Array:
    """Inside ``shard_map``: this device's block of a whole ``tensor`` split as ``spec`` says."""
    for dim, axes in enumerate(spec):
        if axes is not None:
            size = tensor.shape[dim] // math.prod(mesh.shape[name] for name in spec_axes(spec, dim))
            return jax.lax.dynamic_slice_in_dim(tensor, jax.lax.axis_index(axes) * size, size, axis=dim)
    return tensor


@functools.lru_cache(maxsize=64)
def _to_tree(config: RNNConfig, buffer_sharding: jax.sharding.Sharding):
    shardings = canonical_shardings(buffer_sharding, config)
    to_tree = functools.partial(layout.params_to_tree, config=config)
    if not (isinstance(buffer_sharding, NamedSharding) and spec_axes(buffer_sharding.spec, 0)):
        return jax.jit(to_tree, out_shardings=layout.unflatten_tree(shardings))
    # Left to itself XLA's partitioner moves every slice's bytes with point-to-point exchanges (hundreds of them, and
    # many seconds of compilation); gathering the buffer once, as a training step that uses it does anyway, and
    # keeping each device's block of each tensor compiles in a fraction of that and sends every byte once.
    specs = layout.unflatten_tree({name: sharding.spec for name, sharding in shardings.items()})
    mesh = buffer_sharding.mesh
    local = lambda buffer: jax.tree.map(lambda t, s: _local_part(t, s, mesh), to_tree(buffer), specs)  # noqa: E731
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=PartitionSpec(), out_specs=specs))


@functools.lru_cache(maxsize=64)
def _to_params(config: RNNConfig, sharding: jax.sharding.Sharding):
    return jax.jit(functools.partial(layout.tree_to_params, config=config), out_shardings=sharding)


def params_to_tree_sharded(buffer: Any, config: RNNConfig) -> dict[str, Any]:
    """``layout.params_to_tree`` with every tensor on ``canonical_sharding(buffer.sharding, shape)``.

    ``buffer``: 1-D ``config.dtype`` [params_size(config)]; a ``jax.Array`` on any sharding (in a multi-process job
    every process must call this, as for any computation on a global array), or a NumPy array (converted eagerly).
    """
    sharding = getattr(buffer, "sharding", None)
    if not isinstance(buffer, jax.Array) or isinstance(sharding, SingleDeviceSharding):
        return layout.params_to_tree(buffer, config)
    return _to_tree(config, sharding)(buffer)


def tree_to_params_sharded(tree: Any, config: RNNConfig, sharding: jax.sharding.Sharding | None) -> jax.Array:
    """``layout.tree_to_params`` with the buffer (1-D ``config.dtype``) placed on ``sharding``; None: where JAX puts
    an eager result. The tensors may be on any sharding; they are not copied to one device first."""
    if sharding is None:
        return layout.tree_to_params(tree, config)
    return _to_params(config, sharding)(tree)
