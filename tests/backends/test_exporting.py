"""``jax_cudnn_rnn.export`` (issue 51): ``jax.export`` of a function that uses the package on any implementation, here
the CPU default where it runs oneDNN, whose FFI targets plain ``jax.export`` refuses; what the artifact needs where it
runs (``export_needs``); and the refusals (symbolic shapes). The cuDNN side: tests/cudnn/test_export.py."""

import dataclasses
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.backends.onednn import extension as onednn_extension

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from skips import REQUIRE_ONEDNN, skip_or_fail  # noqa: E402

CFG = jcr.RNNConfig("lstm", 2, 32, 16, direction="bidirectional")
T, B = 12, 8
ONEDNN_TARGETS = (onednn_extension.WEIGHTS_TARGET, onednn_extension.FORWARD_TARGET, onednn_extension.BACKWARD_TARGET)


def _inputs():
    x = jax.random.normal(jax.random.key(1), (T, B, CFG.input_size))
    h0 = jax.random.normal(jax.random.key(2), CFG.state_shape(B))
    c0 = jax.random.normal(jax.random.key(3), CFG.cell_shape(B))
    target = jax.random.normal(jax.random.key(4), (T, B, 2 * CFG.num_units))
    return x, h0, c0, target


def _loss(params, x, h0, c0, target):
    y, h_n, c_n = jcr.rnn(params, x, h0, c0, CFG)  # implementation=None: the CPU default
    return jnp.mean((y - target) ** 2) + jnp.mean(h_n * c_n)


@jax.jit
def _sgd_step(params, x, h0, c0, target):
    loss, grad = jax.value_and_grad(_loss)(params, x, h0, c0, target)
    return loss, params - 0.1 * grad


def _model(params, x, h0, c0, target):
    """What is exported: the trained network's inference outputs and one more training step."""
    return jcr.rnn(params, x, h0, c0, CFG), _sgd_step(params, x, h0, c0, target)


@pytest.fixture(scope="module")
def trained():
    """Parameters after 5 SGD steps with the CPU default, which runs oneDNN on both sides for this network on the CPUs
    whose measurements say so (onednn.cpu_choice), and the inputs."""
    if not onednn.extension_loaded():
        skip_or_fail(f"the oneDNN extension is not loaded: {onednn.extension_error()}", REQUIRE_ONEDNN)
    if onednn.cpu_choice(CFG, B) != ("onednn", "onednn"):
        pytest.skip(f"the CPU rule ({onednn.effective_cpu_isa()}) does not pick oneDNN on both sides for this network")
    params = jcr.init_params(jax.random.key(0), CFG)
    args = _inputs()
    losses = []
    for _ in range(5):
        loss, params = _sgd_step(params, *args)
        losses.append(float(loss))
    assert losses[-1] < losses[0], losses
    return params, args


def test_plain_jax_export_of_the_cpu_default_refuses_its_targets(trained):
    """Why ``jcr.export`` exists: JAX's own check refuses the oneDNN calls, with a message that names no fix."""
    params, args = trained
    with pytest.raises(ValueError, match="custom calls whose targets have no compatibility guarantees"):
        jax.export.export(jax.jit(_model), platforms=["cpu"])(params, *args)


CHILD = r"""
import sys
import jax
import numpy as np
import jax_cudnn_rnn as jcr  # registers the FFI targets the artifact calls

with open(sys.argv[1], "rb") as f:
    restored = jax.export.deserialize(bytearray(f.read()))
needs = jcr.export_needs(restored)
needs.check()
print("needs:", sorted(needs.targets.get("cpu", ())))
inputs = np.load(sys.argv[2])
outputs = jax.tree.leaves(restored.call(*(inputs[f"a{i}"] for i in range(len(inputs.files)))))
np.savez(sys.argv[3], **{f"o{i}": np.asarray(o) for i, o in enumerate(outputs)})
print("ran")
"""


