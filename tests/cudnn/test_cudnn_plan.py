"""How a cuDNN call is planned while it is traced (jax_cudnn_rnn/backends/cudnn/plan.py), on the CPU with stand-ins: the
device cuDNN is asked on, the batch the algorithm is chosen for, what several processes must agree on, and the eager
backward that consumes the forward's reserve space instead of copying it."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends.cudnn import algorithm, plan
from jax_cudnn_rnn.backends.cudnn import backend as cudnn_backend
from jax_cudnn_rnn.backends.fused.vjp import KernelArrays, Residuals
from jax_cudnn_rnn.sharding.placement import UNKNOWN, Placement


@dataclasses.dataclass(frozen=True)
class FakeGPU:
    """What the plan reads of a jax GPU device."""

    id: int
    local_hardware_id: int
    device_kind: str = "NVIDIA H100 80GB HBM3"
    compute_capability: str = "9.0"
    core_count: int = 132
    platform: str = "gpu"


def test_cudnn_is_asked_on_the_calls_device_and_its_facts_choose(monkeypatch):
    """Trace-time questions go to the call's GPU (its CUDA ordinal in this process), not to GPU 0, and the heuristic
    reads that GPU's facts."""
    asked = []
    monkeypatch.setattr(
        plan, "reserve_space_size", lambda problem, algo, device=-1: asked.append((problem.batch, algo, device)) or 640
    )
    cfg = jcr.RNNConfig("lstm", 1, 64, 32)
    where = Placement(platform="cuda", device=FakeGPU(id=5, local_hardware_id=1))
    made = plan.plan(cfg, (7, 4, 32), False, False, "heuristic", where, True, seconds=None)
    assert made == plan.Plan(algorithm.PERSIST_STATIC_SMALL_H, device=1, row_bytes=160, local_batches=(4,))
    assert asked == [(4, algorithm.PERSIST_STATIC_SMALL_H, 1)]
    # A call placed elsewhere (no GPU known) never reaches a GPU's facts: the standard algorithm.
    monkeypatch.setattr(plan, "target_device", lambda where: None)
    assert plan.plan(cfg, (7, 4, 32), False, False, "heuristic", UNKNOWN, False, seconds=None).algorithm == "standard"


def test_target_device_prefers_the_calls_gpu():
    gpu = FakeGPU(id=3, local_hardware_id=3)
    assert plan.target_device(Placement(platform="cuda", device=gpu)) is gpu
    if not any(d.platform == "gpu" for d in jax.devices()):
        assert plan.target_device(UNKNOWN) is None


A100 = dict(device_kind="NVIDIA A100-SXM4-80GB", compute_capability="8.0", core_count=108)
MAXWELL = dict(device_kind="Tesla M60", compute_capability="5.2", core_count=16)


@pytest.mark.parametrize(
    "second_model, want_algorithm",
    [
        (A100, algorithm.PERSIST_STATIC_SMALL_H),  # both models' heuristics pick SMALL_H for H=64
        (MAXWELL, algorithm.STANDARD),  # sm 5.2 runs no persistent algorithm: the choices differ, the standard one fits
    ],
)
def test_an_unknown_placement_is_planned_on_one_gpu_of_each_model(monkeypatch, second_model, want_algorithm):
    """Under jax.jit over arrays committed to one GPU tracing does not know which (one trace serves every device), so
    cuDNN is asked on the first GPU and on one GPU of each other model this process has, and the plan fits them all:
    the devices asked are checked, not only the sizes."""
    gpus = [
        FakeGPU(id=0, local_hardware_id=0),
        FakeGPU(id=1, local_hardware_id=1),
        FakeGPU(id=2, local_hardware_id=2, **second_model),
        FakeGPU(id=3, local_hardware_id=3, **second_model),
    ]
    monkeypatch.setattr(plan.jax, "local_devices", lambda backend=None: gpus)
    asked = []
    sizes = {0: 640, 1: 640, 2: 800}  # reserve bytes per ordinal for B = 4: 160 and 200 per row

    def reserve_space_size(problem, algo, device=-1):
        asked.append((algo, device))
        return sizes[device]

    monkeypatch.setattr(plan, "reserve_space_size", reserve_space_size)
    cfg = jcr.RNNConfig("lstm", 1, 64, 32)
    made = plan.plan(cfg, (7, 4, 32), False, False, "heuristic", UNKNOWN, True, seconds=None)
    assert asked == [(want_algorithm, 0), (want_algorithm, 2)]
    assert made == plan.Plan(want_algorithm, device=0, row_bytes=200, local_batches=(4,))
    # One model only: the first GPU alone is asked; a call whose GPU tracing knows is asked there alone.
    asked.clear()
    monkeypatch.setattr(plan.jax, "local_devices", lambda backend=None: gpus[:2])
    assert plan.plan(cfg, (7, 4, 32), False, False, "heuristic", UNKNOWN, True, seconds=None).row_bytes == 160
    plan.plan(
        cfg, (7, 4, 32), False, False, "heuristic", Placement(platform="cuda", device=gpus[1]), True, seconds=None
    )
    assert [device for _, device in asked] == [0, 1]


