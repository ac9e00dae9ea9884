"""rnn(implementation="xla") against PyTorch's nn.LSTM / nn.GRU / nn.RNN loaded from the same canonical weights.

A second, fully external peer next to the NumPy oracle: torch's CPU kernels in float64, with seq_lengths through
pack_padded_sequence(enforce_sorted=False). Our side runs in float32 (tolerance 1e-5) and, for one case per mode, in
float64 (1e-12); outputs and gradients w.r.t. x and h0 are compared.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skips import import_or_skip

torch = import_or_skip("torch")

from test_numpy_reference_vs_torch import run_torch, torch_module  # noqa: E402

T, B = 6, 3
LENGTHS = (4, 6, 1)

CASES = [  # (mode, num_layers, bidirectional, with_lengths, extra config)
    ("lstm", 2, True, True, {}),
    ("lstm", 1, False, False, {}),
    ("lstm", 2, True, True, {"proj_size": 2}),
    ("gru", 2, True, True, {}),
    ("gru", 3, False, False, {}),
    ("rnn_tanh", 2, True, True, {}),
    ("rnn_relu", 2, False, True, {}),
    ("rnn_relu", 1, True, False, {}),
]


def setup(mode, num_layers, bidirectional, extra, dtype, seed=0):
    H, I = 4, 3
    cfg = jcr.RNNConfig(
        mode=mode,
        num_layers=num_layers,
        num_units=H,
        input_size=I,
        direction="bidirectional" if bidirectional else "unidirectional",
        dtype=dtype,
        **extra,
    )
    rng = np.random.default_rng(seed)
    weights = [rng.uniform(-0.6, 0.6, s.shape) for s in jcr.layout.param_slots(cfg)[0]]
    biases = [rng.uniform(-0.6, 0.6, s.shape) for s in jcr.layout.param_slots(cfg)[1]]
    x = rng.normal(size=(T, B, I))
    h0 = 0.5 * rng.normal(size=cfg.state_shape(B))
    c0 = 0.5 * rng.normal(size=cfg.cell_shape(B)) if mode == "lstm" else None
    # round everything to the dtype first so both sides see the same numbers
    rd = lambda a: None if a is None else np.asarray(a).astype(dtype).astype(np.float64)  # noqa: E731
    weights, biases, x, h0, c0 = [rd(w) for w in weights], [rd(b) for b in biases], rd(x), rd(h0), rd(c0)
    params = jcr.canonical_to_params(
        [jnp.asarray(w, dtype) for w in weights], [jnp.asarray(b, dtype) for b in biases], cfg
    )
    module = torch_module(
        weights, biases, mode, num_layers, H, I, bidirectional, False, proj_size=extra.get("proj_size", 0)
    )
    return cfg, params, module, x, h0, c0


@pytest.mark.parametrize("mode,num_layers,bidirectional,with_lengths,extra", CASES, ids=str)
def test_forward_matches_torch(mode, num_layers, bidirectional, with_lengths, extra):
    cfg, params, module, x, h0, c0 = setup(mode, num_layers, bidirectional, extra, np.float32)
    lengths = np.array(LENGTHS) if with_lengths else None
    got = jax.jit(
        lambda p, x, h0, c0: jcr.rnn(
            p,
            x,
            h0,
            c0,
            cfg,
            implementation="xla",
            seq_lengths=None if lengths is None else jnp.asarray(lengths, jnp.int32),
        )
    )(
        params,
        jnp.asarray(x, jnp.float32),
        jnp.asarray(h0, jnp.float32),
        None if c0 is None else jnp.asarray(c0, jnp.float32),
    )
    want = run_torch(module, mode, x, h0, c0, lengths)
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None
        else:
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_float64_forward_and_input_gradients_match_torch(mode):
    """Gradients of sum(y * wy) + sum(h_n * wh) w.r.t. x and h0, ours (custom_vjp) vs torch autograd, float64."""
    with jax.enable_x64(True):
        cfg, params, module, x, h0, c0 = setup(mode, 2, True, {}, np.float64, seed=1)
        lengths = np.array(LENGTHS)
        rng = np.random.default_rng(2)
        wy = rng.normal(size=(T, B, cfg.output_size))
        wh = rng.normal(size=cfg.state_shape(B))

        def loss(x_, h0_):
            y, h, _ = jcr.rnn(
                params,
                x_,
                h0_,
                None if c0 is None else jnp.asarray(c0),
                cfg,
                seq_lengths=jnp.asarray(lengths, jnp.int32),
                implementation="xla",
            )
            return jnp.sum(y * wy) + jnp.sum(h * wh), y

        (value, y), (gx, gh) = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(jnp.asarray(x), jnp.asarray(h0))

        xt = torch.tensor(x, requires_grad=True)
        ht = torch.tensor(h0, requires_grad=True)
        state = (ht, torch.tensor(c0)) if mode == "lstm" else ht
        packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.as_tensor(lengths), enforce_sorted=False)
        yt, hidden = module(packed, state)
        yt, _ = torch.nn.utils.rnn.pad_packed_sequence(yt, total_length=T)
        hn = hidden[0] if mode == "lstm" else hidden
        total = (yt * torch.tensor(wy)).sum() + (hn * torch.tensor(wh)).sum()
        total.backward()
        np.testing.assert_allclose(np.asarray(y), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(float(value), total.item(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(gx), xt.grad.numpy(), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(gh), ht.grad.numpy(), rtol=1e-10, atol=1e-10)
        assert np.abs(np.asarray(gx)).max() > 1e-2
