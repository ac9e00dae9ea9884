"""NNX state is canonical: ``nnx.state(model)`` saved with a plain ``ocp.StandardCheckpointer`` reads back, without
this library, as the named canonical tensors (the same arrays as the buffer's canonical view, and as PyTorch's
``weight_ih_l0`` rows); restoring into a model gives exactly the saved model's outputs; an optimizer's state is
canonical too."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from strict_promotion import OPTAX_ADAM, peer_promotion

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import interop
from jax_cudnn_rnn import nnx as jcr_nnx

B, T, I, H = 2, 5, 3, 4


def make(seed):
    return jcr_nnx.LSTM(I, H, num_layers=2, direction="bidirectional", rngs=nnx.Rngs(seed))


def test_plain_orbax_reads_named_canonical_tensors_and_restores_exactly(tmp_path):
    model = make(0)
    x = jax.random.normal(jax.random.key(1), (B, T, I))
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "ckpt", nnx.state(model))
    with ocp.StandardCheckpointer() as checkpointer:
        raw = checkpointer.restore(tmp_path / "ckpt")

    saved = raw["rnn_params"]
    # The canonical tensors by name, equal to the buffer's canonical view and to torch.nn.LSTM's state_dict rows.
    want = jcr.params_to_tree(model.params.buffer, model.config)
    for layer in ("layer_0", "layer_1"):
        for direction in ("forward", "backward"):
            for group in ("w_input", "w_recurrent", "b_recurrent"):  # nnx.LSTMCell's: its one bias, recurrent
                for gate in "ifgo":
                    got = saved[layer][direction][group][gate]["value"]
                    np.testing.assert_array_equal(got, want[layer][direction][group][gate])
            assert "b_input" not in saved[layer][direction]
    torch_state = interop.canonical_to_torch(*jcr.params_to_canonical(model.params.buffer, model.config), model.config)
    np.testing.assert_array_equal(
        saved["layer_1"]["backward"]["w_input"]["f"]["value"], torch_state["weight_ih_l1_reverse"][H : 2 * H]
    )

    fresh = make(5)
    assert not np.allclose(fresh(x), model(x))
    abstract = nnx.state(nnx.eval_shape(lambda: make(9)))
    with ocp.StandardCheckpointer() as checkpointer:
        nnx.update(fresh, checkpointer.restore(tmp_path / "ckpt", abstract))
    np.testing.assert_array_equal(fresh.params.buffer, model.params.buffer)
    np.testing.assert_array_equal(fresh(x), model(x))


def test_an_optimizer_state_is_canonical_too(tmp_path):
    model = make(0)
    x = jax.random.normal(jax.random.key(1), (B, T, I))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def step(m, opt):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(m)
        with peer_promotion(OPTAX_ADAM):
            opt.update(m, grads)
        return loss

    step(model, optimizer)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "opt", nnx.state(optimizer))
    with ocp.StandardCheckpointer() as checkpointer:
        raw = checkpointer.restore(tmp_path / "opt")
    mu = raw["opt_state"]["0"]["mu"]["rnn_params"]["layer_0"]["forward"]["w_recurrent"]["g"]["value"]
    assert mu.shape == (H, H) and np.abs(mu).max() > 0
