"""Batch sharding of the cuDNN path (jax_cudnn_rnn/sharding/partitioning.py, backends/cudnn/) on 8 CPU devices.

cuDNN's FFI calls need a GPU, so the script below stands in for its kernels (tests/cudnn_stand_in.py: the reference
implementation, the reserve space included: the forward writes its local batch size into every byte of its
[b, row_bytes] reserve rows and the backward adds (byte - its own local batch size) to dx, so a backward that received
another shard's buffer, or a gathered one, changes the numbers). Everything else is the library's own code: the
custom_vjp, the plan, the reserve-space layout, the vmap wrappers and the partitioning rules. Values are compared with
the unsharded xla implementation, and the compiled HLO is inspected for collectives.
"""

import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends.cudnn import algorithm, plan
from jax_cudnn_rnn.sharding.placement import Placement

SCRIPT = textwrap.dedent("""
    import os, sys, traceback
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jax_cudnn_rnn as jcr
    from jax_cudnn_rnn.sharding import placement
    sys.path.insert(0, sys.argv[2])
    from cudnn_stand_in import CudnnStandIn

    if sys.argv[1] == "gspmd":
        jax.config.update("jax_use_shardy_partitioner", False)
    stand_in = CudnnStandIn(reserve_bytes=lambda problem: 1000 * problem.batch + 37).__enter__()  # not proportional
    LOCAL_BATCHES = stand_in.batches

    B = 16
    cfg = jcr.RNNConfig("lstm", 2, 6, 4, direction="bidirectional")
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.random.normal(jax.random.key(1), (5, B, 4))
    h0 = jax.random.normal(jax.random.key(2), cfg.state_shape(B))
    c0 = jax.random.normal(jax.random.key(3), cfg.cell_shape(B))
    lengths = jnp.arange(B, dtype=jnp.int32) % 5 + 1

    def loss(run, p, x, h, c, n):
        y, h_n, c_n = run(p, x, h, c, n)
        return jnp.sum(y ** 2) + jnp.sum(h_n * c_n)

    def case(name):
        # Runs the decorated case at once; a failure is printed under its name and the next case still runs.
        def run(body):
            try:
                body()
            except Exception:
                print(name, "FAILED:", traceback.format_exc().replace(chr(10), " | "))
        return run

    ours = lambda p, x, h, c, n: jcr.rnn(p, x, h, c, cfg, seq_lengths=n, implementation="cudnn", algorithm="standard")
    of_arrays = placement.of_arrays

    def unplanned(*args):  # as if tracing knew nothing of where the call runs
        placement.of_arrays = lambda arrays, axes: placement.UNKNOWN
        try:
            return ours(*args)
        finally:
            placement.of_arrays = of_arrays
    ref = lambda p, x, h, c, n: jcr.rnn(p, x, h, c, cfg, seq_lengths=n, implementation="xla")
    want_y = ref(params, x, h0, c0, lengths)[0]
    want_grad = jax.grad(lambda *a: loss(ref, *a), argnums=(0, 1, 2, 3))(params, x, h0, c0, lengths)

    devices = np.array(jax.devices())
    cases = {"1d": (Mesh(devices, ("batch",)), "batch"),
             "2d-data": (Mesh(devices.reshape(4, 2), ("data", "model")), "data"),
             "2d-both": (Mesh(devices.reshape(4, 2), ("data", "model")), ("data", "model"))}
    for name, (mesh, axes) in cases.items():
        @case(name)
        def _():
            on = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
            args = (on(params, P()), on(x, P(None, axes)), on(h0, P(None, axes)), on(c0, P(None, axes)),
                    on(lengths, P(axes)))
            forward = jax.jit(ours)
            grad = jax.jit(jax.grad(lambda *a: loss(ours, *a), argnums=(0, 1, 2, 3)))
            for label, fn in (("forward", forward), ("grad", grad)):
                LOCAL_BATCHES.clear()
                hlo = fn.lower(*args).compile().as_text()
                print(name, label, "local", min(LOCAL_BATCHES), "all-gather", hlo.count("all-gather("),
                      "all-to-all", hlo.count("all-to-all("), "all-reduce", hlo.count("all-reduce("))
            y = forward(*args)[0]
            assert y.sharding.spec == P(None, axes), y.sharding
            np.testing.assert_allclose(y, want_y, atol=1e-6)
            got = grad(*args)
            assert got[0].sharding.is_fully_replicated
            for a, b in zip(got, want_grad):
                np.testing.assert_allclose(a, b, atol=2e-5)
            print(name, "values equal")

    # Inter-layer dropout: one single-layer call per layer, each partitioned; the masks are drawn whole and split.
    @case("dropout")
    def _():
        dcfg = jcr.RNNConfig("gru", 3, 6, 4, dropout=0.5)
        dparams = jcr.init_params(jax.random.key(4), dcfg)
        dh0 = jax.random.normal(jax.random.key(5), dcfg.state_shape(B))
        key = jax.random.key(6)
        dropped = lambda p, x, h: jnp.sum(jcr.rnn(p, x, h, None, dcfg, is_training=True, dropout_key=key,
                                                  implementation="cudnn", algorithm="standard")[0] ** 2)
        # The same masks (drawn from the key, whatever the implementation), on the xla implementation.
        dropped_ref = lambda p, x, h: jnp.sum(jcr.rnn(p, x, h, None, dcfg, is_training=True, dropout_key=key,
                                                      implementation="xla")[0] ** 2)
        mesh = Mesh(devices, ("batch",))
        on = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
        grad = jax.jit(jax.grad(dropped, argnums=(0, 1, 2)))
        LOCAL_BATCHES.clear()
        hlo = grad.lower(on(dparams, P()), on(x, P(None, "batch")), on(dh0, P(None, "batch"))).compile().as_text()
        got = grad(on(dparams, P()), on(x, P(None, "batch")), on(dh0, P(None, "batch")))
        for a, w in zip(got, jax.grad(dropped_ref, argnums=(0, 1, 2))(dparams, x, dh0)):
            np.testing.assert_allclose(a, w, atol=2e-5)
        print("dropout local", min(LOCAL_BATCHES), "all-gather", hlo.count("all-gather("), "values equal")

    # A batch-sharded cuDNN call cannot be exported (its partitioning callback lives in this process): a clear error.
    @case("export")
    def _():
        mesh, axes = cases["2d-both"]
        on = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
        args = (on(params, P()), on(x, P(None, axes)), on(h0, P(None, axes)), on(c0, P(None, axes)),
                on(lengths, P(axes)))
        try:
            jcr.export(jax.jit(ours), platforms=["cuda"])(*args)
        except ValueError as e:
            print("export refused:", "over 8 devices is not supported" in str(e))

    # A training call planned without knowing its placement has reserve rows for the whole batch only: a split would
    # not fit, so it runs whole (the forward, which needs no reserve space, still splits).
    @case("unplanned")
    def _():
        mesh = Mesh(devices, ("batch",))
        on = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
        args = (on(params, P()), on(x, P(None, "batch")), on(h0, P(None, "batch")), on(c0, P(None, "batch")),
                on(lengths, P("batch")))
        LOCAL_BATCHES.clear()
        got = jax.jit(jax.grad(lambda *a: loss(unplanned, *a), argnums=(0, 1, 2, 3)))(*args)
        for a, w in zip(got, want_grad):
            np.testing.assert_allclose(a, w, atol=2e-5)
        print("unplanned local", min(LOCAL_BATCHES), "values equal")

    # A batch the mesh does not divide: the call runs whole, the reserve space stays consistent.
    @case("uneven")
    def _():
        mesh = Mesh(devices, ("batch",))
        @jax.jit
        def uneven(p, x, h, c, n):
            constrain = lambda a, spec: jax.lax.with_sharding_constraint(a, NamedSharding(mesh, spec))
            x, h, c = constrain(x, P(None, "batch")), constrain(h, P(None, "batch")), constrain(c, P(None, "batch"))
            return jax.grad(lambda *a: loss(ours, *a), argnums=(0, 1, 2, 3))(p, x, h, c, n)
        b = 12
        LOCAL_BATCHES.clear()
        got = uneven(params, x[:, :b], h0[:, :b], c0[:, :b], lengths[:b])
        want = jax.grad(lambda *a: loss(ref, *a), argnums=(0, 1, 2, 3))(params, x[:, :b], h0[:, :b], c0[:, :b],
                                                                         lengths[:b])
        for a, w in zip(got, want):
            np.testing.assert_allclose(a, w, atol=2e-5)
        print("uneven local", min(LOCAL_BATCHES), "values equal")
""")


