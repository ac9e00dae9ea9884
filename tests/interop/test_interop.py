"""Canonical <-> PyTorch state_dict and canonical <-> plain Flax cells: outputs equal both ways, errors named."""

import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jax_cudnn_rnn import interop, layout
from jax_cudnn_rnn.config import RNNConfig
from jax_cudnn_rnn.interop.flax_cells import FlaxCellStack

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import assert_outputs_close, import_or_skip, run_xla, torch_module

T, B, I, H = 5, 3, 4, 6
# Every mode and both directions, without the full product (each case compiles several scans on a small CPU).
CASES = [
    ("lstm", "unidirectional"),
    ("lstm", "bidirectional"),
    ("gru", "bidirectional"),
    ("rnn_tanh", "unidirectional"),
    ("rnn_relu", "bidirectional"),
]


def _inputs(config, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, B, config.input_size)).astype(np.float32)
    h0 = rng.standard_normal(config.state_shape(B)).astype(np.float32)
    c0 = rng.standard_normal(config.cell_shape(B)).astype(np.float32) if config.has_cell_state else None
    return x, h0, c0


# ------------------------------------------------------------------------------------------------------- PyTorch


def _torch_run(module, config, x, h0, c0):
    torch = import_or_skip("torch")
    # oneDNN's LSTM has no projection: PyTorch would try it, warn, and fall back to its own kernel, which is asked
    # for directly here (the same computation, without the warning).
    onednn = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = onednn and not module.proj_size
    try:
        with torch.no_grad():
            state = torch.from_numpy(h0) if c0 is None else (torch.from_numpy(h0), torch.from_numpy(c0))
            y, final = module(torch.from_numpy(x), state)
    finally:
        torch.backends.mkldnn.enabled = onednn
    if c0 is None:
        return y.numpy(), final.numpy(), None
    return y.numpy(), final[0].numpy(), final[1].numpy()


@pytest.mark.parametrize("mode,direction", CASES)
def test_torch_both_ways(mode, direction):
    config = RNNConfig(mode, num_layers=2, num_units=H, input_size=I, direction=direction)
    x, h0, c0 = _inputs(config)

    # ours -> torch: torch runs our weights.
    params = layout.init_params(jax.random.key(1), config)
    weights, biases = layout.params_to_canonical(params, config)
    state = interop.canonical_to_torch([np.asarray(w) for w in weights], [np.asarray(b) for b in biases], config)
    module = torch_module(config, state)
    assert list(state) == list(module.state_dict())  # same keys, same order
    assert_outputs_close(run_xla(params, config, x, h0, c0), _torch_run(module, config, x, h0, c0))

    # torch -> ours: we run torch's own initialisation.
    module = torch_module(config, seed=3)
    w, b = interop.torch_to_canonical(module.state_dict(), config)
    params = layout.canonical_to_params(w, b, config)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _torch_run(module, config, x, h0, c0))
    # and back to the same tensors
    again = interop.canonical_to_torch(w, b, config)
    for key, tensor in module.state_dict().items():
        np.testing.assert_array_equal(again[key], tensor.numpy())


def test_torch_projection_and_no_bias():
    config = RNNConfig("lstm", num_layers=2, num_units=H, input_size=I, direction="bidirectional", proj_size=3)
    module = torch_module(config, seed=4)
    assert "weight_hr_l1_reverse" in module.state_dict()
    x, h0, c0 = _inputs(config)
    params = layout.canonical_to_params(*interop.torch_to_canonical(module.state_dict(), config), config)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _torch_run(module, config, x, h0, c0))

    config = RNNConfig("gru", num_layers=1, num_units=H, input_size=I, bias_mode="none")
    module = torch_module(config, seed=5)
    x, h0, c0 = _inputs(config)
    params = layout.canonical_to_params(*interop.torch_to_canonical(module.state_dict(), config), config)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _torch_run(module, config, x, h0, c0))


