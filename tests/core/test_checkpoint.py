"""The Orbax handler: canonical on disk, readable without this library, strict on restore, atomic on failure, also when
the saving process is killed mid-write or the disk fills up (in a subprocess: ``python tests/core/test_checkpoint.py
TASK DIRECTORY`` runs its side of those tests)."""

import errno
import itertools
import json
import os
import resource
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from etils import epath

from jax_cudnn_rnn import checkpoint as ckpt
from jax_cudnn_rnn import layout
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.flax import LSTM
from jax_cudnn_rnn.params import RNNParams

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from strict_promotion import OPTAX_ADAM, peer_promotion
from support import IMPLEMENTATIONS, ORACLE_TOLERANCE, oracle, saves_in_flight, wait_for_a_save_in_flight

ENCODER = RNNConfig("lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional")
DECODER = RNNConfig("gru", num_layers=1, num_units=5, input_size=8)


def _state():
    """An encoder/decoder (the seeds' flow: two named RNNs in one checkpoint) plus a dense layer, with an Adam state
    that has taken one step so mu/nu are non-trivial."""
    params = {
        "encoder": RNNParams.init(jax.random.key(0), ENCODER),
        "decoder": RNNParams.init(jax.random.key(1), DECODER),
        "dense": jnp.arange(10, dtype=jnp.float32).reshape(5, 2),
    }
    opt = optax.adam(1e-2)
    opt_state = opt.init(params)
    grads = jax.tree_util.tree_map(lambda x: jnp.cos(x), params)
    with peer_promotion(OPTAX_ADAM):
        updates, opt_state = opt.update(grads, opt_state, params)
    return {"params": optax.apply_updates(params, updates), "opt_state": opt_state, "step": jnp.int32(7)}


def _fresh(tree):
    """A target with ``tree``'s structure, shapes, dtypes and configs but other values (zeros), so that a restore that
    handed back its target, or any part of it, fails the comparison with what was saved."""
    fresh = jax.tree_util.tree_map(jnp.zeros_like, tree)
    assert all(np.any(np.asarray(a) != 0) for a in jax.tree_util.tree_leaves(tree) if np.asarray(a).size > 1)
    return fresh


def _assert_trees_equal(a, b):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


_OPEN = []


