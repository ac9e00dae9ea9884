"""Several Python threads running jitted RNN computations at once give the same bits as running them one by one."""

from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr

HAS_CUDNN = jcr.extension_loaded() and any(d.platform == "gpu" for d in jax.devices())


def _jobs(implementation):
    jobs = []
    cases = [("lstm", "bidirectional", 7, 3), ("gru", "unidirectional", 5, 4), ("rnn_tanh", "bidirectional", 6, 2),
             ("lstm", "unidirectional", 9, 5), ("rnn_relu", "unidirectional", 4, 3), ("gru", "bidirectional", 8, 2)]
    for index, (mode, direction, steps, batch) in enumerate(cases):
        cfg = jcr.RNNConfig(mode=mode, num_layers=2, num_units=6, input_size=5, direction=direction)
        params = jcr.init_params(jax.random.key(index), cfg)
        x = jax.random.normal(jax.random.key(100 + index), (steps, batch, 5))
        h0 = jax.random.normal(jax.random.key(200 + index), cfg.state_shape(batch))
        c0 = h0 if mode == "lstm" else None
        lengths = jnp.maximum(1, steps - jnp.arange(batch, dtype=jnp.int32))

        def loss(params, x, cfg=cfg, h0=h0, c0=c0, lengths=lengths):
            y, h, _ = jcr.rnn(params, x, h0, c0, cfg, seq_lengths=lengths, implementation=implementation)
            return jnp.sum(y * y) + jnp.sum(h)

        run = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
        jobs.append(lambda run=run, params=params, x=x: jax.tree.map(np.asarray, run(params, x)))
    return jobs


def _check(implementation):
    jobs = _jobs(implementation)
    serial = [job() for job in jobs]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        for _ in range(3):
            concurrent = list(pool.map(lambda job: job(), jobs * 2))
            for got, want in zip(concurrent, serial * 2):
                jax.tree.map(np.testing.assert_array_equal, got, want)


def test_threads_xla():
    _check("xla")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDNN, reason="needs a CUDA GPU and the cuDNN extension")
def test_threads_cudnn():
    _check("cudnn")