def test_torch_bfloat16_tensors_both_ways():
    """bfloat16 torch tensors, which NumPy cannot hold natively, come back as bfloat16 canonical arrays bit for bit,
    and go back to torch bit for bit; rnn in bfloat16 on them agrees with torch's float32 run of the same weights."""
    torch = import_or_skip("torch")
    config = RNNConfig(
        "lstm", num_layers=2, num_units=H, input_size=I, direction="bidirectional", dtype=ml_dtypes.bfloat16
    )
    module = torch_module(config, seed=6).to(torch.bfloat16)
    tensors = module.state_dict()
    weights, biases = interop.torch_to_canonical(tensors, config)
    assert all(a.dtype == ml_dtypes.bfloat16 for a in weights + biases)
    back = interop.canonical_to_torch(weights, biases, config)
    assert list(back) == list(tensors)
    for key, tensor in tensors.items():
        np.testing.assert_array_equal(
            back[key].view(np.uint16), tensor.view(torch.int16).numpy().view(np.uint16), err_msg=key
        )
    params = layout.canonical_to_params(weights, biases, config)
    x, h0, c0 = _inputs(config, seed=7)
    x, h0, c0 = (a.astype(ml_dtypes.bfloat16) for a in (x, h0, c0))
    ours = run_xla(params, config, x, h0, c0)
    theirs = _torch_run(module.float(), config, *(a.astype(np.float32) for a in (x, h0, c0)))
    assert_outputs_close([a.astype(np.float32) for a in ours], theirs, atol=3e-2, rtol=3e-2)


def test_torch_errors_name_the_problem():
    config = RNNConfig("lstm", num_layers=2, num_units=H, input_size=I)
    weights, biases = layout.params_to_canonical(layout.init_params(jax.random.key(0), config), config)
    state = interop.canonical_to_torch(weights, biases, config)
    with pytest.raises(ValueError, match=r"missing \['bias_hh_l1'\], unexpected \['bias_hh_l9'\]"):
        interop.torch_to_canonical(
            {**{k: v for k, v in state.items() if k != "bias_hh_l1"}, "bias_hh_l9": state["bias_hh_l0"]}, config
        )
    with pytest.raises(ValueError, match=r"state_dict\['weight_ih_l0'\] has shape \(24, 5\); expected \(24, 4\)"):
        interop.torch_to_canonical({**state, "weight_ih_l0": np.zeros((24, 5), np.float32)}, config)
    with pytest.raises(ValueError, match=r"skip_input.*no PyTorch equivalent"):
        interop.canonical_to_torch([], [], RNNConfig("gru", 1, H, H, input_mode="skip_input"))
    with pytest.raises(
        ValueError,
        match=r"weights\[1\] \(layer_0/forward/w_input/f\) has shape \(6, 3\); "
        r"expected \(6, 4\)",
    ):
        interop.canonical_to_torch([weights[0], np.zeros((6, 3)), *weights[2:]], biases, config)


# ---------------------------------------------------------------------------------------------------------- Flax


def _flax_run(params, config, x, h0, c0, seq_lengths=None):
    model = FlaxCellStack(**interop.flax_stack_kwargs(config), time_major=True)
    y, (h_n, c_n) = model.apply(
        {"params": params},
        jnp.asarray(x),
        seq_lengths=None if seq_lengths is None else jnp.asarray(seq_lengths),
        initial_state=(jnp.asarray(h0), None if c0 is None else jnp.asarray(c0)),
        return_state=True,
    )
    return np.asarray(y), np.asarray(h_n), None if c_n is None else np.asarray(c_n)


@pytest.mark.parametrize("mode,direction", CASES)
def test_flax_both_ways(mode, direction):
    config = RNNConfig(mode, num_layers=2, num_units=H, input_size=I, direction=direction)
    x, h0, c0 = _inputs(config, seed=2)
    lengths = np.array([T, 2, 4], np.int32)

    # ours -> Flax, with and without seq_lengths
    params = layout.init_params(jax.random.key(2), config)
    flax_params = interop.canonical_to_flax(*layout.params_to_canonical(params, config), config)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _flax_run(flax_params, config, x, h0, c0))
    assert_outputs_close(
        run_xla(params, config, x, h0, c0, lengths), _flax_run(flax_params, config, x, h0, c0, lengths)
    )

    # Flax's own initialisation -> ours (biases made non-zero so the bias path is exercised)
    model = FlaxCellStack(**interop.flax_stack_kwargs(config), time_major=True)
    init = model.init(jax.random.key(5), jnp.asarray(x))["params"]
    init = jax.tree_util.tree_map_with_path(
        lambda path, v: (
            v + 0.1 * jax.random.normal(jax.random.key(len(str(path))), v.shape)
            if "bias" in jax.tree_util.keystr(path)
            else v
        ),
        init,
    )
    w, b = interop.flax_to_canonical({"params": init}, config)
    params = layout.canonical_to_params(w, b, config)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _flax_run(init, config, x, h0, c0))