@pytest.fixture(autouse=True)
def _close_checkpointers():
    """Closes every Checkpointer/CheckpointManager a test opened when it ends: one left to the garbage collector
    shuts its asyncio machinery down after the event loop is gone ("Event loop is closed" warnings)."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def _opened(checkpointer):
    _OPEN.append(checkpointer)
    return checkpointer


# Orbax reads and writes arrays as concurrent tensorstore futures under asyncio.run: when one of them fails (a
# damaged file, a simulated disk failure), the error ends the loop while the others are still in flight, and each of
# those later calls loop.call_soon_threadsafe on the closed loop from a tensorstore thread ("Exception ignored ...
# Event loop is closed"). The error the user gets is ours and complete; the stderr line comes from tensorstore's
# callbacks, which this library does not own. Only the tests that provoke such failures ignore it.
_FAILED_IO_NOISE = pytest.mark.filterwarnings(
    r"ignore:(?s)Exception ignored in.*Event loop is closed:pytest.PytestUnraisableExceptionWarning"
)


def _checkpointer():
    return _opened(ocp.Checkpointer(ckpt.CanonicalCheckpointHandler()))


def test_round_trip_with_adam_state_concrete_and_abstract_targets(tmp_path):
    state = _state()
    path = tmp_path / "ckpt"
    _checkpointer().save(path, args=ckpt.CanonicalSave(state))
    restored = _checkpointer().restore(path, args=ckpt.CanonicalRestore(_fresh(state)))
    _assert_trees_equal(restored, state)
    restored = _checkpointer().restore(path, args=ckpt.CanonicalRestore(jax.eval_shape(lambda: state)))
    _assert_trees_equal(restored, state)
    assert isinstance(restored["opt_state"][0].nu["decoder"], RNNParams)
    # without a target: dicts/lists, RNNParams rebuilt at the recorded paths (namedtuples come back as lists)
    untargeted = _checkpointer().restore(path)
    np.testing.assert_array_equal(
        untargeted["opt_state"][0]["mu"]["encoder"].buffer, state["opt_state"][0].mu["encoder"].buffer
    )
    assert ckpt.CanonicalCheckpointHandler().saved_configs(path) == {
        f"{prefix}/{name}": cfg
        for prefix in ("params", "opt_state/0/mu", "opt_state/0/nu")
        for name, cfg in (("encoder", ENCODER), ("decoder", DECODER))
    }


def test_plain_standard_checkpointer_reads_canonical_arrays(tmp_path):
    state = _state()
    path = tmp_path / "ckpt"
    _checkpointer().save(path, args=ckpt.CanonicalSave(state))
    plain = _opened(ocp.StandardCheckpointer()).restore(path)  # no target, no jax_cudnn_rnn types involved
    for name, config in (("encoder", ENCODER), ("decoder", DECODER)):
        for saved_tree, buffer in (
            (plain["params"][name], state["params"][name].buffer),
            (plain["opt_state"][0]["nu"][name], state["opt_state"][0].nu[name].buffer),
        ):
            assert isinstance(saved_tree, dict)
            weights, biases = layout.params_to_canonical(buffer, config)
            slots = layout.param_slots(config)
            for slot, expected in zip(slots[0] + slots[1], weights + biases, strict=True):
                node = saved_tree
                for key in slot.name(config).split("/"):
                    node = node[key]
                np.testing.assert_array_equal(np.asarray(node), np.asarray(expected), err_msg=slot.name(config))
    np.testing.assert_array_equal(plain["params"]["dense"], state["params"]["dense"])
    # the configs are plain JSON in the item's metadata
    meta = json.loads((path / "_METADATA").read_text())
    ours = meta["custom_metadata"]["jax_cudnn_rnn"]
    assert ours["format_version"] == ckpt.FORMAT_VERSION
    assert RNNConfig.from_json(ours["rnn_params"]["params/decoder"]) == DECODER


def test_encoder_and_decoder_kept_apart_in_a_checkpoint_manager(tmp_path):
    state = _state()
    manager = _opened(ocp.CheckpointManager(tmp_path / "run", options=ocp.CheckpointManagerOptions(max_to_keep=2)))
    manager.save(1, args=ocp.args.Composite(state=ckpt.CanonicalSave(state), extra=ocp.args.JsonSave({"vocab": 9})))
    manager.wait_until_finished()
    # restore into freshly initialised models: each name gets its own weights back
    target = {
        "encoder": RNNParams.init(jax.random.key(9), ENCODER),
        "decoder": RNNParams.init(jax.random.key(9), DECODER),
        "dense": jnp.zeros((5, 2)),
    }
    restored = manager.restore(
        1,
        args=ocp.args.Composite(
            state=ckpt.CanonicalRestore(
                {"params": target, "opt_state": jax.eval_shape(lambda: state["opt_state"]), "step": jnp.int32(0)}
            ),
            extra=ocp.args.JsonRestore(),
        ),
    )
    assert restored["extra"] == {"vocab": 9}
    for name in ("encoder", "decoder"):
        np.testing.assert_array_equal(restored["state"]["params"][name].buffer, state["params"][name].buffer)
    assert int(restored["state"]["step"]) == 7
    # swapping the names is a config mismatch, reported with the path and the tensor's two shapes
    swapped = {
        "params": {"encoder": target["decoder"], "decoder": target["encoder"], "dense": jnp.zeros((5, 2))},
        "opt_state": state["opt_state"],
        "step": jnp.int32(0),
    }
    with pytest.raises(
        ValueError,
        match=r"RNNParams at 'params/decoder'.*mode: checkpoint 'gru' vs target 'lstm'.*"
        r"first differing tensor layer_0/forward/w_input/i: checkpoint shape absent, "
        r"target shape \(4, 3\)",
    ):
        manager.restore(1, args=ocp.args.Composite(state=ckpt.CanonicalRestore(swapped)))


def test_shape_mismatch_names_path_tensor_and_both_shapes(tmp_path):
    state = _state()
    path = tmp_path / "ckpt"
    _checkpointer().save(path, args=ckpt.CanonicalSave(state))
    wider = RNNConfig("gru", num_layers=1, num_units=6, input_size=8)
    target = jax.eval_shape(lambda: state)
    target["params"]["decoder"] = jax.eval_shape(lambda: RNNParams.init(jax.random.key(0), wider))
    with pytest.raises(
        ValueError,
        match=r"'params/decoder'.*num_units: checkpoint 5 vs target 6.*layer_0/forward/"
        r"w_input/r: checkpoint shape \(5, 8\), target shape \(6, 8\)",
    ):
        _checkpointer().restore(path, args=ckpt.CanonicalRestore(target))
    target = jax.eval_shape(lambda: state)
    target["params"]["extra_rnn"] = target["params"]["decoder"]
    with pytest.raises(ValueError, match=r"target has RNNParams at 'params/extra_rnn' but the checkpoint has none"):
        _checkpointer().restore(path, args=ckpt.CanonicalRestore(target))
    # fields that do not change the weights may differ: the target's dtype wins (values cast)
    target = jax.eval_shape(lambda: state)
    half = RNNConfig("gru", num_layers=1, num_units=5, input_size=8, dtype=jnp.bfloat16, dropout=0.3)
    target["params"]["decoder"] = jax.eval_shape(lambda: RNNParams.init(jax.random.key(0), half))
    restored = _checkpointer().restore(path, args=ckpt.CanonicalRestore(target))
    assert restored["params"]["decoder"].config == half
    np.testing.assert_array_equal(
        np.asarray(restored["params"]["decoder"].buffer),
        np.asarray(state["params"]["decoder"].buffer.astype(jnp.bfloat16)),
    )


@_FAILED_IO_NOISE
def test_damaged_checkpoints_raise_clear_errors(tmp_path):
    state = _state()
    path = tmp_path / "ckpt"
    _checkpointer().save(path, args=ckpt.CanonicalSave(state))
    target = jax.eval_shape(lambda: state)

    # a config edited in the metadata no longer matches the stored tensors
    meta_file = path / "_METADATA"
    original = meta_file.read_text()
    meta = json.loads(original)
    meta["custom_metadata"]["jax_cudnn_rnn"]["rnn_params"]["params/decoder"]["num_units"] = 7
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(
        ckpt.CheckpointError,
        match=r"inconsistent at 'params/decoder': tensor "
        r"layer_0/forward/w_input/r has shape \(5, 8\) but its stored "
        r"config .* implies \(7, 8\)",
    ):
        _checkpointer().restore(path, args=ckpt.CanonicalRestore(target))
    for name in ("rnn_params", "buffer_shardings"):  # a field of the wrong type, with a target and without
        edited = json.loads(original)
        edited["custom_metadata"]["jax_cudnn_rnn"][name] = "x"
        meta_file.write_text(json.dumps(edited))
        for restore in (ckpt.CanonicalRestore(target), ckpt.CanonicalRestore(None)):
            with pytest.raises(ckpt.CheckpointError, match=f"damaged: its jax_cudnn_rnn metadata's {name} is a str"):
                _checkpointer().restore(path, args=restore)
    meta["custom_metadata"]["jax_cudnn_rnn"]["format_version"] = 99
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ckpt.CheckpointError, match="format_version 99; this library reads version 1"):
        _checkpointer().restore(path, args=ckpt.CanonicalRestore(target))
    meta_file.write_text(original[: len(original) // 2])  # truncated JSON
    with pytest.raises(ckpt.CheckpointError, match="cannot read the checkpoint metadata"):
        _checkpointer().restore(path, args=ckpt.CanonicalRestore(target))
    meta_file.write_text(original)
    _checkpointer().restore(path, args=ckpt.CanonicalRestore(target))  # intact again

    # truncated array data files
    data_files = [p for p in path.rglob("*") if p.is_file() and "/d/" in str(p)]
    assert data_files
    for data in data_files:
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(
        ckpt.CheckpointError, match=r"cannot read the checkpoint .*\(damaged or incomplete\?\): .*OUT_OF_RANGE"
    ):
        _checkpointer().restore(path, args=ckpt.CanonicalRestore(target))


@_FAILED_IO_NOISE
def test_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    state = _state()
    manager = _opened(ocp.CheckpointManager(tmp_path / "run"))

    def save(step, tree):
        """Saves and waits: the error may come from either (Orbax finishes a save in the background)."""
        manager.save(step, args=ocp.args.Composite(state=ckpt.CanonicalSave(tree)))
        manager.wait_until_finished()

    save(1, state)

    # 1) fails after the arrays are written, before Orbax commits (renames) the step
    def fail(self, directory):
        raise OSError("simulated disk failure while finalizing")

    monkeypatch.setattr(ckpt.CanonicalCheckpointHandler, "finalize", fail)
    changed = jax.tree_util.tree_map(lambda x: x + 1, state)
    with pytest.raises(OSError, match="simulated disk failure"):
        save(2, changed)
    monkeypatch.undo()
    # 2) an unserialisable leaf
    with pytest.raises(ValueError, match="Unsupported type"):
        save(3, {**state, "note": "text"})

    reopened = _opened(ocp.CheckpointManager(tmp_path / "run"))
    assert reopened.all_steps() == [1]
    restored = reopened.restore(1, args=ocp.args.Composite(state=ckpt.CanonicalRestore(_fresh(state))))["state"]
    _assert_trees_equal(restored, state)

    # The plain Checkpointer on a fresh path is atomic too: nothing is left at the final path.
    with monkeypatch.context() as patch:
        patch.setattr(ckpt.CanonicalCheckpointHandler, "finalize", fail)
        with pytest.raises(OSError, match="simulated disk failure"):
            _checkpointer().save(tmp_path / "single", args=ckpt.CanonicalSave(state))
    assert not (tmp_path / "single").exists()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_trained_module_restores_into_a_fresh_model(tmp_path, implementation):
    """A Flax LSTM trained a few Adam steps under ``implementation`` (cuDNN on a GPU), saved with its optimizer state
    and restored into a freshly initialised model and optimizer: the saved values come back, and the restored model's
    outputs are the NumPy oracle's for the saved weights."""
    batch, steps, features = 3, 6, 5
    model = LSTM(num_units=4, num_layers=2, direction="bidirectional", implementation=implementation)
    x = jax.random.normal(jax.random.key(0), (batch, steps, features))
    opt = optax.adam(1e-2)

    @jax.jit
    def train_step(params, opt_state):
        grads = jax.grad(lambda p: jnp.mean(model.apply({"params": p}, x) ** 2))(params)
        with peer_promotion(OPTAX_ADAM):
            updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    params = model.init(jax.random.key(1), x)["params"]
    opt_state = opt.init(params)
    for _ in range(3):
        params, opt_state = train_step(params, opt_state)
    state = {"params": params, "opt_state": opt_state}
    _checkpointer().save(tmp_path / "ckpt", args=ckpt.CanonicalSave(state))
    fresh_params = model.init(jax.random.key(2), x)["params"]
    target = {"params": fresh_params, "opt_state": opt.init(fresh_params)}
    restored = _checkpointer().restore(tmp_path / "ckpt", args=ckpt.CanonicalRestore(target))
    _assert_trees_equal(restored, state)
    rnn_params = model.packed(restored["params"])  # the module's named tensors in the buffer the kernels run
    assert np.any(np.asarray(rnn_params.buffer) != np.asarray(model.packed(fresh_params).buffer))
    config = rnn_params.config
    zeros = np.zeros(config.state_shape(batch), np.float32)
    want = np.swapaxes(oracle(config, rnn_params.buffer, np.swapaxes(np.asarray(x), 0, 1), zeros, zeros)[0], 0, 1)
    tol = ORACLE_TOLERANCE[implementation]
    np.testing.assert_allclose(np.asarray(model.apply({"params": restored["params"]}, x)), want, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------- faults, in a subprocess
_TIMEOUT = 60  # seconds for any one process; each takes about 5 on 2 CPU cores


def _state_at(step):
    """The state a fault test saves at ``step``: ``_state()`` shifted by ``step`` (so that steps differ), plus a
    4 MiB array of noise, which does not compress: the arrays' writing takes most of a save, and overflows the full
    disk of ``test_a_full_disk_...``."""
    shifted = jax.tree_util.tree_map(lambda x: x + step, _state())
    return {**shifted, "noise": jax.random.normal(jax.random.key(step), (1 << 20,))}


def _child(task, directory, file_size_limit=None):
    """The saving side of a fault test. ``save-until-killed``: saves steps 1, 2, ... until the parent kills it.
    ``fill-the-disk``: saves step 1 (``_state()``, small), then step 2 (``_state_at(2)``) into a disk too small for
    it, and prints as JSON the error that raised and the steps the manager finds after ``reload()``. ``file_size_limit``
    (bytes): RLIMIT_FSIZE for this process, the full disk's stand-in where no tmpfs can be mounted (writes past it fail
    with EFBIG, SIGXFSZ ignored)."""
    if file_size_limit is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))
    manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(max_to_keep=1))
    if task == "save-until-killed":
        for step in itertools.count(1):  # each save waits for the previous one to commit
            manager.save(step, args=ocp.args.Composite(state=ckpt.CanonicalSave(_state_at(step))))
    manager.save(1, args=ocp.args.Composite(state=ckpt.CanonicalSave(_state())))
    manager.wait_until_finished()
    try:
        manager.save(2, args=ocp.args.Composite(state=ckpt.CanonicalSave(_state_at(2))))
        manager.wait_until_finished()
    except Exception as e:  # noqa: BLE001 - what the user gets, whatever its type
        error = f"{type(e).__name__}: {e}"
    else:
        error = None
    manager.reload()  # the failed save left the manager's list of steps stale (checkpoint.py's docstring)
    print(json.dumps({"error": error, "steps": list(manager.all_steps())}))


