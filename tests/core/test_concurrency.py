"""Several Python threads running jitted RNN computations at once give the same bits as running them one by one."""

import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr


def _jobs(implementation):
    jobs = []
    cases = [
        ("lstm", "bidirectional", 7, 3),
        ("gru", "unidirectional", 5, 4),
        ("rnn_tanh", "bidirectional", 6, 2),
        ("lstm", "unidirectional", 9, 5),
        ("rnn_relu", "unidirectional", 4, 3),
        ("gru", "bidirectional", 8, 2),
    ]
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
            for got, want in zip(concurrent, serial * 2, strict=True):
                jax.tree.map(np.testing.assert_array_equal, got, want)


def test_threads_xla():
    _check("xla")


@pytest.mark.gpu
def test_threads_cudnn():
    _check("cudnn")


def test_threads_tracing_autotune_at_once_give_forward_and_backward_one_algorithm(monkeypatch, cudnn_stand_in):
    """Several threads trace the same differentiated cuDNN call with algorithm="autotune" at the same moment (the CPU
    stands in for the kernels and the timing, which would favour another algorithm each time it measured): one thread
    measures, every trace gets the choice stored first, and each trace's backward runs its own forward's algorithm."""
    from threading import Barrier, get_ident

    from jax_cudnn_rnn.backends.cudnn import algorithm
    from jax_cudnn_rnn.backends.cudnn import backend as cudnn_backend
    from jax_cudnn_rnn.backends.fused.vjp import KernelArrays

    measurements, favourite = [], {}
    favourites = iter(algorithm.ALGORITHMS * 4)

    def time_algorithm(problem, algo, device=None):
        if get_ident() not in favourite:  # each measuring thread would find another algorithm fastest
            favourite[get_ident()] = next(favourites)
            measurements.append(favourite[get_ident()])
            time.sleep(0.03 * len(measurements))  # staggered: traces go on while other threads still measure
        return 0.0 if algo == favourite[get_ident()] else 1.0

    monkeypatch.setattr(cudnn_backend, "_time_algorithm", time_algorithm)
    monkeypatch.setattr(algorithm, "_TUNED", {})
    monkeypatch.setattr(algorithm, "_TUNING", {})
    cfg = jcr.RNNConfig(mode="lstm", num_layers=1, num_units=8, input_size=4)
    params = jcr.init_params(jax.random.key(0), cfg)
    x, h0 = jnp.ones((5, 3, 4)), jnp.zeros((1, 3, 8))

    def loss(p):
        return jnp.sum(
            cudnn_backend._rnn(KernelArrays(p, x, h0, h0), None, cudnn_backend.Static(cfg, False, "autotune"))[0]
        )

    threads = 6
    barrier = Barrier(threads)

    def trace(_):
        barrier.wait()
        jax.jit(jax.grad(loss)).trace(params)
        return get_ident()

    with ThreadPoolExecutor(max_workers=threads) as pool:
        idents = list(pool.map(trace, range(threads)))
    assert len(measurements) == 1  # one thread measured; the others waited for its result
    for ident in idents:
        mine = [(kind, algo) for thread, kind, algo in cudnn_stand_in.calls if thread == ident]
        assert {kind for kind, _ in mine} == {"forward", "backward"}
        assert {algo for _, algo in mine} == {measurements[0]}, mine
