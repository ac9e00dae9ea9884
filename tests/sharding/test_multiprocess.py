"""Multi-process training and checkpoints: 2 JAX processes x 4 CPU devices joined by ``jax.distributed`` (gloo).

The functions without ``test_`` run in both processes at once (``multiprocess.Cluster``, started once for this
module); every array they build is global over the 8 devices of a ``("batch",)`` mesh, each process holding its 4
devices' shards, as on a multi-host GPU job. They check what they can see in-process (their own shards) and return
NumPy results that the tests compare across processes and with a one-process run.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jax_cudnn_rnn as jcr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import multiprocess
from support import oracle

T, B = 5, 16  # 2 sequences per device
ENCODER = jcr.RNNConfig("lstm", num_layers=2, num_units=8, input_size=3, direction="bidirectional")
DECODER = jcr.RNNConfig("gru", num_layers=1, num_units=5, input_size=4)  # 165 elements: no split divides it
OPTIMIZER = optax.adam(1e-2)


@pytest.fixture(scope="module")
def cluster():
    with multiprocess.Cluster(num_processes=2, local_devices=4) as running:
        yield running


def _mesh():
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices()), ("batch",))


def _sharding(spec):
    from jax.sharding import NamedSharding

    return NamedSharding(_mesh(), spec)


def _batch(seed: int = 1):
    """x [T, B, 3], the encoder's initial (h0, c0) [4, B, 8] and seq_lengths [B], the same in every process."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, B, ENCODER.input_size)).astype(np.float32)
    h0 = (0.5 * rng.normal(size=ENCODER.state_shape(B))).astype(np.float32)
    c0 = (0.5 * rng.normal(size=ENCODER.cell_shape(B))).astype(np.float32)
    lengths = (np.arange(B) % T + 1).astype(np.int32)
    return x, h0, c0, lengths


# ------------------------------------------------------------------------------------------------ the harness
def _whoami():
    return jax.process_index(), jax.process_count(), jax.device_count(), jax.local_device_count()


def _raise_in_process_1_while_process_0_hangs():
    if jax.process_index() == 1:
        raise ValueError("planted failure in process 1")
    time.sleep(600)  # as a process waiting forever in a collective for its failed peer


def _sleep(seconds: float):
    time.sleep(seconds)


def test_a_failure_or_a_timeout_is_an_error_with_every_process_story_never_a_hang(cluster, monkeypatch):
    assert cluster.run(_whoami) == [(0, 2, 8, 4), (1, 2, 8, 4)]
    monkeypatch.setattr(cluster, "grace", 3)
    started = time.monotonic()
    with pytest.raises(
        multiprocess.ClusterError,
        match=r"(?s)process 0 did not answer in time \(killed\).*"
        r"process 1 raised:.*ValueError: planted failure",
    ):
        cluster.run(_raise_in_process_1_while_process_0_hangs, timeout=120)
    assert time.monotonic() - started < 60  # process 0 was killed after the grace period, not after 120 s
    with pytest.raises(multiprocess.ClusterError, match=r"(?s)_sleep failed.*process 0 did not answer in time"):
        cluster.run(_sleep, 60, timeout=2)
    assert cluster.run(_whoami) == [(0, 2, 8, 4), (1, 2, 8, 4)]  # fresh processes
    with pytest.raises(ValueError, match="module-level function"):
        cluster.run(lambda: None)


# ------------------------------------------------------------------------------------------------ rnn() step
def _rnn_loss(params, x, h0, c0, lengths):
    y, h_n, c_n = jcr.rnn(params, x, h0, c0, ENCODER, seq_lengths=lengths)
    return jnp.mean(y**2) + jnp.mean(h_n * c_n)


