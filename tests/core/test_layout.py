"""The opaque buffer layout and the canonical format, checked against numbers and orders derived by hand from
docs/architecture.md (never from the layout code), plus RNNConfig validation."""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import RNNConfig, _buffer, layout

# ----------------------------------------------------------------------------------------------------------------------
# params_size, hand-computed. Per layer and direction: G*H*in_l (input matrices, absent on layer 0 with skip input)
# + G*H*hidden (recurrent) [+ P*H projection] + 2*G*H (double bias).
# ----------------------------------------------------------------------------------------------------------------------

SIZES = [
    # LSTM L=1 I=3 H=2 uni: 4*2*3 + 4*2*2 + 2*4*2 = 24 + 16 + 16 = 56
    (dict(mode="lstm", num_layers=1, num_units=2, input_size=3), 56),
    # GRU L=1 I=H=4 skip uni: no input matrices; 3*4*4 + 2*3*4 = 48 + 24 = 72
    (dict(mode="gru", num_layers=1, num_units=4, input_size=4, input_mode="skip_input"), 72),
    # same GRU with linear input: + 3*4*4 = 48 -> 120
    (dict(mode="gru", num_layers=1, num_units=4, input_size=4, input_mode="linear_input"), 120),
    # RNN tanh L=2 I=3 H=2 bi: layer 0 per dir 1*2*3 + 1*2*2 + 2*1*2 = 6+4+4 = 14, x2 = 28;
    #   layer 1 in = 2*2 = 4: 1*2*4 + 4 + 4 = 16, x2 = 32; total 60
    (dict(mode="rnn_tanh", num_layers=2, num_units=2, input_size=3, direction="bidirectional"), 60),
    # LSTM L=2 I=5 H=3 bi: layer 0 per dir 4*3*5 + 4*3*3 + 2*4*3 = 60+36+24 = 120, x2 = 240;
    #   layer 1 in = 6: 4*3*6 + 36 + 24 = 72+36+24 = 132, x2 = 264; total 504
    (dict(mode="lstm", num_layers=2, num_units=3, input_size=5, direction="bidirectional"), 504),
    # GRU L=3 I=H=2 skip bi: layer 0 per dir 3*2*2 + 2*3*2 = 12+12 = 24, x2 = 48;
    #   layers 1, 2 in = 4: 3*2*4 + 12 + 12 = 48 per dir, x2 dirs x2 layers = 192; total 240
    (
        dict(mode="gru", num_layers=3, num_units=2, input_size=2, direction="bidirectional", input_mode="skip_input"),
        240,
    ),
    # RNN relu L=1 I=1 H=1: 1 + 1 + 2 = 4
    (dict(mode="rnn_relu", num_layers=1, num_units=1, input_size=1), 4),
    # RNN relu L=3 I=2 H=3 uni: layer 0 3*2 + 9 + 6 = 21; layers 1, 2 in = 3: 9 + 9 + 6 = 24 each; total 69
    (dict(mode="rnn_relu", num_layers=3, num_units=3, input_size=2), 69),
    # LSTM projection L=1 I=3 H=4 P=2: 4*4*3 + 4*4*2 (R is [H, P]) + 2*4 (W_proj [P, H]) + 2*4*4 = 48+32+8+32 = 120
    (dict(mode="lstm", num_layers=1, num_units=4, input_size=3, proj_size=2), 120),
    # LSTM L=1 I=3 H=2, no bias: 24 + 16 = 40; single bias: 40 + 4*2 = 48
    (dict(mode="lstm", num_layers=1, num_units=2, input_size=3, bias_mode="none"), 40),
    (dict(mode="lstm", num_layers=1, num_units=2, input_size=3, bias_mode="single_input"), 48),
    (dict(mode="lstm", num_layers=1, num_units=2, input_size=3, bias_mode="single_recurrent"), 48),
]


