"""The Python around cuDNN's calls, run on the CPU: ``rnn(..., implementation="cudnn")`` with resets, empty
sequences, dropout and sequences longer than ``MAX_TIME_STEPS`` goes through the registry, the fused kit (segments,
chunks, layers) and cuDNN's custom_vjp down to its kernels, which are stood in for (``cudnn_stand_in.CudnnStandIn``: the
reference implementation, with every output of a row whose length is below 1 made NaN, since cuDNN refuses such rows and
none may reach it). The results must equal the xla implementation's. What the stand-in cannot show (cuDNN's kernels,
its reserve space, its own length checks) is tests/cudnn/test_cudnn_gpu.py's.
"""

from __future__ import annotations

import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends.cudnn import backend as cudnn_backend
from jax_cudnn_rnn.backends.fused.vjp import KernelArrays

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import draw_inputs, make_config

T, B = 7, 4


def _both(cfg, inputs, **kwargs):
    """Values and gradients of rnn() under implementation "cudnn" (the stand-in) and "xla"."""
    argnums = (0, 1, 2, 3) if cfg.mode == "lstm" else (0, 1, 2)

    def loss(implementation, *inputs):
        y, h_n, c_n = jcr.rnn(*inputs, cfg, implementation=implementation, **kwargs)
        total = jnp.sum(jnp.sin(y)) + jnp.sum(h_n**2) + (0 if c_n is None else jnp.sum(c_n * 0.3))
        return total, (y, h_n, c_n)

    run = jax.jit(
        lambda *a: [
            jax.value_and_grad(functools.partial(loss, impl), argnums=argnums, has_aux=True)(*a)
            for impl in ("cudnn", "xla")
        ]
    )
    return run(*(None if a is None else jnp.asarray(a) for a in inputs))


def _assert_equal_results(results):
    ((_, got), got_grads), ((_, want), want_grads) = results
    for name, a, b in zip(
        ("y", "h_n", "c_n", "dparams", "dx", "dh0", "dc0"), (*got, *got_grads), (*want, *want_grads), strict=False
    ):
        if b is not None:
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=name)


RESETS = np.zeros((T, B), bool)
RESETS[[2, 5], 0] = True
RESETS[0, 1] = True
RESETS[[1, 2, 3], 3] = True


@pytest.mark.parametrize(
    "max_segments, chunk, num_layers",
    [(None, None, 2), (B, None, 1), (12, 3, 1)],
    ids=["default-dropout", "fallback", "packed-chunked"],
)
def test_resets_through_the_cudnn_path(cudnn_stand_in, monkeypatch, max_segments, chunk, num_layers):
    """8 segments (an empty row has none): the default bound 2B = 8 and 12 take the packed path, B the fallback."""
    if chunk:
        monkeypatch.setattr(cudnn_backend, "MAX_TIME_STEPS", chunk)
    cfg = make_config("lstm", num_layers, "bidirectional", dropout=0.5 if num_layers > 1 else 0.0)
    inputs = draw_inputs(cfg, np.random.default_rng(0), T, B)
    dropout = dict(is_training=True, dropout_key=jax.random.key(1)) if cfg.dropout else {}
    _assert_equal_results(
        _both(
            cfg,
            inputs,
            seq_lengths=jnp.array([T, 0, 3, 6], jnp.int32),
            resets=jnp.asarray(RESETS),
            max_segments=max_segments,
            **dropout,
        )
    )


@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_long_and_empty_sequences_through_the_cudnn_path(cudnn_stand_in, monkeypatch, direction):
    monkeypatch.setattr(cudnn_backend, "MAX_TIME_STEPS", 2)
    cfg = make_config("gru", 2, direction)
    inputs = draw_inputs(cfg, np.random.default_rng(1), T, B)
    _assert_equal_results(_both(cfg, inputs, seq_lengths=jnp.array([T, 0, 3, 4], jnp.int32)))


def test_the_stand_in_poisons_empty_rows(cudnn_stand_in):
    """The check above can fail: the stand-in called directly with a length of 0 gives NaN."""
    cfg = make_config("gru", 1, "unidirectional")
    params, x, h0, _ = draw_inputs(cfg, np.random.default_rng(2), T, B)
    _, h_n, _ = cudnn_backend._rnn(
        KernelArrays(params, x, h0, None),
        jnp.array([T, 0, 3, 4], jnp.int32),
        cudnn_backend.Static(cfg, False, "standard"),
    )
    assert np.isnan(np.asarray(h_n)[:, 1]).all() and np.isfinite(np.asarray(h_n)[:, 0]).all()