def _sharded_rnn_step():
    """Loss and weight gradient of a 2-layer bidirectional LSTM, batch split over all 8 devices of both processes,
    next to the same step on one local device."""
    from jax.sharding import PartitionSpec as P

    params = np.asarray(jcr.init_params(jax.random.key(0), ENCODER))
    x, h0, c0, lengths = _batch()
    step = jax.jit(jax.value_and_grad(_rnn_loss))
    batch = _sharding(P(None, "batch"))
    args = (
        multiprocess.global_array(params, _sharding(P())),
        multiprocess.global_array(x, batch),
        multiprocess.global_array(h0, batch),
        multiprocess.global_array(c0, batch),
        multiprocess.global_array(lengths, _sharding(P("batch"))),
    )
    loss, grad = step(*args)
    assert grad.sharding.is_fully_replicated, grad.sharding
    hlo = step.lower(*args).compile().as_text()
    local_loss, local_grad = step(params, x, h0, c0, lengths)
    assert len(local_grad.devices()) == 1
    return {
        "loss": multiprocess.local_copy(loss),
        "grad": multiprocess.local_copy(grad),
        "one_device_loss": np.asarray(local_loss),
        "one_device_grad": np.asarray(local_grad),
        "params": params,
        "collectives": {op: hlo.count(f"{op}(") for op in ("all-gather", "all-to-all", "all-reduce")},
    }


def test_batch_sharded_rnn_step_equals_one_process(cluster):
    results = cluster.run(_sharded_rnn_step)
    first = results[0]
    for other in results[1:]:  # every process holds the same replicated loss and gradient, bit for bit
        np.testing.assert_array_equal(other["loss"], first["loss"])
        np.testing.assert_array_equal(other["grad"], first["grad"])
    np.testing.assert_allclose(first["loss"], first["one_device_loss"], rtol=1e-6)
    np.testing.assert_allclose(first["grad"], first["one_device_grad"], rtol=1e-5, atol=1e-7)
    # the loss against the float64 oracle, which knows nothing of sharding or of the opaque buffer
    x, h0, c0, lengths = _batch()
    y, h_n, c_n = oracle(ENCODER, first["params"], x, h0, c0, seq_lengths=lengths)
    np.testing.assert_allclose(first["loss"], np.mean(y**2) + np.mean(h_n * c_n), rtol=1e-5)
    assert np.abs(first["grad"]).max() > 1e-3
    # each device ran its own rows: no activation crossed devices, only the weight gradient's partial sums did
    assert first["collectives"]["all-gather"] == first["collectives"]["all-to-all"] == 0, first["collectives"]
    assert first["collectives"]["all-reduce"] >= 1


# ------------------------------------------------------------------------------------------------ cuDNN path
def _cudnn_path_with_stand_ins():
    """The cuDNN path's own code (the plan, custom_vjp, reserve-space layout, partitioning) across both processes, its
    kernels stood in for (tests/cudnn_stand_in.py: the forward writes its local batch size into every reserve byte,
    the backward adds (byte - its local batch) to dx, so a backward handed another shard's or a gathered reserve
    space changes the numbers) and every process given the same kind of fake H100."""
    import dataclasses

    from cudnn_stand_in import CudnnStandIn
    from jax.sharding import PartitionSpec as P

    from jax_cudnn_rnn.backends.cudnn import plan

    @dataclasses.dataclass(frozen=True)
    class FakeGPU:  # what the plan reads of a GPU: each process's own first GPU, of one model
        id: int
        local_hardware_id: int = 0
        device_kind: str = "NVIDIA H100 80GB HBM3"
        compute_capability: str = "9.0"
        core_count: int = 132
        platform: str = "gpu"

    stand_in = CudnnStandIn(reserve_bytes=lambda problem: 1000 * problem.batch + 37)  # not proportional to B
    target_device = plan.target_device
    plan.target_device = lambda where: FakeGPU(id=jax.process_index())
    stand_in.__enter__()
    try:
        params = np.asarray(jcr.init_params(jax.random.key(0), ENCODER))
        x, h0, c0, _ = _batch()

        def loss(algorithm, p, x, h, c):
            y, h_n, c_n = jcr.rnn(p, x, h, c, ENCODER, implementation="cudnn", algorithm=algorithm)
            return jnp.sum(y**2) + jnp.sum(h_n * c_n)

        batch = _sharding(P(None, "batch"))
        args = (
            multiprocess.global_array(params, _sharding(P())),
            multiprocess.global_array(x, batch),
            multiprocess.global_array(h0, batch),
            multiprocess.global_array(c0, batch),
        )
        grad = jax.jit(jax.grad(lambda *a: loss("heuristic", *a), argnums=(0, 1, 2, 3)))
        hlo = grad.lower(*args).compile().as_text()
        got = grad(*args)
        want = jax.grad(
            lambda p, x, h, c: jnp.sum(
                (lambda y, h_n, c_n: jnp.sum(y**2) + jnp.sum(h_n * c_n))(
                    *jcr.rnn(p, x, h, c, ENCODER, implementation="xla")
                )
            ),
            argnums=(0, 1, 2, 3),
        )(params, x, h0, c0)
        np.testing.assert_allclose(multiprocess.local_copy(got[0]), want[0], rtol=1e-5, atol=2e-6)
        for array, expected in zip(got[1:], want[1:], strict=True):  # dx, dh0, dc0: this process's rows
            for shard in array.addressable_shards:
                np.testing.assert_allclose(np.asarray(shard.data), np.asarray(expected)[shard.index], atol=2e-5)
        try:
            jax.jit(jax.grad(lambda *a: loss("autotune", *a))).lower(*args)
            refused = None
        except ValueError as e:
            refused = str(e)
    finally:
        stand_in.__exit__()
        plan.target_device = target_device
    return {
        "plans": sorted({(p.algorithm, p.row_bytes, p.local_batches) for p in stand_in.plans}),
        "local_batch": min(stand_in.batches),
        "refused": refused,
        "collectives": {op: hlo.count(f"{op}(") for op in ("all-gather", "all-to-all", "all-reduce")},
    }