def test_the_trained_cpu_default_exports_and_runs_bit_exactly_in_a_fresh_process(trained, tmp_path):
    params, args = trained
    exported = jcr.export(_model, platforms=["cpu"])(params, *args)
    text = exported.mlir_module()
    for target in ONEDNN_TARGETS:  # the weights call, the training and inference forwards, the backward: oneDNN's
        assert f"@{target}(" in text, target
    needs = jcr.export_needs(exported)
    assert needs.platforms == ("cpu",) and needs.targets == {"cpu": ONEDNN_TARGETS}
    assert needs.version == jcr.__version__ and needs.missing() == []
    assert "import jax_cudnn_rnn" in str(needs) and onednn_extension.FORWARD_TARGET in str(needs)

    artifact, inputs, outputs = tmp_path / "model.bin", tmp_path / "inputs.npz", tmp_path / "outputs.npz"
    artifact.write_bytes(exported.serialize())
    leaves = [params, *args]
    np.savez(inputs, **{f"a{i}": np.asarray(a) for i, a in enumerate(leaves)})
    # A fresh interpreter that imports the installed package (-P: not the checkout it might run in).
    child = subprocess.run(
        [sys.executable, "-P", "-c", CHILD, str(artifact), str(inputs), str(outputs)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-4000:]
    assert f"needs: {sorted(ONEDNN_TARGETS)}" in child.stdout, child.stdout
    want = jax.tree.leaves(jax.jit(_model)(params, *args))
    got = np.load(outputs)
    assert len(got.files) == len(want) == 5  # y, h_n, c_n, the step's loss and new params
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[f"o{i}"], np.asarray(w), err_msg=f"output {i}")


def test_the_needs_name_a_missing_extension(trained, monkeypatch):
    params, args = trained
    needs = jcr.export_needs(jcr.export(_model, platforms=["cpu"])(params, *args))
    monkeypatch.setattr(onednn_extension.EXTENSION, "_module", None)
    monkeypatch.setattr(onednn_extension.EXTENSION, "_error", "the oneDNN extension was not built: no oneDNN")
    missing = needs.missing()
    assert len(missing) == 1 and onednn_extension.WEIGHTS_TARGET in missing[0]
    assert "the oneDNN extension is not loaded: the oneDNN extension was not built: no oneDNN" in missing[0]
    with pytest.raises(RuntimeError, match="this process cannot run the exported function: it calls"):
        needs.check()


def test_a_pure_jax_export_needs_nothing_of_the_package():
    params = jcr.init_params(jax.random.key(0), CFG)
    x, h0, c0, _ = _inputs()
    fn = jax.jit(lambda p, x, h, c: jcr.rnn(p, x, h, c, CFG, implementation="xla")[0])
    exported = jcr.export(fn, platforms=["cpu", "cuda"])(params, x, h0, c0)
    needs = jcr.export_needs(exported)
    assert needs.targets == {} and needs.missing() == []
    assert "need not be imported" in str(needs)
    np.testing.assert_array_equal(exported.call(params, x, h0, c0), fn(params, x, h0, c0))


def test_a_plain_function_is_jitted_for_export():
    params = jcr.init_params(jax.random.key(0), CFG)
    x, h0, c0, _ = _inputs()
    exported = jcr.export(lambda p, x, h, c: jcr.rnn(p, x, h, c, CFG, implementation="xla")[0], platforms=["cpu"])(
        params, x, h0, c0
    )
    assert exported.platforms == ("cpu",)


@pytest.mark.parametrize("implementation", [None, "xla", "onednn"])
def test_symbolic_shapes_are_refused_by_name(implementation):
    params = jcr.init_params(jax.random.key(0), CFG)
    (steps,) = jax.export.symbolic_shape("t")
    x = jax.ShapeDtypeStruct((steps, B, CFG.input_size), jnp.float32)
    h0 = jax.ShapeDtypeStruct(CFG.state_shape(B), jnp.float32)
    fn = jax.jit(lambda p, x, h, c: jcr.rnn(p, x, h, c, CFG, implementation=implementation)[0])
    with pytest.raises(
        ValueError, match=r"x has shape \(t, 8, 16\) with the symbolic dimension\(s\) t .* one artifact"
    ):
        jcr.export(fn, platforms=["cpu"])(params, x, h0, h0)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="fn must be a function, got int"):
        jcr.export(3)
    with pytest.raises(TypeError, match=r"exported must be a jax\.export\.Exported, got str"):
        jcr.export_needs("artifact")


# ---------------------------------------------------------------------------------------------- every implementation

SMALL = jcr.RNNConfig("gru", 1, 16, 8)  # small, so that each name's export, compilation and fresh run stay cheap


def _registry_names(platform: str = "cpu") -> list[str]:
    """Every name the registry can run on ``platform``: each single name ("backend", "backend:variant") and every
    pair "forward+training" of two the default may choose (what ``implementation_for`` answers where the sides
    differ)."""
    from jax_cudnn_rnn.backends import registry

    singles = list(registry.implementations(platform))
    chosen = registry.implementations(platform, by_default=True)
    forward = [n for n in chosen if registry.FORWARD in registry.sides_of(n)]
    training = [n for n in chosen if registry.TRAINING in registry.sides_of(n)]
    pairs = [f"{f}+{t}" for f in forward for t in training if f.partition(":")[0] != t.partition(":")[0]]
    return singles + pairs


