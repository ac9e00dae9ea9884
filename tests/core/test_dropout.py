"""Inter-layer dropout masks (jax_cudnn_rnn/dropout.py) against what docs/architecture.md promises: each entry kept
with probability 1 - dropout, kept entries scaled by 1 / (1 - dropout), masks independent across layers, drawn from
``fold_in(key, layer)``. The statistics are checked on large masks, so a keep probability swapped for the drop
probability (or any other wrong rate) fails here even though every other test takes its masks from the same recipe."""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_cudnn_rnn as jcr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import documented_dropout_masks

SHAPE = (64, 32, 128)  # [T, B, D*H]: 262,144 draws per mask
SIGMAS = 6.0  # a rate off by more than 6 standard errors is a bug, not chance (p ~ 2e-9)


def _config(dropout, num_layers=3):
    return jcr.RNNConfig(
        "lstm", num_layers=num_layers, num_units=64, input_size=8, direction="bidirectional", dropout=dropout
    )


@pytest.mark.parametrize("dropout", [0.1, 0.3, 0.75])
def test_keep_rate_scale_and_independence(dropout):
    cfg = _config(dropout)
    masks = [np.asarray(m, np.float64) for m in jcr.dropout.dropout_masks(jax.random.key(11), cfg, SHAPE, jnp.float32)]
    assert len(masks) == cfg.num_layers - 1
    keep, draws = 1.0 - dropout, np.prod(SHAPE)
    standard_error = np.sqrt(keep * (1.0 - keep) / draws)
    kept = [m != 0 for m in masks]
    for layer, (mask, k) in enumerate(zip(masks, kept, strict=True)):
        assert mask.shape == SHAPE
        rate = k.mean()
        assert abs(rate - keep) <= SIGMAS * standard_error, f"layer {layer}: kept {rate:.4f}, expected {keep}"
        np.testing.assert_allclose(mask[k], 1.0 / keep, rtol=1e-6)  # inverted dropout: E[mask] = 1
        assert abs(mask.mean() - 1.0) <= SIGMAS * standard_error / keep
    # Two layers' masks are independent draws: both keep an entry with probability keep^2.
    both = (kept[0] & kept[1]).mean()
    assert abs(both - keep**2) <= SIGMAS * np.sqrt(keep**2 * (1 - keep**2) / draws), both


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_masks_follow_the_documented_recipe(dtype):
    cfg = _config(0.4, num_layers=4)
    key = jax.random.key(3)
    got = jcr.dropout.dropout_masks(key, cfg, (5, 3, 16), dtype)
    want = documented_dropout_masks(key, cfg, (5, 3, 16))
    assert len(got) == len(want) == 3
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype
        np.testing.assert_array_equal(np.asarray(g, np.float64) != 0, w != 0)
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=float(ml_dtypes.finfo(dtype).eps))


def test_no_masks_for_one_layer_and_different_keys_differ():
    assert jcr.dropout.dropout_masks(jax.random.key(0), _config(0.5, num_layers=1), SHAPE, jnp.float32) == []
    a, b = (
        jcr.dropout.dropout_masks(jax.random.key(k), _config(0.5, num_layers=2), SHAPE, jnp.float32)[0] for k in (0, 1)
    )
    assert 0.4 < float(jnp.mean((a != 0) != (b != 0))) < 0.6  # independent keys: half the entries disagree