def _start_child(task, directory, *extra):
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), task, str(directory), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _assert_step_restores_exactly(directory, step, expected):
    manager = _opened(ocp.CheckpointManager(directory))
    assert manager.all_steps() == [step] and manager.latest_step() == step
    restored = manager.restore(step, args=ocp.args.Composite(state=ckpt.CanonicalRestore(_fresh(expected))))
    _assert_trees_equal(restored["state"], expected)


def test_a_save_killed_mid_write_leaves_the_previous_step_latest_and_exact(tmp_path):
    """SIGKILL (a preempted VM, an OOM kill) while a step's arrays are written: Orbax writes the step into a
    temporary directory and commits it by renaming, so the previous step stays the latest (max_to_keep=1 deletes it
    only after the commit) and restores bit for bit."""
    directory = tmp_path / "run"
    child = _start_child("save-until-killed", directory)
    try:
        wait_for_a_save_in_flight(child, directory, 2, _TIMEOUT, describe=lambda: child.stderr.read()[-3000:])
    finally:
        child.kill()
        child.communicate(timeout=_TIMEOUT)
    in_flight = saves_in_flight(directory)
    assert in_flight, f"the kill came after the save was committed: {sorted(os.listdir(directory))}"
    killed_step = ocp.path.step.step_from_checkpoint_name(in_flight[-1])
    _assert_step_restores_exactly(directory, killed_step - 1, _state_at(killed_step - 1))