@pytest.fixture(scope="module", params=["shardy", "gspmd"])
def sharded_run(request):
    """The script's run, shared by the tests below; each case in it reports its own lines (or its failure), so one
    failing case fails one test, and a crash of the whole script fails each test with the script's stderr."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, request.param, tests],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def _assert_reported(run, case, *expected):
    lines = run.stdout.splitlines()
    missing = [line for line in expected if line not in lines]
    if missing:
        reported = [line for line in lines if line.split(" ", 1)[0] == case]
        context = reported or [f"the script exited with status {run.returncode}:", run.stderr[-4000:]]
        pytest.fail(f"{case}: expected {missing}; the script said:\n" + "\n".join(context), pytrace=False)


@pytest.mark.parametrize("mesh, local", [("1d", 2), ("2d-data", 4), ("2d-both", 2)])
def test_cudnn_path_runs_per_batch_shard_without_gathering_activations(sharded_run, mesh, local):
    """Forward and gradient: each device runs the kernels on its own rows; the only collective is the weight
    gradient's all-reduce (the forward has none)."""
    _assert_reported(
        sharded_run,
        mesh,
        f"{mesh} forward local {local} all-gather 0 all-to-all 0 all-reduce 0",
        f"{mesh} grad local {local} all-gather 0 all-to-all 0 all-reduce 1",
        f"{mesh} values equal",
    )