def _small_model(config, implementation):
    """Inference outputs and a training step's loss and gradient, both of ``implementation``'s sides."""

    def loss(params, x, h0):
        y, h_n, _ = jcr.rnn(params, x, h0, None, config, implementation=implementation)
        return jnp.mean(y.astype(jnp.float32) ** 2) + jnp.mean(h_n.astype(jnp.float32))

    def model(params, x, h0):
        outputs = jcr.rnn(params, x, h0, None, config, implementation=implementation)[:2]
        return outputs, jax.value_and_grad(loss, argnums=(0, 1))(params, x, h0)

    return model


CHILD_MANY = r"""
import sys
import jax
import numpy as np
import jax_cudnn_rnn as jcr

inputs = np.load(sys.argv[2])
for name in sys.argv[3:]:
    with open(f"{sys.argv[1]}/{name}.bin", "rb") as f:
        restored = jax.export.deserialize(bytearray(f.read()))
    jcr.export_needs(restored).check()
    avals = restored.in_avals  # the arrays travel as float32 (npz has no bfloat16), exactly
    args = [inputs[f"{avals[0].dtype}_{i}"].astype(avals[i].dtype) for i in range(3)]
    outputs = jax.tree.leaves(restored.call(*args))
    np.savez(f"{sys.argv[1]}/{name}.npz", *[np.asarray(o).astype(np.float32) for o in outputs])
print("ran", len(sys.argv) - 3)
"""


def test_every_implementation_the_registry_runs_exports_and_runs_in_a_fresh_process(tmp_path):
    """Issue 59: ``export`` covers every name the registry can choose (variants and hybrids included), forward and
    training step, float32 and bfloat16; each artifact runs in a fresh process exactly as it runs here. Before, the
    exporter knew only the primitive's three oneDNN targets, and a bfloat16 GRU training step on "onednn:gemm" (the
    default on AVX512-BF16 and AMX CPUs) raised JAX's compatibility error."""
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.backends.call import Call

    if not onednn.extension_loaded():
        skip_or_fail(f"the oneDNN extension is not loaded: {onednn.extension_error()}", REQUIRE_ONEDNN)
    arrays, exported, skipped = {}, {}, []
    for dtype in (jnp.float32, jnp.bfloat16):
        config = dataclasses.replace(SMALL, dtype=np.dtype(dtype).name)
        params = jcr.init_params(jax.random.key(0), config)
        x = jax.random.normal(jax.random.key(1), (5, 3, config.input_size), dtype)
        h0 = jax.random.normal(jax.random.key(2), config.state_shape(3), dtype)
        arrays.update({f"{np.dtype(dtype).name}_{i}": np.asarray(a, np.float32) for i, a in enumerate((params, x, h0))})
        for name in _registry_names():
            reason = registry.why_not(name, "cpu", Call(config, 5, 3))
            if reason is not None:  # e.g. no bfloat16 kernels below AVX-512: asking for it is an error, not an export
                skipped.append((name, np.dtype(dtype).name, reason))
                continue
            model = _small_model(config, name)
            key = f"{name.replace(':', '-').replace('+', '_')}-{np.dtype(dtype).name}"
            artifact = jcr.export(model, platforms=["cpu"])(params, x, h0)
            (tmp_path / f"{key}.bin").write_bytes(artifact.serialize())
            exported[key] = jax.tree.leaves(jax.jit(model)(params, x, h0))
    assert {n.partition("+")[0] for n in _registry_names()} >= {"xla", "onednn", "onednn:gemm", "onednn:plain"}
    assert any(k.startswith("onednn-gemm-float32") for k in exported), exported.keys()
    np.savez(tmp_path / "inputs.npz", **arrays)
    child = subprocess.run(
        [sys.executable, "-P", "-c", CHILD_MANY, str(tmp_path), str(tmp_path / "inputs.npz"), *exported],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-4000:]
    assert f"ran {len(exported)}" in child.stdout
    for key, want in exported.items():
        got = np.load(tmp_path / f"{key}.npz")
        assert len(got.files) == len(want) == 5, key  # y, h_n, the loss, dparams, dx
        for i, w in enumerate(want):
            np.testing.assert_array_equal(got[f"arr_{i}"], np.asarray(w).astype(np.float32), err_msg=f"{key} {i}")
    for name, dtype, reason in skipped:  # only what the machine lacks kernels for
        assert dtype == "bfloat16" and "bfloat16" in reason, (name, dtype, reason)
