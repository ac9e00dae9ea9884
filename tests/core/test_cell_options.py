"""RNNConfig's cell options of issue 40 (``activation``, ``recurrent_activation``, ``recurrent_dropout``, mode
"gru_reset_before"): how they are checked and stored, how a config serialises (old checkpoints' configs still load,
new ones of default configs stay readable by older readers, a callable is refused by name), a checkpoint round trip
that keeps them, and the recurrent-dropout masks' statistics against docs/architecture.md."""

from __future__ import annotations

import dataclasses
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import checkpoint as ckpt
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.params import RNNParams

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import documented_dropout_masks, documented_recurrent_masks


def test_activations_are_stored_as_none_for_the_cells_own():
    assert RNNConfig("lstm", 1, 4, 3, activation="tanh", recurrent_activation="sigmoid") == RNNConfig("lstm", 1, 4, 3)
    cfg = RNNConfig("gru", 1, 4, 3, activation="swish", recurrent_activation="hard_swish")
    assert (cfg.activation, cfg.recurrent_activation) == ("silu", "hard_silu")  # Keras's aliases resolved
    assert not cfg.default_activations
    # the vanilla RNN's mode is its activation where cuDNN has it
    assert RNNConfig("rnn_tanh", 1, 4, 3, activation="relu") == RNNConfig("rnn_relu", 1, 4, 3)
    assert RNNConfig("rnn_relu", 1, 4, 3, activation="tanh") == RNNConfig("rnn_tanh", 1, 4, 3)
    other = RNNConfig("rnn_tanh", 1, 4, 3, activation="selu")
    assert (other.mode, other.activation) == ("rnn_tanh", "selu")
    assert RNNConfig("gru_reset_before", 1, 4, 3).gate_names == ("r", "z", "n")


@pytest.mark.parametrize(
    "kw,error,message",
    [
        (dict(activation="softmax"), ValueError, r"activation is 'softmax'; expected None \(the cell's own\)"),
        (dict(recurrent_activation=3), TypeError, "recurrent_activation must be None, an activation's name or a"),
        (dict(mode="rnn_tanh", recurrent_activation="sigmoid"), ValueError, "mode 'rnn_tanh' has no gates"),
        (dict(recurrent_dropout=1.0), ValueError, r"recurrent_dropout must be in \[0, 1\), got 1.0"),
        (dict(recurrent_dropout="0.1"), TypeError, "recurrent_dropout must be a float, got str"),
        (dict(mode="gru_after"), ValueError, "mode is 'gru_after'; expected one of .*'gru_reset_before'"),
    ],
)
def test_bad_options_are_named(kw, error, message):
    kw = {"mode": "lstm", **kw}
    with pytest.raises(error, match=message):
        RNNConfig(num_layers=1, num_units=4, input_size=3, **kw)


def test_json_round_trip_old_configs_and_callables():
    cfg = RNNConfig(
        "gru_reset_before", 2, 4, 3, activation="relu", recurrent_activation="hard_sigmoid", recurrent_dropout=0.25
    )
    assert RNNConfig.from_json(cfg.to_json()) == cfg
    # a default config writes exactly the fields of format version 1 (older readers refuse unknown fields)
    plain = RNNConfig("lstm", 2, 4, 3).to_json()
    assert not {"activation", "recurrent_activation", "recurrent_dropout"} & set(plain)
    assert RNNConfig.from_json(plain) == RNNConfig("lstm", 2, 4, 3)  # and such a config (any old one) still loads
    given = RNNConfig("lstm", 1, 4, 3, activation=jax.nn.soft_sign)
    assert hash(given) == hash(RNNConfig("lstm", 1, 4, 3, activation=jax.nn.soft_sign))
    with pytest.raises(TypeError, match=r"activation is the callable jax.*soft_sign, which a checkpoint or JSON"):
        given.to_json()


