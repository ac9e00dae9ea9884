"""jax.vmap of rnn() folds the mapped axes into the batch: ``batching.fold_vmap`` checked on CPU with a pure-JAX
kernel (values) and on the cuDNN path's jaxpr (one kernel call); the cuDNN values are in test_cudnn_gpu.py."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import xla
from jax_cudnn_rnn.backends.cudnn import backend as cudnn_backend
from jax_cudnn_rnn.backends.cudnn import plan
from jax_cudnn_rnn.backends.fused import batching
from jax_cudnn_rnn.backends.fused.vjp import KernelArrays

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import jaxpr_eqns, records

CFG = jcr.RNNConfig(mode="lstm", num_layers=2, num_units=5, input_size=3, direction="bidirectional")
T, B = 6, 2
TRACED = []


def _kernel(x, h0, params, c0, lengths):
    """A batch-major call like cuDNN's forward (x [T, B, I], states [L*D, B, H], lengths [B]), in pure JAX."""
    TRACED.append(x.shape)
    return xla.rnn(*records(params, x, h0, c0, CFG, lengths))


FOLDED = batching.fold_vmap(_kernel, in_axes=[1, 1, None, 1, 0], out_axes=[1, 1, 1])


def _inputs(lead, key=1):
    k = jax.random.split(jax.random.key(key), 3)
    x = jax.random.normal(k[0], (*lead, T, B, 3))
    h0 = jax.random.normal(k[1], (*lead, *CFG.state_shape(B)))
    lengths = jax.random.randint(k[2], (*lead, B), 1, T + 1, jnp.int32)
    return x, h0, lengths


def test_nested_vmap_is_one_call_over_the_folded_batch_and_matches_a_loop():
    params = jcr.init_params(jax.random.key(0), CFG)
    x, h0, lengths = _inputs((3, 4))
    TRACED.clear()
    jax.clear_caches()
    got = jax.vmap(jax.vmap(lambda x, h, n: FOLDED(x, h, params, h, n)))(x, h0, lengths)
    assert TRACED[-1] == (T, 3 * 4 * B, 3)  # the run over the folded batch (earlier traces: shapes only)
    for i in range(3):
        for j in range(4):
            want = _kernel(x[i, j], h0[i, j], params, h0[i, j], lengths[i, j])
            for a, b in zip(got, want, strict=True):
                np.testing.assert_allclose(a[i, j], b, atol=1e-6)


def test_unbatched_arguments_are_broadcast_across_the_mapped_axis():
    params = jcr.init_params(jax.random.key(0), CFG)
    x, h0, lengths = _inputs((3,))
    got = jax.vmap(FOLDED, in_axes=(0, None, None, None, None))(x, h0[0], params, h0[0], lengths[0])
    for n in range(3):
        want = _kernel(x[n], h0[0], params, h0[0], lengths[0])
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a[n], b, atol=1e-6)


def test_batched_shared_argument_runs_once_per_element():
    params = jax.vmap(lambda k: jcr.init_params(k, CFG))(jax.random.split(jax.random.key(0), 3))
    x, h0, lengths = _inputs((3,))
    TRACED.clear()
    jax.clear_caches()  # jax 0.12 reuses lax.map's trace of the same body from an earlier test: nothing would trace
    got = jax.vmap(FOLDED)(x, h0, params, h0, lengths)
    assert set(TRACED) == {(T, B, 3)}  # never folded: once per element, inside lax.map
    for n in range(3):
        want = _kernel(x[n], h0[n], params[n], h0[n], lengths[n])
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a[n], b, atol=1e-6)


def _ffi_calls(jaxpr):
    """(target name, shape of the first operand) of every ffi_call in ``jaxpr``, sub-jaxprs included."""
    return [
        (eqn.params["target_name"], eqn.invars[0].aval.shape)
        for eqn in jaxpr_eqns(jaxpr)
        if eqn.primitive.name == "ffi_call"
    ]


def test_cudnn_inference_under_nested_vmap_is_a_single_kernel_call():
    params = jcr.init_params(jax.random.key(0), CFG)
    x, h0, lengths = _inputs((3, 4))

    def forward(x, h, n):
        return cudnn_backend._rnn(KernelArrays(params, x, h, h), n, cudnn_backend.Static(CFG, False, "heuristic"))

    jaxpr = jax.make_jaxpr(jax.vmap(jax.vmap(forward)))(x, h0, lengths).jaxpr
    assert _ffi_calls(jaxpr) == [("jax_cudnn_rnn_forward", (T, 3 * 4 * B, 3))]


def test_cudnn_vmap_of_grad_runs_per_element_training_calls(monkeypatch):
    """Per-element weight gradients need per-element reserve spaces, so nothing folds under differentiation."""
    monkeypatch.setattr(plan, "reserve_space_size", lambda *args: 64)  # asked of cuDNN on a GPU otherwise
    params = jcr.init_params(jax.random.key(0), CFG)
    x, h0, _ = _inputs((3,))

    def loss(p, x, h):
        return jnp.sum(
            cudnn_backend._rnn(KernelArrays(p, x, h, h), None, cudnn_backend.Static(CFG, False, "heuristic"))[0]
        )

    jaxpr = jax.make_jaxpr(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))(params, x, h0).jaxpr
    calls = _ffi_calls(jaxpr)
    assert sorted(name for name, _ in calls) == [
        "jax_cudnn_rnn_backward_data",
        "jax_cudnn_rnn_backward_weights",
        "jax_cudnn_rnn_forward",
    ]
    assert all(shape[1] == B for _, shape in calls), calls  # [T, B, .]: not folded