@pytest.mark.parametrize("kwargs,expected", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_params_size_hand_computed(kwargs, expected, dtype):
    cfg = RNNConfig(dtype=dtype, **kwargs)
    assert jcr.params_size(cfg) == expected
    assert jcr.init_params(jax.random.key(0), cfg).shape == (expected,)
    assert jcr.init_params(jax.random.key(0), cfg).dtype == np.dtype(dtype)


def hand_shapes(mode, L, H, I, D, skip, proj=0):
    """Canonical (weight shapes, bias shapes) written out from docs/architecture.md."""
    G = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}[mode]
    hidden = proj or H
    w, b = [], []
    for layer in range(L):
        in_l = I if layer == 0 else D * hidden
        for _ in range(D):
            if not (skip and layer == 0):
                w += [(H, in_l)] * G
            w += [(H, hidden)] * G
            if proj:
                w += [(proj, H)]
            b += [(H,)] * (2 * G)
    return w, b


CONFIGS = [
    RNNConfig("lstm", 2, 3, 2, direction="bidirectional"),
    RNNConfig("gru", 3, 2, 2, direction="bidirectional", input_mode="skip_input"),
    RNNConfig("rnn_tanh", 1, 4, 3),
    RNNConfig("rnn_relu", 2, 2, 2, input_mode="skip_input"),
    RNNConfig("lstm", 1, 3, 3, input_mode="skip_input", direction="bidirectional"),
    RNNConfig("lstm", 2, 4, 3, proj_size=2, direction="bidirectional"),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_canonical_shapes_and_buffer_order(cfg):
    """The buffer is every matrix (canonical order, row-major) then every bias (canonical order), nothing else."""
    w_shapes, b_shapes = hand_shapes(
        cfg.mode, cfg.num_layers, cfg.num_units, cfg.input_size, cfg.num_directions, cfg.skip_input, cfg.proj_size
    )
    weights, biases = jcr.params_to_canonical(jnp.arange(jcr.params_size(cfg), dtype=jnp.float32), cfg)
    assert [tuple(w.shape) for w in weights] == w_shapes
    assert [tuple(b.shape) for b in biases] == b_shapes
    # With the buffer = arange, tensor k must hold the next consecutive run of integers, row-major.
    expected = 0
    for tensor in list(weights) + list(biases):
        n = int(np.prod(tensor.shape))
        np.testing.assert_array_equal(np.asarray(tensor), np.arange(expected, expected + n).reshape(tensor.shape))
        expected += n
    assert expected == jcr.params_size(cfg)
    # And the slots agree: every matrix before every bias, offsets increasing.
    w_slots, b_slots = jcr.layout.param_slots(cfg)
    assert max(s.offset for s in w_slots) < min(s.offset for s in b_slots)
    offsets = [s.offset for s in w_slots + b_slots]
    assert offsets == sorted(offsets) and offsets[0] == 0


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_canonical_to_params_is_concatenation(cfg):
    rng = np.random.default_rng(0)
    w_shapes, b_shapes = hand_shapes(
        cfg.mode, cfg.num_layers, cfg.num_units, cfg.input_size, cfg.num_directions, cfg.skip_input, cfg.proj_size
    )
    weights = [rng.normal(size=s).astype(np.float32) for s in w_shapes]
    biases = [rng.normal(size=s).astype(np.float32) for s in b_shapes]
    params = jcr.canonical_to_params(weights, biases, cfg)
    np.testing.assert_array_equal(np.asarray(params), np.concatenate([a.ravel() for a in weights + biases]))


DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]


@pytest.mark.parametrize("cfg,dtype", list(itertools.product(CONFIGS, DTYPES)), ids=str)
def test_round_trips_are_bit_identical(cfg, dtype):
    cfg = dataclasses.replace(cfg, dtype=dtype)
    params = jcr.init_params(jax.random.key(1), cfg)
    weights, biases = jcr.params_to_canonical(params, cfg)
    again = jcr.canonical_to_params(weights, biases, cfg)
    assert again.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(again).view(np.uint8), np.asarray(params).view(np.uint8))
    tree = jcr.params_to_tree(params, cfg)
    np.testing.assert_array_equal(
        np.asarray(jcr.tree_to_params(tree, cfg)).view(np.uint8), np.asarray(params).view(np.uint8)
    )
    # tree as NumPy arrays (what a checkpoint reader would hand back) also round-trips
    np_tree = jax.tree_util.tree_map(np.asarray, tree)
    np.testing.assert_array_equal(
        np.asarray(jcr.tree_to_params(np_tree, cfg)).view(np.uint8), np.asarray(params).view(np.uint8)
    )


