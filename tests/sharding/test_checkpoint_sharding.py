"""Checkpoints keep the target's sharding (checkpoint.py, sharding/canonical.py), in one process with 8 CPU devices.

The functions without ``test_`` run in a fresh process with 8 CPU devices (``multiprocess.Cluster(1, 8)``); the
multi-process versions are in test_multiprocess.py. Values are random NumPy arrays, so every restored buffer is
compared bit for bit with what was saved, and its placement with what was asked for.
"""

from __future__ import annotations

import json
import os
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import checkpoint as ckpt
from jax_cudnn_rnn import layout

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import multiprocess

ROWS = jcr.RNNConfig("lstm", num_layers=2, num_units=8, input_size=3, direction="bidirectional")  # 2496 elements
# 384 elements: 8 divides the buffer and the input matrices' columns, but no axis of the recurrent matrices or biases
MIXED = jcr.RNNConfig("lstm", num_layers=1, num_units=6, input_size=8)
ODD = jcr.RNNConfig("gru", num_layers=1, num_units=5, input_size=4)  # 165 elements: no split divides the buffer


@pytest.fixture(scope="module")
def eight_devices():
    with multiprocess.Cluster(num_processes=1, local_devices=8) as running:
        yield running


def _host_state() -> dict:
    rng = np.random.default_rng(0)
    buffer = lambda config: rng.uniform(-1, 1, layout.params_size(config)).astype(np.float32)  # noqa: E731
    return {
        "rows": jcr.RNNParams(buffer(ROWS), ROWS),
        "mixed": jcr.RNNParams(buffer(MIXED), MIXED),
        "dense": rng.normal(size=(8, 4)).astype(np.float32),
    }


def _placements() -> dict:
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = np.array(jax.devices())
    line, grid = Mesh(devices, ("batch",)), Mesh(devices.reshape(4, 2), ("data", "model"))
    return {
        "replicated": NamedSharding(line, P()),
        "split": NamedSharding(line, P("batch")),
        "split_2d": NamedSharding(grid, P(("data", "model"))),
        "split_model": NamedSharding(grid, P("model")),
        "device_5": jax.sharding.SingleDeviceSharding(devices[5]),
    }


def _check(restored, host, sharding, where: str) -> None:
    for (path, got), want in zip(jax.tree_util.tree_leaves_with_path(restored), jax.tree.leaves(host), strict=True):
        name = f"{where} {jax.tree_util.keystr(path)}"
        assert got.sharding.is_equivalent_to(sharding, got.ndim), (name, got.sharding, sharding)
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=name)


def _round_trips(directory: str):
    """Saves the state from every placement; restores each into the next placement (abstract target) and into a
    target without shardings. Returns, per placement, the canonical tensors' specs and the save's collectives."""
    from jax_cudnn_rnn.sharding import canonical as sharded_canonical

    host, placements = _host_state(), _placements()
    checkpointer = ocp.Checkpointer(ckpt.CanonicalCheckpointHandler())
    names = list(placements)
    report = {}
    for index, name in enumerate(names):
        state = jax.device_put(host, placements[name])
        canonical, _ = ckpt.to_canonical_tree(state)
        specs = {
            f"{rnn}/{tensor}": tuple(getattr(leaf.sharding, "spec", ("single device",)))
            for rnn in ("rows", "mixed")
            for tensor, leaf in layout.flatten_tree(canonical[rnn]).items()
        }
        hlo = sharded_canonical._to_tree(MIXED, state["mixed"].buffer.sharding).lower(state["mixed"].buffer).compile()
        collectives = {op: hlo.as_text().count(f"{op}(") for op in ("all-gather", "collective-permute", "all-to-all")}
        checkpointer.save(f"{directory}/{name}", args=ckpt.CanonicalSave(state))

        target_name = names[(index + 1) % len(names)]
        target = jax.tree.map(
            lambda a, sharding=placements[target_name]: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), host
        )
        restored = checkpointer.restore(f"{directory}/{name}", args=ckpt.CanonicalRestore(target))
        _check(restored, host, placements[target_name], f"saved {name}, restored {target_name}:")
        # without shardings in the target, an RNN buffer goes back where it was saved, if that was a NamedSharding
        restored = checkpointer.restore(
            f"{directory}/{name}",
            args=ckpt.CanonicalRestore({**jax.eval_shape(lambda: host), "dense": target["dense"]}),
        )
        recorded = placements[name] if name != "device_5" else jax.sharding.SingleDeviceSharding(jax.devices()[0])
        _check(
            {k: restored[k] for k in ("rows", "mixed")},
            {k: host[k] for k in ("rows", "mixed")},
            recorded,
            f"saved {name}, restored without a sharding:",
        )
        report[name] = {"specs": specs, "collectives": collectives}
    return report


@pytest.fixture(scope="module")
def round_trips(eight_devices, tmp_path_factory):
    directory = tmp_path_factory.mktemp("placements")
    return directory, eight_devices.run(_round_trips, str(directory))[0]


def test_every_placement_restores_into_every_other(round_trips):
    _, report = round_trips
    assert sorted(report) == ["device_5", "replicated", "split", "split_2d", "split_model"]


@pytest.mark.parametrize(
    "name, rows, w_input, rest",
    [
        ("replicated", (), (), ()),
        (
            "split",
            ("batch",),
            (None, "batch"),
            (),
        ),  # MIXED's recurrent matrices [6, 6] and biases [6]: 8 divides neither
        ("split_2d", (("data", "model"),), (None, ("data", "model")), ()),
        ("split_model", ("model",), ("model",), ("model",)),  # 2 divides every first axis
        ("device_5", ("single device",), ("single device",), ("single device",)),
    ],
)
def test_canonical_tensors_are_saved_split_like_their_buffer(round_trips, name, rows, w_input, rest):
    specs = round_trips[1][name]["specs"]
    assert {spec for tensor, spec in specs.items() if tensor.startswith("rows/")} == {rows}
    assert {spec for tensor, spec in specs.items() if tensor.startswith("mixed/layer_0/forward/w_input")} == {w_input}
    assert {spec for tensor, spec in specs.items() if tensor.startswith("mixed/") and "w_input" not in tensor} == {rest}