def test_flax_skip_input_and_single_bias():
    config = RNNConfig("lstm", num_layers=2, num_units=H, input_size=H, input_mode="skip_input")
    x, h0, c0 = _inputs(config, seed=3)
    params = layout.init_params(jax.random.key(3), config)
    flax_params = interop.canonical_to_flax(*layout.params_to_canonical(params, config), config)
    np.testing.assert_array_equal(flax_params["layer_0"]["cell"]["ii"]["kernel"], np.eye(H))
    assert_outputs_close(run_xla(params, config, x, h0, c0), _flax_run(flax_params, config, x, h0, c0))
    back = layout.canonical_to_params(*interop.flax_to_canonical(flax_params, config), config)
    assert_outputs_close(run_xla(params, config, x, h0, c0), run_xla(back, config, x, h0, c0))
    flax_params["layer_0"]["cell"]["ii"]["kernel"] = flax_params["layer_0"]["cell"]["ii"]["kernel"] * 2
    with pytest.raises(ValueError, match="layer_0/cell/ii/kernel is not representable: skip input"):
        interop.flax_to_canonical(flax_params, config)

    config = RNNConfig("gru", num_layers=1, num_units=H, input_size=I, bias_mode="single_recurrent")
    x, h0, c0 = _inputs(config, seed=4)
    params = layout.init_params(jax.random.key(4), config)
    flax_params = interop.canonical_to_flax(*layout.params_to_canonical(params, config), config)
    assert_outputs_close(run_xla(params, config, x, h0, c0), _flax_run(flax_params, config, x, h0, c0))
    back = layout.canonical_to_params(*interop.flax_to_canonical(flax_params, config), config)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(params))  # exact: nothing was summed


def test_flax_errors_name_the_problem():
    config = RNNConfig("gru", num_layers=2, num_units=H, input_size=I, direction="bidirectional")
    flax_params = interop.canonical_to_flax(
        *layout.params_to_canonical(layout.init_params(jax.random.key(0), config), config), config
    )
    broken = jax.tree_util.tree_map(lambda v: v, flax_params)
    del broken["layer_1"]["backward_rnn"]["cell"]["hz"]
    with pytest.raises(ValueError, match=r"missing \['layer_1/backward_rnn/cell/hz/kernel'\]"):
        interop.flax_to_canonical(broken, config)
    broken = jax.tree_util.tree_map(lambda v: v, flax_params)
    broken["layer_0"]["forward_rnn"]["cell"]["ir"]["kernel"] = np.zeros((5, H), np.float32)
    with pytest.raises(ValueError, match=r"layer_0/forward_rnn/cell/ir/kernel has shape \(5, 6\); expected \(4, 6\)"):
        interop.flax_to_canonical(broken, config)
    with pytest.raises(ValueError, match="proj_size=2 has no plain-Flax"):
        interop.canonical_to_flax([], [], RNNConfig("lstm", 1, H, I, proj_size=2))
    none = RNNConfig("rnn_tanh", 1, H, I, bias_mode="none")
    flax_params = FlaxCellStack("rnn_tanh", H).init(jax.random.key(0), jnp.ones((1, 2, I)))["params"]
    flax_params["layer_0"]["cell"]["i"]["bias"] = jnp.full((H,), 0.5)
    with pytest.raises(ValueError, match="layer_0/cell/i/bias is not representable: bias_mode 'none'"):
        interop.flax_to_canonical(flax_params, none)


@pytest.mark.parametrize(
    "call",
    [
        lambda c: interop.torch_module_kwargs(c),
        lambda c: interop.torch_module_name(c),
        lambda c: interop.canonical_to_torch([], [], c),
        lambda c: interop.torch_to_canonical({}, c),
        lambda c: interop.canonical_to_flax([], [], c),
        lambda c: interop.flax_to_canonical({}, c),
        lambda c: interop.flax_stack_kwargs(c),
        lambda c: interop.canonical_to_keras([], [], c),
        lambda c: interop.keras_to_canonical([], c),
        lambda c: interop.keras_layers(c),
        lambda c: interop.canonical_to_equinox([], [], c),
        lambda c: interop.equinox_to_canonical([], c),
    ],
)
@pytest.mark.parametrize("config", [None, "lstm"])
def test_converters_name_a_config_that_is_not_one(call, config):
    """Every converter checks its config first: a TypeError naming it, not an AttributeError from inside."""
    # torch_to_canonical takes config=None with a torch module and says so
    expected = f"config (must be an RNNConfig, got {type(config).__name__}|is None; pass the RNNConfig)"
    with pytest.raises(TypeError, match=expected):
        call(config)