def test_cudnn_path_plans_alike_in_every_process_and_runs_per_shard(cluster):
    """Every process makes the same plan (the heuristic's algorithm for the per-device batch, the same reserve rows),
    each device runs its own 2 rows with its own reserve space, and autotune, which would time each process's own GPU,
    is refused."""
    from jax_cudnn_rnn.backends.cudnn import algorithm

    results = cluster.run(_cudnn_path_with_stand_ins)
    assert results[0]["plans"] == results[1]["plans"]
    facts = algorithm.DeviceInfo(9, 0, 132, "NVIDIA H100 80GB HBM3", 0)
    chosen = algorithm.heuristic(algorithm.Problem(ENCODER, T, B // 8, False, True, False), facts)
    assert chosen == algorithm.PERSIST_STATIC_SMALL_H  # H = 8: a persistent kernel, not the default
    # The training plan: reserve rows fit the per-device call (2 rows: 2037 bytes) and the whole batch (16037 bytes).
    # Under jax_custom_vjp3 a custom_vjp traces its undifferentiated function even under jax.grad (jax._src.hijax's
    # custom_vjp3.__call__ traces it before any rule applies), so the call's inference forward is planned too: a plan
    # of the same algorithm with no reserve rows, whose kernel is not in the differentiated program (one forward call
    # there: tests/backends/test_vmap_folding.py, run under the flag by tests/core/test_custom_vjp3.py). Without the
    # flag only the training forward is traced.
    training = [p for p in results[0]["plans"] if p[2]]
    assert training == [(chosen, -(-2037 // 2), (2, 16))]
    assert set(results[0]["plans"]) - set(training) <= {(chosen, 0, ())}
    for result in results:
        assert result["local_batch"] == 2
        assert result["collectives"]["all-gather"] == result["collectives"]["all-to-all"] == 0
        assert result["collectives"]["all-reduce"] >= 1
        assert "algorithm='autotune' is refused with 2 JAX processes" in result["refused"]


# ------------------------------------------------------------------------------------------------ Flax + optax
def _flax_training(num_steps: int):
    """A Flax LSTM + Dense head trained with Adam for ``num_steps`` batch-sharded steps (params replicated), and the
    same training on one local device. Returns both parameter trees and both loss curves."""
    import flax.linen as nn
    from jax.sharding import PartitionSpec as P

    from jax_cudnn_rnn.flax import LSTM

    class Tagger(nn.Module):
        @nn.compact
        def __call__(self, x, seq_lengths):
            y = LSTM(num_units=8, num_layers=2, direction="bidirectional")(x, seq_lengths)
            return nn.Dense(2)(y)

    x, _, _, lengths = _batch()
    x = np.swapaxes(x, 0, 1)  # batch-major, like flax.linen.RNN
    labels = (x.sum(-1) > 0).astype(np.int32)
    model, optimizer = Tagger(), optax.adam(3e-2)
    params = model.init(jax.random.key(0), x, lengths)
    state = (params, optimizer.init(params))

    def step(state, x, labels, lengths):
        params, opt_state = state

        def loss_fn(params):
            logits = model.apply(params, x, lengths)
            mask = jnp.arange(x.shape[1])[None, :] < lengths[:, None]
            losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            return jnp.sum(losses * mask) / jnp.sum(mask)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    replicated, rows = _sharding(P()), _sharding(P("batch"))
    sharded_state = jax.tree.map(lambda a: multiprocess.global_array(a, replicated), state)
    sharded_step = jax.jit(step, out_shardings=(jax.tree.map(lambda _: replicated, state), replicated))
    sharded_args = (
        multiprocess.global_array(x, rows),
        multiprocess.global_array(labels, rows),
        multiprocess.global_array(lengths, rows),
    )
    local_step = jax.jit(step)
    losses, local_losses = [], []
    for _ in range(num_steps):
        sharded_state, loss = sharded_step(sharded_state, *sharded_args)
        state, local_loss = local_step(state, x, labels, lengths)
        losses.append(multiprocess.local_copy(loss))
        local_losses.append(np.asarray(local_loss))
    return {
        "params": jax.tree.map(multiprocess.local_copy, sharded_state[0]),
        "losses": np.array(losses),
        "one_device_params": jax.tree.map(np.asarray, state[0]),
        "one_device_losses": np.array(local_losses),
    }


def test_flax_module_trained_with_optax_across_processes(cluster):
    results = cluster.run(_flax_training, 4)
    first = results[0]
    for other in results[1:]:
        jax.tree.map(np.testing.assert_array_equal, other["params"], first["params"])
    np.testing.assert_allclose(first["losses"], first["one_device_losses"], rtol=1e-5)
    assert first["losses"][-1] < first["losses"][0]  # it trains
    rnn_params = first["params"]["params"]["LSTM_0"]["rnn_params"]  # Flax's LSTM cell's named tensors
    assert rnn_params["layer_0"]["forward"]["w_recurrent"]["f"].shape == (8, 8)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6), first["params"], first["one_device_params"]
    )


# ------------------------------------------------------------------------------------------------ checkpoints
def _host_state():
    """A whole training state, the same NumPy-valued tree in every process: two RNNs and a dense kernel, Adam's state
    after one step (so mu and nu hold RNNParams with non-trivial values), a step counter and the encoder's carried
    (h, c) [4, B, 8] for truncated backpropagation through time."""
    _, h0, c0, _ = _batch()

    @jax.jit  # one compilation instead of an eager dispatch per optax operation
    def make():
        params = {
            "encoder": jcr.RNNParams.init(jax.random.key(0), ENCODER),
            "decoder": jcr.RNNParams.init(jax.random.key(1), DECODER),
            "dense": jnp.linspace(-1, 1, 2 * ENCODER.num_units * DECODER.input_size).reshape(16, 4),
        }
        grads = jax.tree.map(jnp.cos, params)
        updates, opt_state = OPTIMIZER.update(grads, OPTIMIZER.init(params), params)
        return {
            "params": optax.apply_updates(params, updates),
            "opt_state": opt_state,
            "step": jnp.int32(1),
            "carry": (jnp.asarray(h0), jnp.asarray(c0)),
        }

    return jax.tree.map(np.asarray, make())


def _state_shardings(state, layout: str):
    """ "replicated": every leaf on every device. "sharded": the carry split along its batch axis, every other array
    along its first axis where 8 divides it (params and Adam moments ZeRO-style), replicated where not."""
    from jax.sharding import PartitionSpec as P

    def place(path, leaf):
        if layout == "replicated" or np.ndim(leaf) == 0:
            return _sharding(P())
        if jax.tree_util.keystr(path).startswith("['carry']"):
            return _sharding(P(None, "batch"))
        return _sharding(P("batch") if np.shape(leaf)[0] % jax.device_count() == 0 else P())

    return jax.tree_util.tree_map_with_path(place, state)


def _placed(state, layout: str):
    return jax.tree.map(multiprocess.global_array, state, _state_shardings(state, layout))


def _abstract(state):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state)


def _check_placed(restored, host, shardings) -> int:
    """Every leaf of ``restored`` is on its sharding and holds ``host``'s values bit for bit in each shard this
    process holds; returns the number of shards checked."""
    assert jax.tree.structure(restored) == jax.tree.structure(host)
    checked = 0
    for (path, got), want, sharding in zip(
        jax.tree_util.tree_leaves_with_path(restored), jax.tree.leaves(host), jax.tree.leaves(shardings), strict=True
    ):
        where = jax.tree_util.keystr(path)
        assert got.sharding.is_equivalent_to(sharding, np.ndim(want)), (where, got.sharding, sharding)
        assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
        for shard in got.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index], err_msg=where)
            checked += 1
    return checked