def test_float64_round_trip():
    with jax.enable_x64(True):
        cfg = RNNConfig("gru", 2, 3, 2, direction="bidirectional", dtype=np.float64)
        params = jcr.init_params(jax.random.key(1), cfg)
        assert params.dtype == np.float64
        again = jcr.canonical_to_params(*jcr.params_to_canonical(params, cfg), cfg)
        np.testing.assert_array_equal(np.asarray(again), np.asarray(params))


def test_named_tree_paths():
    cfg = RNNConfig("lstm", 2, 2, 2, direction="bidirectional", input_mode="skip_input")
    params = jnp.arange(jcr.params_size(cfg), dtype=jnp.float32)
    tree = jcr.params_to_tree(params, cfg)
    weights, biases = jcr.params_to_canonical(params, cfg)
    assert sorted(tree) == ["layer_0", "layer_1"]
    assert sorted(tree["layer_0"]) == ["backward", "forward"]
    # skip input: layer 0 has no input matrices
    assert "w_input" not in tree["layer_0"]["forward"]
    assert sorted(tree["layer_0"]["forward"]) == ["b_input", "b_recurrent", "w_recurrent"]
    assert sorted(tree["layer_1"]["backward"]["w_input"]) == ["f", "g", "i", "o"]
    # canonical order: layer 0 forward R_i..R_o (4), layer 0 backward R (4), layer 1 forward W_i.. (index 8)
    np.testing.assert_array_equal(tree["layer_0"]["forward"]["w_recurrent"]["i"], weights[0])
    np.testing.assert_array_equal(tree["layer_0"]["backward"]["w_recurrent"]["o"], weights[7])
    np.testing.assert_array_equal(tree["layer_1"]["forward"]["w_input"]["i"], weights[8])
    np.testing.assert_array_equal(tree["layer_1"]["forward"]["w_recurrent"]["f"], weights[13])
    assert tree["layer_1"]["forward"]["w_input"]["i"].shape == (2, 4)
    # biases: per pseudo-layer 4 input then 4 recurrent
    np.testing.assert_array_equal(tree["layer_0"]["forward"]["b_recurrent"]["i"], biases[4])
    np.testing.assert_array_equal(tree["layer_1"]["backward"]["b_input"]["g"], biases[26])
    # the first bias starts right after all matrices. Layer 0: 2 dirs x 4 recurrent [2, 2] = 32; layer 1 (in = 4):
    # 2 dirs x (4 x [2, 4] + 4 x [2, 2]) = 2 x (32 + 16) = 96; so biases[0] == [128, 129]
    np.testing.assert_array_equal(biases[0], [128.0, 129.0])


# ----------------------------------------------------------------------------------------------------------------------
# Error messages.
# ----------------------------------------------------------------------------------------------------------------------

ERR_CFG = RNNConfig("gru", 1, 2, 3)  # weights: 3 x [2,3], 3 x [2,2]; biases 6 x [2]


def _canonical():
    return jcr.params_to_canonical(jcr.init_params(jax.random.key(0), ERR_CFG), ERR_CFG)


def test_canonical_to_params_wrong_count():
    w, b = _canonical()
    with pytest.raises(ValueError, match=r"weights has 5 tensors; expected 6"):
        jcr.canonical_to_params(w[:5], b, ERR_CFG)
    with pytest.raises(ValueError, match=r"biases has 7 tensors; expected 6"):
        jcr.canonical_to_params(w, [*b, b[0]], ERR_CFG)


def test_canonical_to_params_wrong_shape_names_tensor():
    w, b = _canonical()
    w = list(w)
    w[4] = jnp.zeros((2, 3), jnp.float32)  # R_z of layer 0 forward should be [2, 2]
    with pytest.raises(
        ValueError,
        match=r"weights\[4\] \(layer_0/forward/w_recurrent/z\) has shape \(2, 3\); "
        r"expected \(2, 2\)",
    ):
        jcr.canonical_to_params(w, b, ERR_CFG)


