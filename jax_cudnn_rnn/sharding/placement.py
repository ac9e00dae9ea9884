"""Where a call runs, as far as is known while it is traced: its platform, a device of it, and how its batch is split.

Under ``jax.jit`` the platform and devices are decided after tracing (by the arguments' placement at call time, by
``lower(lowering_platforms=...)`` or ``jax.export(platforms=...)``), so code that must differ per platform cannot ask
``jax.default_backend()``: it stages out every candidate with ``lax.platform_dependent``
(jax_cudnn_rnn/backends/registry.py). What tracing does know, ``of_arrays`` collects:

* concrete arrays (an eager call, all of its arrays concrete) carry their sharding: platform, devices and the batch
  split are exact;
* a traced array's abstract value carries the mesh its sharding lives on (a ``jax.jit`` over arrays committed to a
  ``NamedSharding``, or after ``with_sharding_constraint``): its platform and device kind, and with explicit mesh
  axes the exact split of the batch; with automatic axes only the axes the batch might be split over;
* ``jax.default_device`` set to a device or platform names the platform.

Anything else (a ``jax.jit`` over uncommitted or single-device arrays) is unknown: ``platform`` and ``device`` are
None and the batch is taken to be whole (a partitioned call then splits only where it was planned for; see
jax_cudnn_rnn/sharding/partitioning.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

import jax


def lowering_platform(device: Any) -> str:
    """The platform name ``jax.jit(...).lower`` and ``lax.platform_dependent`` use for ``device``: "cpu", "cuda",
    "rocm", "tpu", ... (JAX calls NVIDIA and AMD GPUs both "gpu" in ``device.platform``)."""
    platform = str(getattr(device, "platform", device)).lower()
    if platform != "gpu":
        return platform
    version = str(getattr(getattr(device, "client", None), "platform_version", "")).lower()
    return "rocm" if "rocm" in version else "cuda"


@dataclasses.dataclass(frozen=True)
class Placement:
    """What tracing knows about where a call runs (hashable: it is a static argument of the cuDNN custom_vjp).

    platform: the lowering platform ("cpu", "cuda", ...), None when unknown.
    device: one device of the call that this process can address, None when unknown.
    device_kind: ``device_kind`` of the call's devices ("NVIDIA H100 80GB HBM3"), None when unknown.
    mesh_axes: ((axis name, size), ...) of the mesh the arrays are laid out on; () when none is known.
    batch_axes: the mesh axes that split the batch, when known exactly (() for an unsplit batch); None when the mesh
      axes are automatic and XLA decides later.
    """

    platform: str | None = None
    device: Any = None
    device_kind: str | None = None
    mesh_axes: tuple[tuple[str, int], ...] = ()
    batch_axes: tuple[str, ...] | None = ()

    def local_batches(self, batch: int) -> tuple[int, ...]:
        """The batch sizes a single device's call may get for a global ``batch``, the expected one first: the exact
        split when it is known, else the smallest that the mesh's axes allow (a batch split over every axis that
        divides it), then the others; ``batch`` itself (unsplit) is always among them."""
        sizes = dict(self.mesh_axes)
        if self.batch_axes is not None:
            shards = math.prod(sizes.get(axis, 1) for axis in self.batch_axes)
            local = batch // shards if shards and batch % shards == 0 else batch
            return tuple(dict.fromkeys((local, batch)))
        products = {
            math.prod(subset) for n in range(len(sizes) + 1) for subset in itertools.combinations(sizes.values(), n)
        }
        return tuple(sorted({batch // k for k in products if batch % k == 0}))


UNKNOWN = Placement(batch_axes=())


def spec_axes(spec: Any, dim: int) -> tuple[str, ...]:
    """The mesh axes that ``PartitionSpec`` ``spec`` splits dimension ``dim`` over (() when it is not split, also past
    the spec's end)."""
    entry = spec[dim] if dim < len(spec) else None
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _from_concrete(array: jax.Array, batch_axis: int | None) -> Placement:
    sharding = array.sharding
    devices = sorted(sharding.addressable_devices, key=lambda d: d.id) or sorted(
        sharding.device_set, key=lambda d: d.id
    )
    device = devices[0]
    mesh = getattr(sharding, "mesh", None)
    spec = getattr(sharding, "spec", None)
    if mesh is None or spec is None or not mesh.shape:
        split = () if len(sharding.device_set) == 1 else None  # a positional/GSPMD sharding: XLA decides
        return Placement(lowering_platform(device), device, device.device_kind, (), split)
    axes = () if batch_axis is None else spec_axes(spec, batch_axis)
    return Placement(lowering_platform(device), device, device.device_kind, tuple(mesh.shape.items()), axes)


def _from_traced(array: Any, batch_axis: int | None) -> Placement | None:
    typeof = getattr(jax, "typeof", None)
    if typeof is None:
        return None
    sharding = getattr(typeof(array), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or getattr(mesh, "empty", True):
        return None
    abstract_device = getattr(mesh, "abstract_device", None)
    platform = getattr(abstract_device, "platform", None)
    kind = getattr(abstract_device, "device_kind", None)
    explicit = getattr(getattr(jax.sharding, "AxisType", None), "Explicit", object())
    spec = getattr(sharding, "spec", None)
    axis_types = dict(zip(mesh.axis_names, mesh.axis_types, strict=True)) if getattr(mesh, "axis_types", None) else {}
    batch_axes = None
    if spec is not None and batch_axis is not None and batch_axis < len(spec):
        axes = spec_axes(spec, batch_axis)
        # An explicit axis's spec is the layout; an automatic one's is unconstrained until XLA propagates.
        if axes or all(t == explicit for t in axis_types.values()):
            batch_axes = axes if all(axis_types.get(a) == explicit for a in axes) else None
    device = None
    if kind is not None:
        device = next((d for d in jax.local_devices() if d.device_kind == kind), None)
    return Placement(
        lowering_platform(platform) if platform else None,
        device,
        kind,
        tuple(zip(mesh.axis_names, mesh.axis_sizes, strict=True)),
        batch_axes,
    )


def _from_default_device() -> Placement:
    default = jax.config.jax_default_device
    if default is None:
        return UNKNOWN
    if isinstance(default, str):
        return Placement(lowering_platform(default), None, None, (), ())
    return Placement(lowering_platform(default), default, default.device_kind, (), ())


def of_arrays(arrays: Sequence[Any], batch_axes: Sequence[int | None]) -> Placement:
    """The placement of a call on ``arrays`` (None entries skipped), whose batch axis is ``batch_axes[i]`` (None for
    an array without one, such as the weights).

    When every array is concrete (an eager call) the first one's sharding decides. When any is traced, concrete ones
    say nothing (under ``jax.jit`` a closed-over array is moved to wherever the computation runs): the first traced
    array whose abstract value carries a mesh decides, else ``jax.default_device``, else nothing is known."""
    present = [(array, axis) for array, axis in zip(arrays, batch_axes, strict=True) if array is not None]
    traced = [(array, axis) for array, axis in present if isinstance(array, jax.core.Tracer)]
    if not traced:
        for array, axis in present:
            if isinstance(array, jax.Array):
                return _from_concrete(array, axis)
    for array, axis in traced:
        found = _from_traced(array, axis)
        if found is not None:
            return found
    return _from_default_device()