def _checkpoint_round_trip(directory: str, layout: str):
    """Saves the state placed as ``layout`` from both processes, then restores it into concrete and abstract
    targets of both layouts, into a target without shardings, and without a target."""
    import orbax.checkpoint as ocp

    from jax_cudnn_rnn import checkpoint as ckpt
    from jax_cudnn_rnn import layout as buffer_layout

    host = _host_state()
    state = _placed(host, layout)
    canonical, _ = ckpt.to_canonical_tree(state)
    specs = {
        path: tuple(leaf.sharding.spec)
        for path, leaf in buffer_layout.flatten_tree(canonical["params"]).items()
        if isinstance(leaf, jax.Array)
    }
    checkpointer = ocp.Checkpointer(ckpt.CanonicalCheckpointHandler())
    checkpointer.save(directory, args=ckpt.CanonicalSave(state))

    checked = {}
    other = "replicated" if layout == "sharded" else "sharded"
    for name, target in (("concrete", state), ("abstract", _abstract(state)), (other, _abstract(_placed(host, other)))):
        restored = checkpointer.restore(directory, args=ckpt.CanonicalRestore(target))
        assert isinstance(restored["opt_state"][0].nu["encoder"], jcr.RNNParams)
        checked[name] = _check_placed(restored, host, _state_shardings(host, layout if name != other else other))
    # no shardings in the target (jax.eval_shape): every leaf where it was saved, as Orbax does for plain arrays
    restored = checkpointer.restore(directory, args=ckpt.CanonicalRestore(jax.eval_shape(lambda: host)))
    checked["recorded"] = _check_placed(restored, host, _state_shardings(host, layout))
    # without a target and without rebuilding: the canonical tensors as plain Orbax gives them
    raw = checkpointer.restore(directory, args=ckpt.CanonicalRestore(rebuild=False))
    for name in ("encoder", "decoder"):
        want = buffer_layout.flatten_tree(host["opt_state"][0].mu[name].to_tree())
        got = buffer_layout.flatten_tree(raw["opt_state"][0]["mu"][name])
        assert sorted(got) == sorted(want)
        for tensor, value in got.items():
            for shard in value.addressable_shards:
                np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(want[tensor])[shard.index])
    return {"specs": specs, "checked": checked, "process": jax.process_index()}