def test_canonical_to_params_wrong_dtype_names_tensor():
    w, b = _canonical()
    b = list(b)
    b[5] = b[5].astype(jnp.float16)
    with pytest.raises(
        TypeError,
        match=r"biases\[5\] \(layer_0/forward/b_recurrent/n\) has dtype float16; "
        r"expected float32",
    ):
        jcr.canonical_to_params(w, b, ERR_CFG)


def test_params_to_canonical_wrong_buffer():
    with pytest.raises(ValueError, match=r"shape \(10,\); expected \(42,\)"):  # 3*2*3 + 3*2*2 + 2*3*2 = 18+12+12
        jcr.params_to_canonical(jnp.zeros((10,), jnp.float32), ERR_CFG)
    with pytest.raises(TypeError, match="dtype float16; expected float32"):
        jcr.params_to_canonical(jnp.zeros((42,), jnp.float16), ERR_CFG)


def test_tree_to_params_names_missing_and_extra_paths():
    tree = jcr.params_to_tree(jcr.init_params(jax.random.key(0), ERR_CFG), ERR_CFG)
    del tree["layer_0"]["forward"]["w_input"]["r"]
    tree["layer_0"]["forward"]["w_input"]["q"] = jnp.zeros((2, 3))
    with pytest.raises(
        ValueError,
        match=r"missing \['layer_0/forward/w_input/r'\].*unexpected "
        r"\['layer_0/forward/w_input/q'\]",
    ):
        jcr.tree_to_params(tree, ERR_CFG)


def test_tree_to_params_wrong_shape():
    tree = jcr.params_to_tree(jcr.init_params(jax.random.key(0), ERR_CFG), ERR_CFG)
    tree["layer_0"]["forward"]["b_input"]["z"] = jnp.zeros((3,), jnp.float32)
    with pytest.raises(ValueError, match=r"layer_0/forward/b_input/z.*has shape \(3,\); expected \(2,\)"):
        jcr.tree_to_params(tree, ERR_CFG)


# ----------------------------------------------------------------------------------------------------------------------
# RNNConfig.
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,error,pattern",
    [
        (dict(mode="lstmx"), ValueError, "mode is 'lstmx'"),
        (dict(num_layers=0), ValueError, "num_layers must be >= 1, got 0"),
        (dict(num_layers=1.5), TypeError, "num_layers must be an int"),
        (dict(num_units=0), ValueError, "num_units must be >= 1"),
        (dict(input_mode="skip_input", input_size=3), ValueError, "skip_input' needs input_size == num_units"),
        (dict(input_mode="sometimes"), ValueError, "input_mode is 'sometimes'"),
        (dict(direction="both"), ValueError, "direction is 'both'"),
        (dict(dropout=1.0), ValueError, r"dropout must be in \[0, 1\), got 1.0"),
        (dict(dropout=-0.1), ValueError, r"dropout must be in \[0, 1\)"),
        (dict(dropout="0.5"), TypeError, "dropout must be a float"),
        (dict(dtype=np.int32), TypeError, "dtype is int32"),
        (dict(dtype="complex64"), TypeError, "dtype is complex64"),
        (dict(proj_size=4), ValueError, "proj_size must be 0"),
        (dict(mode="gru", proj_size=2), ValueError, "projection exists only for mode 'lstm'"),
        (dict(cell_clip=-1.0), ValueError, "cell_clip must be None or a finite value > 0"),
        (dict(bias_mode="triple"), ValueError, "bias_mode is 'triple'"),
    ],
)
def test_config_validation(kwargs, error, pattern):
    base = dict(mode="lstm", num_layers=1, num_units=4, input_size=4)
    with pytest.raises(error, match=pattern):
        RNNConfig(**{**base, **kwargs})


def test_auto_select_resolution():
    assert RNNConfig("gru", 1, 4, 4, input_mode="auto_select").input_mode == "skip_input"
    assert RNNConfig("gru", 1, 4, 3, input_mode="auto_select").input_mode == "linear_input"
    # resolved configs are equal to the explicit ones and size accordingly: 3*4*4 + 2*3*4 = 72 (skip)
    assert RNNConfig("gru", 1, 4, 4, input_mode="auto_select") == RNNConfig("gru", 1, 4, 4, input_mode="skip_input")
    assert jcr.params_size(RNNConfig("gru", 1, 4, 4, input_mode="auto_select")) == 72


