"""rnn(implementation=None) chooses by the platform the computation is lowered for (jax_cudnn_rnn/backends/registry.py),
not by jax.default_backend(): one jitted function serves CPU and CUDA. The CPU stands in for a GPU host here: cuDNN is
declared available and jax.default_backend() says "gpu", as on a GPU machine; nothing is run on CUDA, only lowered."""

import dataclasses
import functools
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cudnn_stand_in import CudnnStandIn

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import registry, staging
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.cudnn import extension as _extension
from jax_cudnn_rnn.backends.onednn import backend as onednn
from jax_cudnn_rnn.sharding.placement import Placement

CUDNN_CALL = re.compile(r"stablehlo\.custom_call @jax_cudnn_rnn_(forward|backward_data|backward_weights)\(")


@pytest.fixture
def gpu_host(monkeypatch):
    """cuDNN counts as available (a GPU host), and reserve sizes come from a stand-in. The CPU's choice is the xla
    implementation here, oneDNN's extension or not (tests/onednn/test_onednn.py covers when the CPU picks oneDNN)."""
    monkeypatch.setattr(onednn, "cost", lambda call, side, variant: None)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    with CudnnStandIn(reserve_bytes=lambda problem: 256, kernels=False):
        yield


def _problem(mode="lstm"):
    cfg = jcr.RNNConfig(mode, 2, 6, 4, direction="bidirectional")
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.random.normal(jax.random.key(1), (5, 3, 4))
    h0 = jax.random.normal(jax.random.key(2), cfg.state_shape(3))
    c0 = jax.random.normal(jax.random.key(3), cfg.cell_shape(3)) if cfg.has_cell_state else None
    return cfg, params, x, h0, c0


def _loss(cfg, implementation=None):
    def loss(params, x, h0, c0):
        y, h_n, _ = jcr.rnn(params, x, h0, c0, cfg, implementation=implementation)
        return jnp.sum(y**2) + jnp.sum(h_n)

    return loss


def _cudnn_calls(text):
    return [m.group(1) for m in CUDNN_CALL.finditer(text)]


def test_what_each_platform_picks(gpu_host):
    assert jcr.implementation_for("cuda") == "cudnn"
    assert jcr.implementation_for("cpu") == "xla"
    assert jcr.implementation_for("tpu") == "xla"
    assert jcr.implementation_for(jax.devices("cpu")[0]) == "xla"
    assert registry.choose(None, Call()) == {"cuda": "cudnn", "default": "xla"}