@pytest.mark.parametrize(
    "where, want_batch",
    [
        (Placement(mesh_axes=(("data", 4),), batch_axes=("data",)), 8),  # the known per-device batch
        (Placement(mesh_axes=(("data", 4), ("model", 2)), batch_axes=None), 4),  # automatic axes: the smallest split
        (UNKNOWN, 32),  # unsharded
    ],
)
def test_the_algorithm_is_chosen_for_the_per_device_batch(monkeypatch, where, want_batch):
    """Autotune times (and the heuristic judges) the batch one device runs, not the global batch (which might not
    even fit on one GPU)."""
    timed = []
    monkeypatch.setattr(algorithm, "_TUNED", {})
    cfg = jcr.RNNConfig("gru", 1, 16, 8)
    made = plan.plan(
        cfg,
        (5, 32, 8),
        False,
        False,
        "autotune",
        where,
        False,
        seconds=lambda problem, algo, device: timed.append(problem.batch) or 1.0,
    )
    assert set(timed) == {want_batch} and made.algorithm == algorithm.STANDARD


def test_autotune_is_refused_with_several_processes(monkeypatch):
    monkeypatch.setattr(algorithm.jax, "process_count", lambda: 2)
    problem = algorithm.Problem(jcr.RNNConfig("gru", 1, 16, 8), 5, 4, False, False, False)
    with pytest.raises(ValueError, match="algorithm='autotune' is refused with 2 JAX processes"):
        algorithm.choose("autotune", problem, seconds=None, device=algorithm.DeviceInfo(9, 0, 132, "H100", 0))
    # The heuristic needs no agreement beyond the device facts: the same facts give the same choice.
    facts = algorithm.DeviceInfo(9, 0, 132, "H100", 0)
    assert algorithm.choose("heuristic", problem, None, facts) == algorithm.choose("heuristic", problem, None, facts)


def test_processes_with_different_gpu_models_are_refused(monkeypatch):
    monkeypatch.setattr(plan.jax, "process_count", lambda: 2)
    same = [FakeGPU(0, 0), FakeGPU(1, 0)]
    monkeypatch.setattr(plan.jax, "devices", lambda *a: same)
    plan.check_processes_agree()
    mixed = [FakeGPU(0, 0), FakeGPU(1, 0, device_kind="NVIDIA A100-SXM4-80GB")]
    monkeypatch.setattr(plan.jax, "devices", lambda *a: mixed)
    with pytest.raises(ValueError, match=r"needs one GPU model in all of them.*A100.*H100"):
        plan.check_processes_agree()


def test_eager_vjp_consumes_the_reserve_space_and_a_second_backward_writes_it_again(cudnn_stand_in):
    """cuDNN updates the reserve space in place: an eager backward donates it (no copy of the whole buffer), and
    calling the same vjp function again runs the training forward once more to get a fresh one."""
    forwards = cudnn_stand_in.forwards
    cfg = jcr.RNNConfig("lstm", 1, 6, 4)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.random.normal(jax.random.key(1), (5, 3, 4))
    h0 = c0 = jnp.zeros((1, 3, 6))
    static = cudnn_backend.Static(cfg, False, "standard")
    y, vjp = jax.vjp(lambda p, x: cudnn_backend._rnn(KernelArrays(p, x, h0, c0), None, static)[0], params, x)
    _, want_vjp = jax.vjp(lambda p, x: jcr.rnn(p, x, h0, c0, cfg, implementation="xla")[0], params, x)
    dy = jax.random.normal(jax.random.key(2), y.shape)
    want = want_vjp(dy)
    traced = len(forwards)
    first = vjp(dy)
    assert len(forwards) == traced  # the first backward uses the forward's buffer
    second = vjp(dy)
    assert forwards[traced:] and all(forwards[traced:])  # the second one wrote it again, with the training forward
    for got in (first, second):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_the_eager_backward_donates_the_reserve_space_to_an_aliased_output():
    """With the real kernels (lowered for CUDA, nothing runs): the reserve space argument of the eager backward is
    donated and aliased to its reserve output, so XLA does not copy it before cuDNN's in-place update."""
    cfg = jcr.RNNConfig("gru", 1, 8, 4)
    params = jcr.init_params(jax.random.key(0), cfg)
    x, h0 = jnp.ones((5, 3, 4)), jnp.zeros((1, 3, 8))
    call_plan = plan.Plan("standard", row_bytes=64, local_batches=(3,))
    reserve = jnp.zeros((3, 64), jnp.uint8)
    residuals = Residuals(KernelArrays(params, x, h0, None), None, jnp.ones((5, 3, 8)), None, None, None)
    text = (
        cudnn_backend._backward_donating.trace(
            residuals,
            reserve,
            (jnp.ones((5, 3, 8)), h0, None),
            static=cudnn_backend.Static(cfg, False, "standard"),
            call_plan=call_plan,
        )
        .lower(lowering_platforms=("cuda",))
        .as_text()
    )
    argument = next(line for line in text.splitlines() if "func.func public @main" in line)
    # The arguments: params, x, h0, y, the reserve space, dy, dh_n; the reserve (result[4]: dc0 is None) aliased.
    assert "%arg4: tensor<3x64xui8> {tf.aliasing_output = 3 : i32}" in argument
