"""jax.export with this library (docs/lowering.md): the xla implementation exports for every platform; a cuDNN call is a
clear error under plain jax.export and exports through ``jax_cudnn_rnn.export`` (the recipe), single-device only; the
old ``jax_cudnn_rnn.cudnn.export`` still does, with a DeprecationWarning. Nothing runs on CUDA here (the GPU test at the
end runs the recipe's result). The CPU default's export: tests/backends/test_exporting.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import cudnn
from jax_cudnn_rnn.backends.cudnn import extension as _extension

CFG = jcr.RNNConfig("lstm", 2, 6, 4, direction="bidirectional")
HAS_CUDNN = _extension.extension_loaded() and any(d.platform == "gpu" for d in jax.devices())


def _args():
    params = jcr.init_params(jax.random.key(0), CFG)
    x = jax.random.normal(jax.random.key(1), (5, 3, 4))
    h0 = jax.random.normal(jax.random.key(2), CFG.state_shape(3))
    c0 = jax.random.normal(jax.random.key(3), CFG.cell_shape(3))
    return params, x, h0, c0


def _grad(implementation):
    def loss(params, x, h0, c0):
        y, h_n, c_n = jcr.rnn(params, x, h0, c0, CFG, implementation=implementation)
        return jnp.sum(y**2) + jnp.sum(h_n * c_n)

    return jax.jit(jax.grad(loss, argnums=(0, 1)))


def test_the_xla_implementation_exports_for_every_platform():
    args = _args()
    exported = jax.export.export(_grad("xla"), platforms=["cpu", "cuda", "rocm", "tpu"])(*args)
    restored = jax.export.deserialize(exported.serialize())
    for got, want in zip(restored.call(*args), _grad("xla")(*args), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_plain_export_of_a_cudnn_call_is_a_clear_error(cudnn_traceable):
    with pytest.raises(
        ValueError,
        match=r"jax\.export of a cuDNN RNN call: its FFI targets .* export with jax_cudnn_rnn\.export\(\.\.\.\), "
        r"which exports a single-device cuDNN function .* or use implementation='xla'",
    ):
        jax.export.export(_grad("cudnn"), platforms=["cuda"])(*_args())


def test_the_recipe_exports_a_single_device_cudnn_call(cudnn_traceable):
    args = _args()
    exported = jcr.export(_grad("cudnn"), platforms=["cuda"])(*args)
    restored = jax.export.deserialize(exported.serialize())
    assert restored.platforms == ("cuda",)
    text = restored.mlir_module()
    targets = ("jax_cudnn_rnn_forward", "jax_cudnn_rnn_backward_data", "jax_cudnn_rnn_backward_weights")
    for target in targets:
        assert f"@{target}(" in text, target
    assert jcr.export_needs(restored).targets == {"cuda": targets}
    # The check is disabled only while jcr.export runs.
    with pytest.raises(ValueError, match=r"jax\.export of a cuDNN RNN call"):
        jax.export.export(_grad("cudnn"), platforms=["cuda"])(*args)


def test_the_old_name_still_exports_for_cuda_and_warns(cudnn_traceable):
    with pytest.warns(DeprecationWarning, match=r"jax_cudnn_rnn\.cudnn\.export is deprecated .* jax_cudnn_rnn\.export"):
        old = cudnn.export
    exported = old(_grad("cudnn"))(*_args())  # CUDA is its default platform, as it was
    assert exported.platforms == ("cuda",) and "@jax_cudnn_rnn_forward(" in exported.mlir_module()


def test_the_multi_device_refusal_points_at_the_per_device_export():
    assert "jax_cudnn_rnn.export" in cudnn.EXPORT_ADVICE and "implementation='xla'" in cudnn.EXPORT_ADVICE


@pytest.mark.gpu
def test_the_recipes_export_runs_on_the_gpu():
    args = _args()
    restored = jax.export.deserialize(jcr.export(_grad("cudnn"), platforms=["cuda"])(*args).serialize())
    jcr.export_needs(restored).check()
    for got, want in zip(restored.call(*args), _grad("xla")(*args), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