def test_one_jitted_function_lowers_for_cpu_and_for_cuda(gpu_host):
    cfg, params, x, h0, c0 = _problem()
    grad = jax.jit(jax.grad(_loss(cfg), argnums=(0, 1, 2, 3)))
    traced = grad.trace(params, x, h0, c0)
    cpu = traced.lower(lowering_platforms=("cpu",)).as_text()
    cuda = traced.lower(lowering_platforms=("cuda",)).as_text()
    assert _cudnn_calls(cpu) == []
    assert _cudnn_calls(cuda) == ["forward", "backward_data", "backward_weights"]
    assert "stablehlo.while" in cpu and "stablehlo.while" not in cuda  # the xla implementation's scan: CPU only
    # And on the CPU it runs, with the xla implementation's numbers.
    want = jax.grad(_loss(cfg, "xla"), argnums=(0, 1, 2, 3))(params, x, h0, c0)
    for got, expected in zip(grad(params, x, h0, c0), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_cpu_placed_calls_run_the_xla_implementation_on_a_gpu_host(gpu_host):
    cfg, params, x, h0, _ = _problem("gru")
    want = jcr.rnn(params, x, h0, None, cfg, implementation="xla")
    cpu = jax.devices("cpu")[0]
    committed = [jax.device_put(a, cpu) for a in (params, x, h0)]
    for got in (
        jcr.rnn(*committed[:3], None, cfg),  # eager, CPU-committed inputs
        jax.jit(lambda p, x, h: jcr.rnn(p, x, h, None, cfg))(*committed),
    ):  # jit over them
        for a, b in zip(got[:2], want[:2], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    with jax.default_device(cpu):
        text = jax.jit(lambda p, x, h: jcr.rnn(p, x, h, None, cfg)[0]).lower(params, x, h0).as_text()
    assert _cudnn_calls(text) == []


def test_export_for_cpu_on_a_gpu_host(gpu_host):
    cfg, params, x, h0, c0 = _problem()
    exported = jax.export.export(jax.jit(jax.grad(_loss(cfg))), platforms=["cpu"])(params, x, h0, c0)
    restored = jax.export.deserialize(exported.serialize())
    np.testing.assert_allclose(
        restored.call(params, x, h0, c0), jax.grad(_loss(cfg, "xla"))(params, x, h0, c0), rtol=1e-6, atol=1e-6
    )


def test_requested_cudnn_lowered_for_cpu_is_a_clear_error(gpu_host):
    cfg, params, x, h0, c0 = _problem()
    traced = jax.jit(_loss(cfg, "cudnn")).trace(params, x, h0, c0)
    assert _cudnn_calls(traced.lower(lowering_platforms=("cuda",)).as_text()) == ["forward"]
    with pytest.raises(
        RuntimeError,
        match="implementation='cudnn' runs only on cuda, but this computation is lowered for another platform",
    ):
        traced.lower(lowering_platforms=("cpu",))
    with pytest.raises(
        RuntimeError, match="implementation='cudnn' needs the arrays on a CUDA device, but this call runs on CPU"
    ):
        jcr.rnn(params, jax.device_put(x, jax.devices("cpu")[0]), h0, c0, cfg, implementation="cudnn")


def test_closed_over_arrays_do_not_decide_the_platform_under_jit(gpu_host):
    """A jitted function that closes over concrete (here CPU) weights runs wherever it is lowered: the weights are
    moved there, so they must not pin the choice. vmap folds the cuDNN call into one."""
    cfg, params, x, h0, c0 = _problem()
    traced = jax.jit(jax.vmap(lambda x: jcr.rnn(params, x, h0, c0, cfg)[0])).trace(jnp.stack([x, x]))
    assert _cudnn_calls(traced.lower(lowering_platforms=("cuda",)).as_text()) == ["forward"]
    assert _cudnn_calls(traced.lower(lowering_platforms=("cpu",)).as_text()) == []


@pytest.fixture
def no_cudnn_extension(monkeypatch):
    """A GPU user's install whose cuDNN extension did not load; the once-per-process warning not yet given. The CPU's
    choice is the xla implementation here, so that both platforms' lowerings show the same pure-JAX scan."""
    reason = "the cuDNN extension jax_cudnn_rnn._cudnn_rnn is not part of this installation; build it with ..."
    monkeypatch.setattr(onednn, "cost", lambda call, side, variant: None)
    monkeypatch.setattr(_extension, "extension_loaded", lambda: False)
    monkeypatch.setattr(_extension, "extension_error", lambda: reason)
    monkeypatch.setattr(staging, "_warned", set())
    return reason


def _fallback_warnings(record):
    return [w for w in record if issubclass(w.category, jcr.CudnnFallbackWarning)]


def test_lowering_for_cuda_without_the_extension_warns_once(no_cudnn_extension):
    """implementation=None lowered for CUDA without a loaded cuDNN extension runs the xla implementation and says so
    once per process, with the reason and the fix; lowering for the CPU says nothing."""
    cfg, params, x, h0, c0 = _problem()
    traced = jax.jit(jax.grad(_loss(cfg), argnums=(0, 1, 2, 3))).trace(params, x, h0, c0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cpu = traced.lower(lowering_platforms=("cpu",)).as_text()
        assert _fallback_warnings(record) == []
        cuda = traced.lower(lowering_platforms=("cuda",)).as_text()
        assert _cudnn_calls(cuda) == [] and "stablehlo.while" in cuda  # the xla implementation, as on the CPU
        (warning,) = _fallback_warnings(record)
        message = str(warning.message)
        assert "runs the xla implementation on CUDA, not cuDNN" in message and no_cudnn_extension in message
        assert 'pip install "jax[cuda13]"' in message and "`cuda` extra" in message
        assert "jax-cudnn-rnn info" in message and "implementation='xla'" in message
        # Once per process: another function lowered for CUDA stays silent.
        other = jax.jit(lambda p, x, h: jcr.rnn(p, x, h, None, jcr.RNNConfig("gru", 1, 6, 4))[0])
        cfg_gru = jcr.RNNConfig("gru", 1, 6, 4)
        other.trace(jcr.init_params(jax.random.key(0), cfg_gru), x, h0[:1]).lower(lowering_platforms=("cuda",))
        assert len(_fallback_warnings(record)) == 1
    assert "stablehlo.while" in cpu
    # The marker changes nothing the CPU computes.
    want = jax.grad(_loss(cfg, "xla"), argnums=(0, 1, 2, 3))(params, x, h0, c0)
    for got, expected in zip(jax.jit(jax.grad(_loss(cfg), argnums=(0, 1, 2, 3)))(params, x, h0, c0), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_no_fallback_warning_with_the_extension_or_an_explicit_choice(gpu_host, monkeypatch):
    """With the extension loaded CUDA runs cuDNN; implementation="xla" is a choice, not a fallback: neither warns."""
    monkeypatch.setattr(staging, "_warned", set())
    cfg, params, x, h0, c0 = _problem()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        text = jax.jit(_loss(cfg)).trace(params, x, h0, c0).lower(lowering_platforms=("cuda",)).as_text()
        assert _cudnn_calls(text) == ["forward"]
        monkeypatch.setattr(_extension, "extension_loaded", lambda: False)
        jax.jit(_loss(cfg, "xla")).trace(params, x, h0, c0).lower(lowering_platforms=("cuda",))
    assert _fallback_warnings(record) == []


def test_the_fallback_marker_is_transparent_to_transformations(no_cudnn_extension):
    """Without the extension every implementation=None call under jit carries the marker: vmap, remat and scan over
    it compute what the xla implementation computes."""
    cfg = jcr.RNNConfig("lstm", 1, 4, 3)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.random.normal(jax.random.key(1), (5, 2, 3))
    h0 = jnp.zeros((1, 2, 4))

    def loss(implementation):
        return lambda p, x: jnp.sum(jcr.rnn(p, x, h0, h0, cfg, implementation=implementation)[0] ** 2)

    transforms = {
        "vmap": lambda f: jax.vmap(f, in_axes=(None, 0))(params, jnp.stack([x, 2 * x])),
        "remat": lambda f: jax.grad(jax.checkpoint(f), argnums=(0, 1))(params, x),
        "scan": lambda f: jax.lax.scan(lambda c, xi: (c + f(params, xi), None), 0.0, jnp.stack([x, x]))[0],
    }
    for name, transform in transforms.items():
        assert "jax_cudnn_rnn_passed_over" in str(jax.make_jaxpr(functools.partial(transform, loss(None)))()), name
        got, want = jax.jit(functools.partial(transform, loss(None)))(), transform(loss("xla"))
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)


def test_a_call_known_to_run_on_cuda_warns_when_traced(no_cudnn_extension):
    """Where tracing knows the platform (eager GPU arrays, a GPU mesh, jax.default_device) the warning comes at the
    call; a CPU placement neither warns nor marks."""
    x = jnp.ones((2, 3, 4))
    cfg = jcr.RNNConfig("gru", 1, 6, 4)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert registry.note_passed_over(None, Call(cfg, placement=Placement(platform="cpu")), x) is x
        assert _fallback_warnings(record) == []
        assert registry.note_passed_over(None, Call(cfg, placement=Placement(platform="cuda")), x) is x
        (warning,) = _fallback_warnings(record)
    assert no_cudnn_extension in str(warning.message)


@dataclasses.dataclass(frozen=True)
class FakeGPU:
    """What the choice reads of a jax CUDA device: its compute capability, kind and CUDA ordinal."""

    compute_capability: str
    device_kind: str = "NVIDIA GPU"
    id: int = 0
    local_hardware_id: int = 0
    core_count: int = 40
    platform: str = "gpu"


TURING = FakeGPU("7.5", "Tesla T4")


@pytest.fixture
def cudnn_9_28(gpu_host, monkeypatch):
    """A GPU host whose loaded libcudnn runs bfloat16 RNNs (9.28.0), whatever this machine's is; no warning given
    yet."""
    monkeypatch.setattr(_extension, "cudnn_version", lambda: 92800)
    monkeypatch.setattr(staging, "_warned", set())


@pytest.mark.parametrize(
    "dtype, capability, want",
    [
        ("bfloat16", "7.5", "xla"),  # Turing: cuDNN's bfloat16 RNNs need Ampere
        ("bfloat16", "8.0", "cudnn"),
        ("bfloat16", "9.0", "cudnn"),
        ("float32", "7.5", "cudnn"),
        ("float16", "7.5", "cudnn"),
    ],
)
def test_bfloat16_runs_on_cudnn_from_compute_capability_8(cudnn_9_28, dtype, capability, want):
    """bfloat16 on a GPU of compute capability below 8.0: implementation=None runs the xla implementation and warns
    with the reason, implementation="cudnn" is refused naming the GPU's capability, the requirement and the fix. Other
    dtypes, and bfloat16 from 8.0 on, run cuDNN without a word."""
    gpu = dataclasses.replace(TURING, compute_capability=capability)
    call = Call(jcr.RNNConfig("lstm", 1, 6, 4, dtype=dtype), placement=Placement(platform="cuda", device=gpu))
    x = jnp.ones((5, 3, 4), dtype)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert registry.choose(None, call) == {"cuda": want}
        registry.note_passed_over(None, call, x)
        registry.note_passed_over("xla", call, x)  # a choice, not a fallback
    if want == "cudnn":
        assert registry.choose("cudnn", call) == {"cuda": "cudnn"}
        assert _fallback_warnings(record) == []
        return
    with pytest.raises(RuntimeError) as refused:
        registry.choose("cudnn", call)
    for message in (str(refused.value), str(_fallback_warnings(record)[0].message)):
        assert "compute capability >= 8.0 for bfloat16" in message and "has compute capability 7.5" in message
        assert "Tesla T4 (CUDA device 0)" in message and "use float32 or float16, or implementation='xla'" in message
    assert str(refused.value).startswith("implementation='cudnn' needs a GPU of compute capability >= 8.0")
    assert len(_fallback_warnings(record)) == 1


def test_bfloat16_needs_cudnn_9_13(cudnn_9_28, monkeypatch):
    """The other half of the rule, checked in Python too (before the kernels' own check): a libcudnn older than 9.13
    runs bfloat16 on the xla implementation, even on an H100."""
    monkeypatch.setattr(_extension, "cudnn_version", lambda: 91200)
    call = Call(
        jcr.RNNConfig("gru", 1, 6, 4, dtype="bfloat16"),
        placement=Placement(platform="cuda", device=FakeGPU("9.0", "NVIDIA H100 80GB HBM3")),
    )
    assert registry.choose(None, call) == {"cuda": "xla"}
    with pytest.raises(
        RuntimeError,
        match=r"needs cuDNN >= 9\.13\.0 for bfloat16 RNNs, but the loaded libcudnn is "
        r"9\.12\.0: install a newer one .*or use float32 or float16",
    ):
        registry.choose("cudnn", call)
    assert registry.choose(None, dataclasses.replace(call, config=jcr.RNNConfig("gru", 1, 6, 4))) == {"cuda": "cudnn"}


@pytest.mark.parametrize("capability", ["7.5", "8.0"])
def test_bfloat16_under_jit_on_a_pre_ampere_gpu_host(cudnn_9_28, monkeypatch, capability):
    """Under jax.jit over uncommitted arrays tracing does not know the call's GPU, so the process's GPUs decide (one
    of each model, as for planning): on a Turing host the CUDA lowering holds the xla implementation and warns, and
    implementation="cudnn" is refused when traced; on an Ampere host it holds cuDNN's kernels."""
    gpus = [dataclasses.replace(TURING, compute_capability=capability)]
    local_devices = jax.local_devices
    monkeypatch.setattr(
        jax,
        "local_devices",
        lambda *args, backend=None, **kwargs: (
            gpus if backend == "gpu" else local_devices(*args, backend=backend, **kwargs)
        ),
    )
    cfg = jcr.RNNConfig("lstm", 1, 6, 4, dtype="bfloat16")
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jnp.ones((5, 3, 4), jnp.bfloat16)
    h0 = c0 = jnp.zeros((1, 3, 6), jnp.bfloat16)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        text = jax.jit(_loss(cfg)).trace(params, x, h0, c0).lower(lowering_platforms=("cuda",)).as_text()
    if capability == "8.0":
        assert _cudnn_calls(text) == ["forward"] and _fallback_warnings(record) == []
        return
    assert _cudnn_calls(text) == [] and "stablehlo.while" in text
    (warning,) = _fallback_warnings(record)
    assert "has compute capability 7.5" in str(warning.message)
    with pytest.raises(
        RuntimeError,
        match=r"implementation='cudnn' needs a GPU of compute capability >= 8\.0 for "
        r"bfloat16 RNNs .*Tesla T4 \(CUDA device 0\).* has compute capability 7\.5",
    ):
        jax.jit(_loss(cfg, "cudnn")).trace(params, x, h0, c0)
