"""``rnn(precision=...)`` reaches cuDNN: the ``allow_tf32`` attribute of every custom call lowered for CUDA, checked on
the CPU (the op is lowered for CUDA, not run; the device checks are stood in for). On a GPU, test_cudnn_gpu.py's
test_allow_tf32_changes_the_result checks that cuDNN acts on it; test_transforms.py checks the xla implementation's
dot precisions."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from cudnn_stand_in import CudnnStandIn
from skips import REQUIRE_EXTENSION, skip_or_fail
from support import jaxpr_eqns

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends.cudnn import extension as _extension

CFG = jcr.RNNConfig(mode="lstm", num_layers=2, num_units=8, input_size=5)
T, B = 4, 3

# What precision= means for cuDNN (docs/architecture.md): TF32 only when asked for, by name or through
# jax.default_matmul_precision; strict float32 otherwise, whatever JAX's own default for a plain matmul is.
CASES = [
    (None, None, False),
    ("float32", None, False),
    ("highest", None, False),
    (jax.lax.Precision.HIGHEST, None, False),
    ("tensorfloat32", None, True),
    ("high", None, True),
    ("default", None, True),
    (jax.lax.Precision.HIGH, None, True),
    (jax.lax.Precision.DEFAULT, None, True),
    (None, "tensorfloat32", True),
    (None, "float32", False),
    ("float32", "tensorfloat32", False),  # the argument wins over the config
    ("tensorfloat32", "float32", True),
]


@pytest.fixture
def lowers_for_cuda(monkeypatch):
    """Lets rnn(implementation="cudnn") trace on this machine: the extension must be loaded (its targets are what the
    lowering names); cuDNN counts as available and the reserve size (asked of cuDNN on a GPU) comes from a stand-in,
    since the call is lowered for CUDA but never run."""
    if not _extension.extension_loaded():
        skip_or_fail(f"the cuDNN extension is not loaded: {_extension.extension_error()}", REQUIRE_EXTENSION)
    with CudnnStandIn(reserve_bytes=lambda problem: 4096, kernels=False):
        yield


def _allow_tf32_attributes(fn, *args) -> list[str]:
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    calls = [line for line in text.splitlines() if "stablehlo.custom_call" in line and "@jax_cudnn_rnn_" in line]
    assert calls, text
    return [re.search(r"allow_tf32 = (true|false)", call).group(1) for call in calls]


def _inputs():
    params = jcr.init_params(jax.random.key(0), CFG)
    x = jnp.ones((T, B, CFG.input_size))
    h0 = jnp.zeros(CFG.state_shape(B))
    return params, x, h0, h0


@pytest.mark.parametrize("precision,config,tf32", CASES, ids=str)
def test_precision_sets_allow_tf32_on_every_cudnn_call(lowers_for_cuda, precision, config, tf32):
    def forward(params, x, h0, c0):
        return jcr.rnn(params, x, h0, c0, CFG, implementation="cudnn", precision=precision)[0]

    def gradient(params, x, h0, c0):
        return jax.grad(lambda p: jnp.sum(forward(p, x, h0, c0)))(params)

    want = "true" if tf32 else "false"
    with jax.default_matmul_precision(config):
        assert _allow_tf32_attributes(forward, *_inputs()) == [want]
        # forward (training), backward data, backward weights
        assert _allow_tf32_attributes(gradient, *_inputs()) == [want] * 3


def test_dropout_path_passes_allow_tf32_to_every_layer(lowers_for_cuda):
    cfg = jcr.RNNConfig(mode="gru", num_layers=3, num_units=8, input_size=5, dropout=0.5)
    params = jcr.init_params(jax.random.key(0), cfg)
    x, h0 = jnp.ones((T, B, 5)), jnp.zeros(cfg.state_shape(B))

    def forward(params, x, h0, precision):
        return jcr.rnn(
            params,
            x,
            h0,
            None,
            cfg,
            is_training=True,
            dropout_key=jax.random.key(1),
            implementation="cudnn",
            precision=precision,
        )[0]

    assert _allow_tf32_attributes(lambda *a: forward(*a, "tensorfloat32"), params, x, h0) == ["true"] * 3
    assert _allow_tf32_attributes(lambda *a: forward(*a, "highest"), params, x, h0) == ["false"] * 3


def test_precision_reaches_the_fallback_beyond_max_segments():
    """Resets beyond ``max_segments`` run the registry's next choice (the xla implementation) in a branch of a
    lax.cond: every matmul of that branch, forward and backward, is strict float32 (so are the stand-in's kernels).
    On an H200 it was not: JAX traced the xla implementation's custom_vjp forward rules after rnn()'s precision
    context had closed, so their GEMMs ran in TF32 and the gradients were 5e-4 off strict float32
    (test_resets_beyond_max_segments_match_xla)."""
    cfg = jcr.RNNConfig("lstm", 2, 6, 5, direction="bidirectional")
    params, x = jcr.init_params(jax.random.key(0), cfg), jnp.ones((T, B, 5))
    h0, c0 = jnp.zeros(cfg.state_shape(B)), jnp.zeros(cfg.cell_shape(B))
    resets = jnp.ones((T, B), bool).at[0].set(False)  # (T - 1) B + B segments, beyond the default bound 2 B

    def loss(p, x, h, c):
        y, h_n, _ = jcr.rnn(p, x, h, c, cfg, implementation="cudnn", resets=resets, precision="float32")
        return jnp.sum(jnp.sin(y)) + jnp.sum(h_n**2)

    with CudnnStandIn():
        jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2, 3)))(params, x, h0, c0)
    precisions = [eqn.params["precision"] for eqn in jaxpr_eqns(jaxpr.jaxpr) if eqn.primitive.name == "dot_general"]
    highest = jax.lax.Precision.HIGHEST
    assert precisions and set(precisions) == {(highest, highest)}