def test_config_normalises_and_is_hashable():
    a = RNNConfig("lstm", np.int64(2), 3, 2, dtype="float32", dropout=0)
    b = RNNConfig("lstm", 2, 3, 2, dtype=jnp.float32, dropout=0.0)
    assert a == b and hash(a) == hash(b)
    assert {a: 1}[b] == 1
    assert a.dtype == np.dtype(np.float32) and isinstance(a.num_layers, int)
    assert RNNConfig.from_json(a.to_json()) == a
    assert a != dataclasses.replace(a, dropout=0.5)


def test_config_as_jit_static_argument_does_not_retrace_for_equal_configs():
    traces = []

    f = jax.jit(lambda x, cfg: (traces.append(cfg), x * jcr.params_size(cfg))[1], static_argnums=1)
    c1 = RNNConfig("lstm", 1, 2, 3)
    c2 = RNNConfig("lstm", 1, 2, 3, dtype="float32")
    assert float(f(jnp.float32(1.0), c1)) == 56.0
    assert float(f(jnp.float32(1.0), c2)) == 56.0
    assert len(traces) == 1
    assert float(f(jnp.float32(1.0), RNNConfig("lstm", 1, 2, 3, direction="bidirectional"))) == 112.0
    assert len(traces) == 2


def test_init_params_range_and_determinism():
    cfg = RNNConfig("gru", 2, 4, 3)
    a = np.asarray(jcr.init_params(jax.random.key(0), cfg))
    b = np.asarray(jcr.init_params(jax.random.key(0), cfg))
    c = np.asarray(jcr.init_params(jax.random.key(1), cfg))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # PyTorch's U(-1/sqrt(H), 1/sqrt(H)) = U(-0.5, 0.5) for H = 4
    assert np.abs(a).max() <= 0.5 and np.abs(a).max() > 0.4
    assert np.abs(np.asarray(jcr.init_params(jax.random.key(0), cfg, scale=0.1))).max() <= 0.1