@pytest.mark.parametrize("layout", ["replicated", "sharded"])
def test_train_state_round_trips_through_the_handler_in_every_process(cluster, tmp_path, layout):
    results = cluster.run(_checkpoint_round_trip, str(tmp_path / "ckpt"), layout)
    assert [r["process"] for r in results] == [0, 1]
    for result in results:
        # each process checked its own shards of every leaf (13 leaves; a replicated leaf has 4 local shards)
        assert set(result["checked"]) == {"concrete", "abstract", "replicated", "sharded", "recorded"} - {layout}
        assert result["checked"]["replicated" if layout == "sharded" else "concrete"] == 4 * 13
    specs = results[0]["specs"]
    if layout == "replicated":
        assert set(specs.values()) == {()}
    else:  # the encoder's canonical tensors are saved split like its buffer, the decoder's replicated like its own
        assert {s for p, s in specs.items() if p.startswith("encoder")} == {("batch",)}
        assert {s for p, s in specs.items() if p.startswith("decoder")} == {()}
    assert results[1]["specs"] == specs


def _train_step(state, x, lengths):
    """One Adam step of encoder -> dense -> decoder, carrying the encoder's final state into the next step."""

    def loss_fn(params):
        h0, c0 = state["carry"]
        y, h_n, c_n = jcr.rnn(params["encoder"], x, h0, c0, seq_lengths=lengths)
        z = jnp.tanh(y @ params["dense"])
        y, _, _ = jcr.rnn(params["decoder"], z, jnp.zeros(DECODER.state_shape(x.shape[1])), None, seq_lengths=lengths)
        return jnp.mean(y**2), (h_n, c_n)

    (loss, carry), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
    updates, opt_state = OPTIMIZER.update(grads, state["opt_state"], state["params"])
    return {
        "params": optax.apply_updates(state["params"], updates),
        "opt_state": opt_state,
        "step": state["step"] + 1,
        "carry": jax.lax.stop_gradient(carry),
    }, loss