def test_checkpoint_keeps_the_options_and_refuses_a_callable(tmp_path):
    cfg = RNNConfig("gru_reset_before", 1, 4, 3, bias_mode="single_input", activation="softsign", recurrent_dropout=0.3)
    state = {"rnn": RNNParams.init(jax.random.key(0), cfg)}
    with ocp.Checkpointer(ckpt.CanonicalCheckpointHandler()) as checkpointer:
        checkpointer.save(tmp_path / "ckpt", args=ckpt.CanonicalSave(state))
        assert ckpt.CanonicalCheckpointHandler().saved_configs(tmp_path / "ckpt") == {"rnn": cfg}
        restored = checkpointer.restore(tmp_path / "ckpt")
        assert restored["rnn"].config == cfg
        np.testing.assert_array_equal(restored["rnn"].buffer, state["rnn"].buffer)
        # a GRU of the other kind has the same tensors but other math: the mode differs, named
        other = {"rnn": RNNParams.init(jax.random.key(1), dataclasses.replace(cfg, mode="gru"))}
        with pytest.raises(ValueError, match=r"mode: checkpoint 'gru_reset_before' vs target 'gru'"):
            checkpointer.restore(tmp_path / "ckpt", args=ckpt.CanonicalRestore(other))
        lam = {"rnn": RNNParams.init(jax.random.key(0), dataclasses.replace(cfg, activation=jnp.tanh))}
        with pytest.raises(TypeError, match="activation is the callable"):
            checkpointer.save(tmp_path / "lam", args=ckpt.CanonicalSave(lam))


# ----------------------------------------------------------------------------------------------------------------------
# The recurrent-dropout masks.
# ----------------------------------------------------------------------------------------------------------------------

SIGMAS = 6.0


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.8])
def test_recurrent_masks_keep_the_rate_scale_and_are_independent(rate):
    cfg = RNNConfig("lstm", 2, 256, 8, direction="bidirectional", recurrent_dropout=rate)
    batch = 128
    masks = np.asarray(jcr.dropout.recurrent_masks(jax.random.key(3), cfg, batch), np.float64)
    assert masks.shape == (4, 4, batch, 256)  # [L*D, G, B, hidden]
    keep, draws = 1.0 - rate, batch * 256
    kept = masks != 0
    np.testing.assert_allclose(masks[kept], 1.0 / keep, rtol=1e-6)
    for index in range(4):
        for gate in range(4):
            share = kept[index, gate].mean()
            assert abs(share - keep) <= SIGMAS * np.sqrt(keep * (1 - keep) / draws), (index, gate, share)
    both = (kept[0, 0] & kept[0, 1]).mean()  # two gates' masks are independent draws
    assert abs(both - keep**2) <= SIGMAS * np.sqrt(keep**2 * (1 - keep**2) / draws)
    both = (kept[0, 0] & kept[3, 0]).mean()  # two layers' and directions' likewise
    assert abs(both - keep**2) <= SIGMAS * np.sqrt(keep**2 * (1 - keep**2) / draws)


def test_recurrent_masks_follow_the_documented_recipe_apart_from_the_inter_layer_ones():
    cfg = RNNConfig("gru", 3, 16, 8, direction="bidirectional", dropout=0.5, recurrent_dropout=0.5, proj_size=0)
    key = jax.random.key(9)
    got = np.asarray(jcr.dropout.recurrent_masks(key, cfg, 5), np.float64)
    np.testing.assert_array_equal(got, documented_recurrent_masks(key, cfg, 5))
    between = documented_dropout_masks(key, cfg, (1, 5, cfg.output_size))
    assert not np.array_equal(got[0, 0] != 0, between[0][0, :, :16] != 0)  # another stream of the key
    other = np.asarray(jcr.dropout.recurrent_masks(jax.random.key(10), cfg, 5))
    assert 0.35 < np.mean((got != 0) != (other != 0)) < 0.65
    projected = RNNConfig("lstm", 1, 8, 3, proj_size=3, recurrent_dropout=0.5)
    assert jcr.dropout.recurrent_masks(key, projected, 2).shape == (1, 4, 2, 3)  # on h, P wide