@settings(max_examples=20, deadline=None)
@given(
    mode=st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]),
    num_layers=st.integers(1, 4),
    num_units=st.integers(1, 6),
    input_size=st.integers(1, 6),
    bidirectional=st.booleans(),
    skip=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_configs_size_and_concatenation(mode, num_layers, num_units, input_size, bidirectional, skip, seed):
    """params_size is the formula of docs/architecture.md and canonical_to_params is plain concatenation, for random
    configs."""
    if skip:
        input_size = num_units
    cfg = RNNConfig(
        mode,
        num_layers,
        num_units,
        input_size,
        direction="bidirectional" if bidirectional else "unidirectional",
        input_mode="skip_input" if skip else "linear_input",
    )
    G = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}[mode]
    D, H = (2 if bidirectional else 1), num_units
    formula = sum(
        D * ((0 if (skip and layer == 0) else G * H * (input_size if layer == 0 else D * H)) + G * H * H + 2 * G * H)
        for layer in range(num_layers)
    )
    assert jcr.params_size(cfg) == formula
    w_shapes, b_shapes = hand_shapes(mode, num_layers, H, input_size, D, skip)
    rng = np.random.default_rng(seed)
    weights = [rng.normal(size=s).astype(np.float32) for s in w_shapes]
    biases = [rng.normal(size=s).astype(np.float32) for s in b_shapes]
    params = np.asarray(jcr.canonical_to_params(weights, biases, cfg))
    np.testing.assert_array_equal(params, np.concatenate([a.ravel() for a in weights + biases]))
    back_w, back_b = jcr.params_to_canonical(jnp.asarray(params), cfg)
    for a, b in zip(weights + biases, list(back_w) + list(back_b), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "cfg",
    [
        jcr.RNNConfig(mode="lstm", num_layers=3, num_units=5, input_size=4, direction="bidirectional", proj_size=2),
        jcr.RNNConfig(
            mode="gru", num_layers=2, num_units=6, input_size=6, input_mode="skip_input", bias_mode="single_recurrent"
        ),
        jcr.RNNConfig(
            mode="rnn_relu", num_layers=2, num_units=3, input_size=7, direction="bidirectional", bias_mode="none"
        ),
    ],
    ids=["lstm-bi-proj", "gru-skip-single", "relu-bi-nobias"],
)
def test_sub_params_hold_the_layers_canonical_tensors(cfg):
    """A layer's buffer (both directions, as the cuDNN dropout path runs it) and one direction's (as the chunked
    bidirectional path runs it) carry exactly those canonical weights and biases."""
    params = jcr.init_params(jax.random.key(3), cfg)
    weights, biases = jcr.params_to_canonical(params, cfg)
    weight_slots, bias_slots = jcr.layout.param_slots(cfg)
    for layer, direction in itertools.product(range(cfg.num_layers), (None, *range(cfg.num_directions))):
        single = _buffer.sub_config(cfg, layer, direction)
        assert single.num_layers == 1 and single.input_size == cfg.layer_input_size(layer)
        assert single.direction == (cfg.direction if direction is None else "unidirectional")
        part = _buffer.sub_params(params, cfg, layer, direction)
        assert part.shape == (jcr.params_size(single),)
        got_w, got_b = jcr.params_to_canonical(part, single)
        want_w = [
            w
            for w, slot in zip(weights, weight_slots, strict=True)
            if slot.layer == layer and direction in (None, slot.direction)
        ]
        want_b = [
            b
            for b, slot in zip(biases, bias_slots, strict=True)
            if slot.layer == layer and direction in (None, slot.direction)
        ]
        assert len(got_w) == len(want_w) and len(got_b) == len(want_b)
        for got, want in zip(got_w + got_b, want_w + want_b, strict=True):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_sub_params_of_pieces_keep_each_arrays_orientation():
    """A frontend's ``Pieces`` with some matrices held transposed ([in, H], a Flax cell's kernel) and marked stacked:
    a layer's or a direction's ``sub_params`` keep those flags with their arrays, so that its buffer is the sliced
    buffer's (not a transposed matrix read as the slot's [H, in])."""
    cfg = jcr.RNNConfig("gru", 2, 6, 4, direction="bidirectional")
    params = jcr.init_params(jax.random.key(3), cfg)
    slots = list(jcr.layout.param_slots(cfg)[0])
    flips = [index % 2 == 0 for index in range(len(slots))]
    arrays = [
        params[s.offset : s.offset + s.size].reshape(s.shape).T if flip else params[s.offset : s.offset + s.size]
        for s, flip in zip(slots, flips, strict=True)
    ]
    pieces = _buffer.Pieces(arrays, slots, cfg, flips, flips)
    biases = jcr.layout.param_slots(cfg)[1]
    no_biases = params.at[np.concatenate([np.arange(s.offset, s.offset + s.size) for s in biases])].set(0)
    for layer, direction in itertools.product(range(cfg.num_layers), (None, *range(cfg.num_directions))):
        part = _buffer.sub_params(pieces, cfg, layer, direction)
        assert part.transposed == part.stacked and any(part.transposed) and not all(part.transposed)
        np.testing.assert_array_equal(
            np.asarray(part.buffer()), np.asarray(_buffer.sub_params(no_biases, cfg, layer, direction))
        )


def _backward_primitives(fun, params):
    """The primitives of ``fun``'s backward pass at ``params`` (its vjp's jaxpr), and the vjp."""
    out, vjp = jax.vjp(fun, params)
    return [eqn.primitive.name for eqn in jax.make_jaxpr(vjp)(out).eqns], out, vjp


