"""The same inputs and dropout key give bit-identical results run to run: the xla path on CPU, the cuDNN path on a
GPU (marked ``gpu``; skipped without one)."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr

SCRIPT = """
import jax, jax.numpy as jnp, numpy as np, sys
import jax_cudnn_rnn as jcr
cfg = jcr.RNNConfig(mode="lstm", num_layers=3, num_units=7, input_size=5, direction="bidirectional", dropout=0.3)
params = jcr.init_params(jax.random.key(0), cfg)
x = jax.random.normal(jax.random.key(1), (9, 4, 5))
h0 = jax.random.normal(jax.random.key(2), cfg.state_shape(4))
lengths = jnp.array([9, 3, 1, 7], jnp.int32)
def loss(params, x):
    y, h, c = jcr.rnn(params, x, h0, h0, cfg, seq_lengths=lengths, is_training=True,
                      dropout_key=jax.random.key(3), implementation=sys.argv[1])
    return jnp.sum(y ** 2) + jnp.sum(h * c)
value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(params, x)
sys.stdout.buffer.write(np.asarray(value).tobytes() + b"".join(np.asarray(g).tobytes() for g in grads))
"""


def _bit_identical_across_processes(implementation, **env):
    runs = [
        subprocess.run(
            [sys.executable, "-c", SCRIPT, implementation], capture_output=True, timeout=300, env={**os.environ, **env}
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr.decode()
    assert len(runs[0].stdout) > 1000
    assert runs[0].stdout == runs[1].stdout


def test_bit_identical_across_processes():
    _bit_identical_across_processes("xla")


@pytest.mark.gpu
def test_cudnn_bit_identical_across_processes():
    """cuDNN's RNN forward, backward data and backward weights with the standard algorithm, and our dropout masks,
    with cuBLAS's workspace pinned as PyTorch's reproducibility notes prescribe for cuDNN RNNs."""
    _bit_identical_across_processes("cudnn", CUBLAS_WORKSPACE_CONFIG=":4096:2")


def test_dropout_same_key_same_result_other_key_differs():
    cfg = jcr.RNNConfig(mode="gru", num_layers=2, num_units=8, input_size=4, dropout=0.5)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jnp.ones((6, 3, 4))
    h0 = jnp.zeros(cfg.state_shape(3))
    run = lambda key: jcr.rnn(params, x, h0, None, cfg, is_training=True, dropout_key=key)[0]  # noqa: E731
    a, b, c = run(jax.random.key(5)), run(jax.random.key(5)), run(jax.random.key(6))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    inference = jcr.rnn(params, x, h0, None, cfg, is_training=False)[0]
    assert not np.allclose(a, inference)