def test_dropout_path_runs_per_batch_shard(sharded_run):
    _assert_reported(sharded_run, "dropout", "dropout local 2 all-gather 0 values equal")


def test_exporting_a_sharded_call_is_a_clear_error(sharded_run):
    _assert_reported(sharded_run, "export", "export refused: True")


def test_training_call_without_known_placement_runs_whole(sharded_run):
    _assert_reported(sharded_run, "unplanned", "unplanned local 16 values equal")


def test_uneven_batch_runs_whole_with_a_consistent_reserve_space(sharded_run):
    _assert_reported(sharded_run, "uneven", "uneven local 12 values equal")


def test_the_script_ran_to_its_end(sharded_run):
    assert sharded_run.returncode == 0, sharded_run.stderr[-4000:]


@pytest.mark.parametrize(
    "where, local_batches",
    [
        (Placement(mesh_axes=(("data", 4), ("model", 2)), batch_axes=None), (2, 4, 8, 16)),  # jit, automatic axes
        (Placement(mesh_axes=(("data", 4), ("model", 2)), batch_axes=("data",)), (4, 16)),  # the split is known
        (Placement(mesh_axes=(("batch", 8),), batch_axes=()), (16,)),  # known unsplit: no padding for other splits
        (Placement(), (16,)),  # nothing known (a jit over single-device arrays)
    ],
)
def test_reserve_rows_fit_the_local_batches_the_placement_allows(monkeypatch, where, local_batches):
    """[B, row_bytes] holds cuDNN's buffer for every local batch the call may run with, and no more: an unsharded
    call wastes less than a byte per row whatever the number of devices."""
    sizes = lambda problem, algo, device: 1000 * problem.batch + 37  # noqa: E731 - cuDNN's answer on a GPU
    monkeypatch.setattr(plan, "reserve_space_size", sizes)
    config = jcr.RNNConfig("gru", 1, 8, 4)
    problem = algorithm.Problem(config, max_time=5, batch=16, padded=False, training=True, allow_tf32=False)
    assert where.local_batches(16) == local_batches or sorted(where.local_batches(16)) == list(local_batches)
    rows, fitting = plan.reserve_row_bytes(problem, "standard", where.local_batches(16))
    assert sorted(fitting) == sorted(local_batches)
    for local in local_batches:
        assert local * rows >= sizes(dataclasses.replace(problem, batch=local), "standard", -1)
    smallest = min(local_batches)
    assert rows == -(-(1000 * smallest + 37) // smallest)  # the smallest local batch needs the most per row
    if local_batches == (16,):
        assert 0 <= 16 * rows - sizes(problem, "standard", -1) < 16


def test_reserve_rows_skip_a_local_batch_cudnn_refuses(monkeypatch):
    def sizes(problem, algo, device):
        if problem.batch == 2:
            raise RuntimeError("cuDNN: CUDNN_STATUS_NOT_SUPPORTED")
        return 1000 * problem.batch + 37

    monkeypatch.setattr(plan, "reserve_space_size", sizes)
    problem = algorithm.Problem(jcr.RNNConfig("gru", 1, 8, 4), 5, 16, False, True, False)
    assert plan.reserve_row_bytes(problem, "standard", (2, 4, 16)) == (-(-4037 // 4), (4, 16))
    with pytest.raises(RuntimeError, match="NOT_SUPPORTED"):
        plan.reserve_row_bytes(problem, "standard", (2,))