@pytest.mark.parametrize(
    "cfg",
    [
        jcr.RNNConfig(mode="lstm", num_layers=2, num_units=5, input_size=4, direction="bidirectional", proj_size=2),
        jcr.RNNConfig(
            mode="gru", num_layers=2, num_units=6, input_size=6, input_mode="skip_input", bias_mode="single_recurrent"
        ),
        jcr.RNNConfig(mode="rnn_relu", num_layers=1, num_units=3, input_size=7, bias_mode="none"),
    ],
    ids=["lstm-bi-proj", "gru-skip-single", "relu-nobias"],
)
def test_unpack_holds_the_canonical_tensors_and_its_gradient_is_one_concatenation(cfg):
    """``unpack`` (the pure-JAX implementations' view of the buffer) gives every pseudo-layer's groups as the
    row-stacked canonical tensors, None where absent; its backward pass is one concatenation in buffer order (no pad,
    no add: summed pads were copied by XLA into every slice of the NNX modules' per-call packing)."""
    params = jcr.init_params(jax.random.key(4), cfg)
    weights, biases = jcr.params_to_canonical(params, cfg)
    slots = layout.param_slots(cfg)[0] + layout.param_slots(cfg)[1]
    primitives, groups, vjp = _backward_primitives(lambda p: _buffer.unpack(p, cfg), params)
    assert primitives.count("concatenate") == 1 and not {"pad", "add", "add_any"} & set(primitives), primitives
    assert len(groups) == cfg.num_layers * cfg.num_directions
    cotangents = jax.tree.map(lambda g: jnp.arange(1, g.size + 1, dtype=g.dtype).reshape(g.shape), groups)
    expected = np.zeros(jcr.params_size(cfg), np.float32)
    for (layer, direction), got, ct in zip(
        itertools.product(range(cfg.num_layers), range(cfg.num_directions)), groups, cotangents, strict=True
    ):
        for name, tensor, tangent in zip(layout.GROUP_NAMES, got, ct, strict=True):
            members = [
                t
                for t, slot in zip(weights + biases, slots, strict=True)
                if (slot.layer, slot.direction, slot.group) == (layer, direction, name)
            ]
            if not members:
                assert tensor is None and tangent is None, (layer, direction, name)
                continue
            np.testing.assert_array_equal(np.asarray(tensor), np.concatenate([np.asarray(m) for m in members]))
            group_slots = [s for s in slots if (s.layer, s.direction, s.group) == (layer, direction, name)]
            expected[group_slots[0].offset : group_slots[0].offset + tangent.size] = np.ravel(tangent)
    np.testing.assert_array_equal(np.asarray(vjp(cotangents)[0]), expected)


def test_unpack_with_gaps_and_scattered_gates(monkeypatch):
    """Were cuDNN to pad between tensors or scatter a group's gates (the layout puts every slot where its offset
    says), ``unpack`` still stacks each group in gate order and its gradient is still one concatenation, zero in the
    gaps."""
    cfg = jcr.RNNConfig(mode="gru", num_layers=2, num_units=3, input_size=2, direction="bidirectional")
    weights, biases, _ = layout._layout(cfg)
    offset, placed = 0, {}
    for slot in reversed(weights + biases):  # gates in falling offsets, a gap of 2 before every tensor
        placed[slot] = dataclasses.replace(slot, offset=offset + 2)
        offset += 2 + slot.size
    scattered = (tuple(placed[s] for s in weights), tuple(placed[s] for s in biases), offset + 1)
    original = layout._layout
    monkeypatch.setattr(layout, "_layout", lambda config: scattered if config == cfg else original(config))
    _buffer._unpack_plan.cache_clear()
    try:
        params = jnp.arange(offset + 1, dtype=jnp.float32)
        primitives, groups, vjp = _backward_primitives(lambda p: _buffer.unpack(p, cfg), params)
        cotangents = jax.tree.map(lambda g: -g, groups)
        gradient = np.asarray(vjp(cotangents)[0])
    finally:
        _buffer._unpack_plan.cache_clear()
    assert primitives.count("concatenate") == 1 and not {"pad", "add", "add_any"} & set(primitives), primitives
    expected = np.zeros(offset + 1, np.float32)
    for pseudo, got in enumerate(groups):
        layer, direction = divmod(pseudo, 2)
        for name, tensor in zip(layout.GROUP_NAMES, got, strict=True):
            members = [
                placed[s] for s in weights + biases if (s.layer, s.direction, s.group) == (layer, direction, name)
            ]
            if not members:
                assert tensor is None
                continue
            np.testing.assert_array_equal(
                np.asarray(tensor).ravel(), np.concatenate([np.arange(s.offset, s.offset + s.size) for s in members])
            )
            for s in members:
                expected[s.offset : s.offset + s.size] = -np.arange(s.offset, s.offset + s.size)
    np.testing.assert_array_equal(gradient, expected)