def _assert_same_shards(got, want):
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want), strict=True):
        assert a.sharding.is_equivalent_to(b.sharding, a.ndim), (jax.tree_util.keystr(path), a.sharding, b.sharding)
        for shard_a, shard_b in zip(a.addressable_shards, b.addressable_shards, strict=True):
            np.testing.assert_array_equal(
                np.asarray(shard_a.data), np.asarray(shard_b.data), err_msg=jax.tree_util.keystr(path)
            )


def _checkpoint_manager_steps(directory: str, num_steps: int):
    """Trains ``num_steps`` batch-sharded steps of a ZeRO-sharded state, saving each with a CheckpointManager that
    keeps two; then restores both kept steps in a new manager and trains on from the earlier one."""
    import orbax.checkpoint as ocp
    from jax.sharding import PartitionSpec as P

    from jax_cudnn_rnn import checkpoint as ckpt

    host = _host_state()
    shardings = _state_shardings(host, "sharded")
    state = _placed(host, "sharded")
    x, _, _, lengths = _batch(seed=2)
    x, lengths = (
        multiprocess.global_array(x, _sharding(P(None, "batch"))),
        multiprocess.global_array(lengths, _sharding(P("batch"))),
    )
    step = jax.jit(_train_step, out_shardings=(shardings, _sharding(P())))
    options = ocp.CheckpointManagerOptions(max_to_keep=2)
    states, losses = {}, []
    with ocp.CheckpointManager(directory, options=options) as manager:
        for _ in range(num_steps):
            state, loss = step(state, x, lengths)
            number = int(multiprocess.local_copy(state["step"]))
            manager.save(number, args=ocp.args.Composite(state=ckpt.CanonicalSave(state)))
            states[number] = state
            losses.append(float(multiprocess.local_copy(loss)))
        manager.wait_until_finished()

    with ocp.CheckpointManager(directory, options=options) as manager:
        kept = manager.all_steps()
        restored = {
            number: manager.restore(
                number, args=ocp.args.Composite(state=ckpt.CanonicalRestore(_abstract(states[number])))
            )["state"]
            for number in kept
        }
    for number, state in restored.items():
        _assert_same_shards(state, states[number])
    resumed, _ = step(restored[kept[0]], x, lengths)  # training goes on from a restored step exactly as it went
    _assert_same_shards(resumed, states[kept[1]])
    return {"kept": kept, "losses": losses}


def test_checkpoint_manager_keeps_and_restores_steps_of_a_sharded_state(cluster, tmp_path):
    results = cluster.run(_checkpoint_manager_steps, str(tmp_path / "run"), 3)
    assert results[0]["kept"] == results[1]["kept"] == [3, 4]  # the state starts at step 1
    assert results[0]["losses"] == results[1]["losses"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["3", "4"]
    meta = json.loads((tmp_path / "run" / "4" / "state" / "_METADATA").read_text())["custom_metadata"]
    recorded = meta["jax_cudnn_rnn"]["buffer_shardings"]
    assert recorded["params/encoder"]["partition_spec"] == ["batch"]
    assert recorded["opt_state/0/nu/decoder"]["partition_spec"] == []
