"""rnn() composes with vmap and batch sharding (xla implementation; the cuDNN versions need a GPU)."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np

import jax_cudnn_rnn as jcr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import jaxpr_eqns

CFG = jcr.RNNConfig(mode="lstm", num_layers=2, num_units=5, input_size=3, direction="bidirectional")


def _run(params, x, h0, c0):
    return jcr.rnn(params, x, h0, c0, CFG, implementation="xla")


def test_vmap_over_leading_axis_with_shared_params_matches_a_loop():
    params = jcr.init_params(jax.random.key(0), CFG)
    xs = jax.random.normal(jax.random.key(1), (4, 6, 2, 3))  # [N, T, B, I]
    h0s = jax.random.normal(jax.random.key(2), (4, *CFG.state_shape(2)))
    got = jax.vmap(_run, in_axes=(None, 0, 0, 0))(params, xs, h0s, h0s)
    for n in range(4):
        want = _run(params, xs[n], h0s[n], h0s[n])
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a[n], b, atol=1e-6)


def test_vmap_over_params_ensemble_and_vmap_of_grad():
    params = jax.vmap(lambda k: jcr.init_params(k, CFG))(jax.random.split(jax.random.key(0), 3))
    x = jax.random.normal(jax.random.key(1), (6, 2, 3))
    h0 = jnp.zeros(CFG.state_shape(2))
    loss = lambda p: jnp.sum(_run(p, x, h0, h0)[0] ** 2)  # noqa: E731
    got = jax.vmap(jax.grad(loss))(params)
    for n in range(3):
        np.testing.assert_allclose(got[n], jax.grad(loss)(params[n]), atol=1e-5)


SHARDING_SCRIPT = textwrap.dedent("""
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jax_cudnn_rnn as jcr

    cfg = jcr.RNNConfig("gru", 2, 8, 4, direction="bidirectional")
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.random.normal(jax.random.key(1), (5, 16, 4))
    h0 = jax.random.normal(jax.random.key(2), cfg.state_shape(16))
    lengths = jnp.arange(16, dtype=jnp.int32) % 5 + 1
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    on = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
    args = (on(params, P()), on(x, P(None, "batch")), on(h0, P(None, "batch")), on(lengths, P("batch")))

    def loss(p, x, h, n):
        y, h_n, _ = jcr.rnn(p, x, h, None, cfg, seq_lengths=n, implementation="xla")
        return jnp.sum(y ** 2) + jnp.sum(h_n)

    forward = jax.jit(lambda p, x, h, n: jcr.rnn(p, x, h, None, cfg, seq_lengths=n, implementation="xla"))
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    for name, fn in (("forward", forward), ("grad", grad)):
        hlo = fn.lower(*args).compile().as_text()
        print(name, "all-gather", hlo.count("all-gather"), "all-to-all", hlo.count("all-to-all"))
    y = forward(*args)[0]
    assert y.sharding.spec == P(None, "batch"), y.sharding
    np.testing.assert_allclose(y, forward(params, x, h0, lengths)[0], atol=1e-6)
    for a, b in zip(grad(*args), grad(params, x, h0, lengths)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    print("values equal")

    # The route docs/lowering.md gives for the cudnn implementation: shard_map, local shapes inside.
    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "batch"), P(None, "batch"), P("batch")),
                   out_specs=(P(None, "batch"), P(None, "batch")), check_vma=False)
    def mapped(p, x, h, n):
        y, h_n, _ = jcr.rnn(p, x, h, None, cfg, seq_lengths=n, implementation="xla")
        return y, h_n

    def mapped_loss(p, x, h, n):
        y, h_n = mapped(p, x, h, n)
        return jnp.sum(y ** 2) + jnp.sum(h_n)

    mapped_grad = jax.jit(jax.grad(mapped_loss, argnums=(0, 1)))
    np.testing.assert_allclose(mapped(*args)[0], forward(params, x, h0, lengths)[0], atol=1e-6)
    for a, b in zip(mapped_grad(*args), grad(params, x, h0, lengths)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    print("shard_map equal")
""")


def test_batch_sharding_runs_per_shard_without_gathering_activations():
    result = subprocess.run([sys.executable, "-c", SHARDING_SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "forward all-gather 0 all-to-all 0" in lines, lines
    assert "grad all-gather 0 all-to-all 0" in lines, lines
    assert "values equal" in lines
    assert "shard_map equal" in lines


def _dot_precisions(precision):
    params = jcr.init_params(jax.random.key(0), CFG)
    x, h0 = jnp.ones((4, 2, 3)), jnp.zeros(CFG.state_shape(2))
    loss = lambda p: jnp.sum(jcr.rnn(p, x, h0, h0, CFG, implementation="xla", precision=precision)[0])  # noqa: E731
    jaxpr = jax.make_jaxpr(jax.value_and_grad(loss))(params)
    return {eqn.params["precision"] for eqn in jaxpr_eqns(jaxpr.jaxpr) if eqn.primitive.name == "dot_general"}


def test_precision_reaches_every_matmul_of_forward_and_backward():
    """The custom backward pass is traced after rnn() returns, so it must carry the precision itself."""
    high, highest = jax.lax.Precision.HIGH, jax.lax.Precision.HIGHEST
    assert _dot_precisions(None) == {(highest, highest)}
    assert _dot_precisions("tensorfloat32") == {(high, high)}
    with jax.default_matmul_precision("tensorfloat32"):
        assert _dot_precisions(None) == {(high, high)}