def _mount_tmpfs(where, size):
    """Mounts a tmpfs of ``size`` at ``where``; the reason when this machine does not allow it (not root, a container
    without CAP_SYS_ADMIN), else None."""
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
        )
    except OSError as e:
        return str(e)
    return None if mounted.returncode == 0 else mounted.stderr.strip() or f"mount exited {mounted.returncode}"


@pytest.mark.parametrize("disk", ["tmpfs", "file size limit"])
def test_a_full_disk_raises_naming_the_path_and_keeps_what_was_saved(tmp_path, disk):
    """A save into a disk with no room for it (a 1 MiB tmpfs where one can be mounted; everywhere, RLIMIT_FSIZE as a
    stand-in: writes past 1 MiB fail) raises an error that names the step's path, and step 1, saved before, stays the
    only step and restores bit for bit, though max_to_keep=1 would have deleted it after a successful save."""
    disk_dir = tmp_path / "disk"
    disk_dir.mkdir()
    directory = disk_dir / "run"
    extra = []
    if disk == "tmpfs":
        reason = _mount_tmpfs(disk_dir, "1m")
        if reason is not None:
            pytest.skip(f"cannot mount a tmpfs here ({reason}); the 'file size limit' case stands in for it")
    else:
        extra = [str(1 << 20)]
    try:
        child = _start_child("fill-the-disk", directory, *extra)
        out, err = child.communicate(timeout=_TIMEOUT)
        assert child.returncode == 0, err[-3000:]
        report = json.loads(out.strip().splitlines()[-1])
        error = report["error"]
        assert error is not None, "the save of step 2 did not fail"
        assert report["steps"] == [1]
        assert f"{directory}/2.orbax-checkpoint-tmp" in error, error
        assert ("No space left on device" if disk == "tmpfs" else "File too large") in error, error
        _assert_step_restores_exactly(directory, 1, _state())
    finally:
        while _OPEN:
            _OPEN.pop().close()
        if disk == "tmpfs":
            subprocess.run(["umount", str(disk_dir)], check=True, timeout=_TIMEOUT)


