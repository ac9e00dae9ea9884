"""What every jax the package declares must support, run by tests/packaging/test_jax_floor.py in a fresh venv that has
exactly that jax and jaxlib and the binary wheel of an isolated build with its extensions (this file is not collected
by pytest itself). Argument: the jax version the venv must have.

Checks, each printing one line: JAX still computes after the import, with the extensions' FFI targets registered (an
extension built against newer FFI headers than this jaxlib's had broken every computation: issue 37); every
implementation runs (against the reference) or refuses by name; the xla implementation under jit and grad against the
reference implementation, under the strict promotion settings (tests/strict_promotion.py) and jax_debug_nans; the same
under jax_enable_x64, a float32 network staying float32; the cuDNN path's calls through ``custom_partitioning`` (the
kernels stood in for by the reference implementation, as in tests/sharding/test_partitioning.py) compiled and run per
batch shard on 2 CPU devices; the cuDNN path lowered for CUDA (StableHLO only: nothing runs), which needs no GPU;
rnn(implementation=None) lowered for CPU and for CUDA from one trace (lax.platform_dependent).
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends.cudnn import backend as cudnn_backend
from jax_cudnn_rnn.backends.cudnn import plan
from jax_cudnn_rnn.backends.fused.vjp import KernelArrays

print("jax", jax.__version__, "jaxlib", jax.lib.__version__ if hasattr(jax.lib, "__version__") else "?")
assert jax.__version__ == sys.argv[1], (jax.__version__, sys.argv[1])

from jax_cudnn_rnn.backends import registry  # noqa: E402
from jax_cudnn_rnn.backends.onednn import extension as onednn_extension  # noqa: E402

assert float(jnp.sum(jnp.ones(3) + 1)) == 6.0
print("cuDNN extension:", jcr.extension_loaded(), jcr.extension_error())
print("oneDNN extension:", onednn_extension.extension_loaded(), onednn_extension.extension_error())
if os.uname().machine == "x86_64":
    assert onednn_extension.extension_loaded(), onednn_extension.extension_error()
print("jnp after import ok")

cfg = jcr.RNNConfig("lstm", 2, 6, 4, direction="bidirectional")
params = jcr.init_params(jax.random.key(0), cfg)
B = 4
x = jax.random.normal(jax.random.key(1), (5, B, 4))
h0 = jax.random.normal(jax.random.key(2), cfg.state_shape(B))
c0 = jax.random.normal(jax.random.key(3), cfg.cell_shape(B))
lengths = jnp.array([5, 2, 4, 1], jnp.int32)


def loss(implementation, p, x):
    y, h_n, c_n = jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths, implementation=implementation)
    return jnp.sum(y**2) + jnp.sum(h_n * c_n)


def jitted(implementation):
    return jax.jit(lambda p, x: jcr.rnn(p, x, h0, c0, cfg, implementation=implementation))


# Without seq_lengths, which oneDNN's primitives do not take.
want = jcr.rnn(params, x, h0, c0, cfg, implementation="reference")
ran, refused = [], []
for implementation in (None, *registry.names()):
    try:
        got = jitted(implementation)(params, x)
    except RuntimeError as e:
        assert f"implementation={implementation!r} needs" in str(e), str(e)
        print(f"refused {implementation}: {e}")
        refused.append(implementation)
        continue
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    ran.append(implementation)
print("ran:", ran, "refused:", refused)
assert refused == ["cudnn"] and None in ran and "xla" in ran
assert "onednn" in ran or os.uname().machine != "x86_64"
print("every implementation ok")

# Under the strict settings the test suite runs under (tests/strict_promotion.py) and jax_debug_nans, which every
# declared jax must accept as the newest does.
with jax.numpy_rank_promotion("raise"), jax.numpy_dtype_promotion("strict"), jax.debug_nans(True):
    got = jax.jit(jax.value_and_grad(lambda p, x: loss("xla", p, x), argnums=(0, 1)))(params, x)
    want = jax.value_and_grad(lambda p, x: loss("reference", p, x), argnums=(0, 1))(params, x)
for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
print("xla jit grad ok")

# jax_enable_x64 set through jax.config (the floor has no jax.enable_x64 context manager): the float32 network computes
# and returns float32, the strict dtype promotion refusing any float64 that would mix in.
jax.config.update("jax_enable_x64", True)
with jax.numpy_rank_promotion("raise"), jax.numpy_dtype_promotion("strict"):
    got64 = jax.jit(jax.value_and_grad(lambda p, x: loss("xla", p, x), argnums=(0, 1)))(params, x)
jax.config.update("jax_enable_x64", False)
assert all(a.dtype == np.float32 for a in jax.tree.leaves(got64)), [a.dtype for a in jax.tree.leaves(got64)]
for a, b in zip(jax.tree.leaves(got64), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
print("strict x64 ok")


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cudnn_stand_in import CudnnStandIn  # noqa: E402

stand_in = CudnnStandIn(reserve_bytes=lambda problem: 100 * problem.batch + 7).__enter__()
mesh = Mesh(np.array(jax.devices()), ("batch",))
on = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731
batch_sharded = lambda a: on(a, P(None, "batch"))  # noqa: E731
ours = lambda p, x, h, c, n: jcr.rnn(p, x, h, c, cfg, seq_lengths=n, implementation="cudnn")  # noqa: E731
sharded = (on(params, P()), batch_sharded(x), batch_sharded(h0), batch_sharded(c0), on(lengths, P("batch")))
grad = jax.jit(jax.grad(lambda *a: jnp.sum(ours(*a)[0] ** 2), argnums=(0, 1)))
hlo = grad.lower(*sharded).compile().as_text()
assert "all-gather(" not in hlo, "the partitioned calls gathered the batch"
want = jax.grad(
    lambda p, x: jnp.sum(jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths, implementation="xla")[0] ** 2), argnums=(0, 1)
)(params, x)
for a, b in zip(grad(*sharded), want, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
print("custom_partitioning per shard ok")

stand_in.__exit__()
text = (
    jax.jit(
        lambda p: cudnn_backend._rnn(KernelArrays(p, x, h0, c0), None, cudnn_backend.Static(cfg, False, "standard"))[0]
    )
    .trace(params)
    .lower(lowering_platforms=("cuda",))
    .as_text()
)
assert "jax_cudnn_rnn_forward" in text
print("cuda lowering ok")

# implementation=None staged out per platform (jax_cudnn_rnn/backends/registry.py), as on a GPU host: CPU and CUDA
# lowerings. The real kernels (nothing runs); the reserve size, which only a GPU can tell, stood in for.
cudnn_backend.unavailable = lambda: None
plan.reserve_space_size = lambda problem, algo, device=-1: 100 * problem.batch + 7
traced = jax.jit(jax.grad(lambda p, x: jnp.sum(jcr.rnn(p, x, h0, c0, cfg)[0]))).trace(params, x)
assert "jax_cudnn_rnn_forward" not in traced.lower(lowering_platforms=("cpu",)).as_text()
assert "jax_cudnn_rnn_backward_weights" in traced.lower(lowering_platforms=("cuda",)).as_text()
print("platform choice ok")