def test_saving_a_split_buffer_gathers_it_once_and_never_exchanges_slices(round_trips):
    """A split buffer is all-gathered once (as a training step that reads it does) and each device keeps its block;
    XLA left alone would move each slice point to point (hundreds of collective-permutes, seconds to compile)."""
    report = round_trips[1]
    for name in ("split", "split_2d", "split_model"):
        assert report[name]["collectives"] == {"all-gather": 1, "collective-permute": 0, "all-to-all": 0}, name
    for name in ("replicated", "device_5"):
        assert report[name]["collectives"] == {"all-gather": 0, "collective-permute": 0, "all-to-all": 0}, name


def test_a_checkpoint_from_8_devices_restores_on_one(round_trips):
    """Here (one CPU device) the recorded 8-device meshes do not exist: the buffers land on the local device."""
    directory, _ = round_trips
    host = _host_state()
    local = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    for name in ("split", "split_2d"):
        target = {
            **jax.eval_shape(lambda: host),
            "dense": jax.ShapeDtypeStruct(host["dense"].shape, host["dense"].dtype, sharding=local),
        }
        restored = ocp.Checkpointer(ckpt.CanonicalCheckpointHandler()).restore(
            directory / name, args=ckpt.CanonicalRestore(target)
        )
        _check(restored, host, local, f"saved {name}, restored on one device:")


def _edge_cases(directory: str):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    host, placements = _host_state(), _placements()
    checkpointer = ocp.Checkpointer(ckpt.CanonicalCheckpointHandler())
    # a checkpoint that records no buffer sharding (written before it was recorded): the first local device
    state = jax.tree.map(lambda a: jax.device_put(a, placements["split"]), host)
    checkpointer.save(f"{directory}/unrecorded", args=ckpt.CanonicalSave(state))
    meta_file = f"{directory}/unrecorded/_METADATA"
    with open(meta_file) as f:
        meta = json.load(f)
    assert set(meta["custom_metadata"]["jax_cudnn_rnn"].pop("buffer_shardings")) == {"rows", "mixed"}
    with open(meta_file, "w") as f:
        json.dump(meta, f)
    target = {
        **jax.eval_shape(lambda: host),
        "dense": jax.ShapeDtypeStruct((8, 4), np.float32, sharding=placements["replicated"]),
    }
    restored = checkpointer.restore(f"{directory}/unrecorded", args=ckpt.CanonicalRestore(target))
    for name in ("rows", "mixed"):
        assert restored[name].buffer.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
        np.testing.assert_array_equal(np.asarray(restored[name].buffer), host[name].buffer)

    # a target sharding that cannot hold the buffer is refused with the path and both sizes
    odd = {"odd": jcr.RNNParams(np.arange(layout.params_size(ODD), dtype=np.float32), ODD)}
    checkpointer.save(f"{directory}/odd", args=ckpt.CanonicalSave(odd))
    split = NamedSharding(placements["split"].mesh, P("batch"))
    try:
        checkpointer.restore(
            f"{directory}/odd",
            args=ckpt.CanonicalRestore(
                {"odd": jcr.RNNParams(jax.ShapeDtypeStruct((165,), np.float32, sharding=split), ODD)}
            ),
        )
    except ValueError as e:
        refused = str(e)
    else:
        refused = None
    return {"refused": refused}


def test_unrecorded_sharding_and_a_sharding_that_cannot_hold_the_buffer(eight_devices, tmp_path):
    result = eight_devices.run(_edge_cases, str(tmp_path))[0]
    assert result["refused"] is not None
    assert "RNNParams at 'odd': the target's sharding" in result["refused"]
    assert "cannot hold its buffer of 165 elements" in result["refused"]


def _other_sharding(directory: str):
    """A sharding that is neither named nor single-device (JAX's internal GSPMDSharding, when it still exists)."""
    try:
        from jax._src.sharding_impls import GSPMDSharding
    except ImportError:
        return None
    from jax_cudnn_rnn.sharding import canonical as sharded_canonical

    sharding = GSPMDSharding.get_replicated(jax.devices())
    host = {name: _host_state()[name] for name in ("rows", "mixed")}  # Orbax records no such sharding for a plain array
    state = jax.tree.map(lambda a: jax.device_put(a, sharding), host)
    canonical = sharded_canonical.canonical_sharding(sharding, (6, 8))
    checkpointer = ocp.Checkpointer(ckpt.CanonicalCheckpointHandler())
    checkpointer.save(f"{directory}/gspmd", args=ckpt.CanonicalSave(state))
    restored = checkpointer.restore(f"{directory}/gspmd", args=ckpt.CanonicalRestore(state))
    _check(restored, host, sharding, "saved and restored on a GSPMDSharding:")
    return {"canonical": (type(canonical).__name__, tuple(canonical.spec), canonical.device_set == set(jax.devices()))}


def test_any_other_sharding_gives_tensors_replicated_over_its_devices(eight_devices, tmp_path):
    result = eight_devices.run(_other_sharding, str(tmp_path))[0]
    if result is None:
        pytest.skip("this JAX has no GSPMDSharding to build such a sharding with")
    assert result["canonical"] == ("NamedSharding", (), True)