def test_a_failed_write_that_names_no_file_raises_naming_the_step(tmp_path, monkeypatch):
    """Orbax writes a step's pytree metadata (``_METADATA``) with Python's ``write_text``, whose ``OSError`` on a full
    disk names no file (``[Errno 28] No space left on device``: CI met it once in the tmpfs case above, where that write
    met the full disk before the arrays' did). The error the user gets names the step's directory, keeps the errno, and
    step 1, saved before, stays the only step and restores bit for bit."""
    directory = tmp_path / "run"
    manager = _opened(ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(max_to_keep=1)))
    manager.save(1, args=ocp.args.Composite(state=ckpt.CanonicalSave(_state())))
    manager.wait_until_finished()
    path_type = type(epath.Path(directory))
    write_text = path_type.write_text

    def full_disk(self, *args, **kwargs):
        if self.name == "_METADATA" and "2.orbax-checkpoint-tmp" in str(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text(self, *args, **kwargs)

    def save_step_2():
        manager.save(2, args=ocp.args.Composite(state=ckpt.CanonicalSave(_state_at(2))))
        manager.wait_until_finished()

    monkeypatch.setattr(path_type, "write_text", full_disk)
    with pytest.raises(OSError, match="No space left on device") as raised:
        save_step_2()
    monkeypatch.undo()
    assert raised.value.errno == errno.ENOSPC
    assert f"{directory}/2.orbax-checkpoint-tmp" in str(raised.value), raised.value
    manager.reload()
    assert manager.all_steps() == [1]
    _assert_step_restores_exactly(directory, 1, _state())


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:]))
