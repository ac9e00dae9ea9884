"""oneDNN's matmul target (``kernels.matmul``, onednn/matmul.h) against NumPy, and implementation="onednn:gemm" (the
network as GEMMs on it: jax_cudnn_rnn/backends/onednn/gemm.py) against the float64 NumPy oracle, the xla
implementation and the reference one: values and every gradient, every mode oneDNN runs, uni- and bidirectional, 1-3
layers, projection, skip input, bias modes, lengths (in the recurrence handlers) and dropout (arranged by the fused
kit), float32 and bfloat16, under jax.jit and jax.vmap.

Without the extension these tests skip; with JAX_CUDNN_RNN_REQUIRE_ONEDNN=1 (set in CI) they fail instead.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import registry
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.onednn import cpu_rule, extension, gemm, kernels

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import skips
from support import (
    LENGTHS,
    assert_outputs_close,
    bfloat16_kernels,
    draw_inputs,
    make_config,
    oracle,
    require_bfloat16_kernels,
    require_extension,
)

GEMM = "onednn:gemm"
BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def native():
    """The loaded oneDNN module; skips (or fails under JAX_CUDNN_RNN_REQUIRE_ONEDNN=1) without it."""
    require_extension(extension.EXTENSION, skips.REQUIRE_ONEDNN)
    return extension.module()


def _f32(a):
    return None if a is None else np.asarray(a, np.float32)


# ------------------------------------------------------------------------------------------------ the matmul target


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_matches_numpy(native, dtype, transpose_a, transpose_b):
    """Every transpose, float32 and bfloat16 (float32 accumulation: exact products of bfloat16 values summed in
    float32, so the float64 product of the same rounded values is within float32 rounding)."""
    if dtype == BF16:
        require_bfloat16_kernels(GEMM)
    rng = np.random.default_rng(0)
    m, k, n = 37, 70, 19
    a = rng.normal(size=(k, m) if transpose_a else (m, k)).astype(dtype)
    b = rng.normal(size=(n, k) if transpose_b else (k, n)).astype(dtype)
    got = jax.jit(lambda a, b: kernels.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b))(a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
    assert got.dtype == jnp.float32 and got.shape == (m, n)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-4)
    # oneDNN names the kernel it runs (what the bench reports beside the time); which one is the CPU's business
    # (e.g. "brg:avx512_core_bf16", "brg:avx512_core_amx", "gemm:jit:f32"): no name is asserted.
    dtype_name = "bfloat16" if dtype == BF16 else "float32"
    name = native.matmul_implementation(a.shape, b.shape, dtype_name, "float32", transpose_a, transpose_b)
    assert isinstance(name, str) and name


def test_matmul_rounds_to_its_input_dtype_on_request(native):
    """c in a's dtype: the float32 product rounded once."""
    require_bfloat16_kernels(GEMM)
    rng = np.random.default_rng(1)
    a, b = (rng.normal(size=s).astype(BF16) for s in ((8, 16), (16, 4)))
    got = kernels.matmul(a, b, out_dtype=jnp.bfloat16)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(BF16)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(_f32(got), _f32(want), rtol=1e-2)


def test_matmul_batches_and_broadcasts_under_vmap(native):
    """jax.vmap's "expand_dims": a mapped operand gets a leading batch axis, an unmapped one a leading 1 that oneDNN
    broadcasts; nested maps give two."""
    rng = np.random.default_rng(2)
    a = rng.normal(size=(4, 5, 7)).astype(np.float32)
    b = rng.normal(size=(3, 7, 6)).astype(np.float32)
    got = jax.vmap(lambda a: kernels.matmul(a, b[0]))(a)
    np.testing.assert_allclose(np.asarray(got), a @ b[0], rtol=1e-5, atol=1e-5)
    got = jax.jit(jax.vmap(jax.vmap(kernels.matmul, (0, None)), (None, 0)))(a, b)
    np.testing.assert_allclose(np.asarray(got), np.einsum("imk,jkn->jimn", a, b), rtol=1e-5, atol=1e-5)


def test_matmul_of_an_empty_contraction_is_zero(native):
    got = kernels.matmul(np.ones((3, 0), np.float32), np.ones((0, 2), np.float32))
    np.testing.assert_array_equal(np.asarray(got), np.zeros((3, 2)))


@pytest.mark.parametrize(
    "a, b, out_dtype, expected",
    [
        (np.ones((2, 3), np.float32), np.ones((4, 2), np.float32), np.float32, "equal contracted dimensions"),
        (np.ones((2, 3), np.float32), np.ones((3, 2), BF16), np.float32, "b's element type differs from a's"),
        (np.ones((2, 3), np.float16), np.ones((3, 2), np.float16), np.float32, "expected float32 or bfloat16"),
        (np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), BF16, "c must be float32 or a's element type"),
    ],
)
def test_matmul_refuses_what_it_cannot_multiply(native, a, b, out_dtype, expected):
    """Every refusal is an error naming what is wrong, from the handler (the same checks as matmul_implementation's)."""
    with pytest.raises(Exception, match=expected):
        jax.block_until_ready(kernels.matmul(a, b, out_dtype=out_dtype))


def test_matmul_wrapper_checks_ranks(native):
    with pytest.raises(ValueError, match=r"a has shape \(2, 3\) and b \(3,\); expected the same rank"):
        kernels.matmul(np.ones((2, 3), np.float32), np.ones((3,), np.float32))


def test_matmul_implementation_refuses_bad_shapes(native):
    with pytest.raises(ValueError, match="equal contracted dimensions"):
        native.matmul_implementation([2, 3], [4, 5], "float32", "float32")
    with pytest.raises(ValueError, match="dtype is 'int8'; expected float16, bfloat16"):
        native.matmul_implementation([2, 3], [3, 5], "float32", "int8")
    with pytest.raises(ValueError, match=r"a has dtype float16; expected float32 or bfloat16"):
        native.matmul_implementation([2, 3], [3, 5], "float16", "float32")


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_packed_weights_give_the_plain_product(native, dtype, transpose_b):
    """b packed once into oneDNN's layout (``pack_weights``, which may pad it) then multiplied: the plain product's
    values, for the rows it was packed for and for others (a vmapped a's rows fold into one product), to within the
    float32 accumulation's rounding (the packed kernel may sum in another order than the plain one: on AVX2 the two are
    different kernels)."""
    if dtype == BF16:
        require_bfloat16_kernels(GEMM)
    rng = np.random.default_rng(3)
    k, n, rows = 96, 80, 8
    b = rng.normal(size=(n, k) if transpose_b else (k, n)).astype(dtype)
    packed = kernels.pack_weights(b, rows, transpose_b=transpose_b)
    size = kernels.packed_bytes(rows, b.shape, np.dtype(dtype).name, transpose_b)
    assert packed.dtype == jnp.uint8 and packed.shape == (size,) and size >= b.nbytes
    a = rng.normal(size=(3, rows, k)).astype(dtype)
    want = np.asarray(kernels.matmul(a.reshape(-1, k), b, transpose_b=transpose_b)).reshape(3, rows, n)

    def product(a, packed):
        return kernels.matmul_packed(a, packed, rows=rows, b_shape=b.shape, transpose_b=transpose_b)

    # k = 96 products of unit normals summed in float32: a few float32 ulps of the sum's terms apart at most.
    tolerance = dict(rtol=1e-6, atol=2e-5)
    np.testing.assert_allclose(np.asarray(product(a[0], packed)), want[0], **tolerance)
    np.testing.assert_allclose(np.asarray(jax.vmap(product, (0, None))(a, packed)), want, **tolerance)
    np.testing.assert_allclose(np.asarray(product(a[0, :5], packed)), want[0, :5], **tolerance)


def test_packed_weights_batch_under_vmap(native):
    """Mapped weights are packed and multiplied per mapped entry; mapped rows and weights at once (nested maps) give
    every pair."""
    rng = np.random.default_rng(4)
    a = rng.normal(size=(3, 4, 6)).astype(np.float32)
    bs = rng.normal(size=(2, 6, 5)).astype(np.float32)

    def product(a, b):
        return kernels.matmul_packed(a, kernels.pack_weights(b, 4), rows=4, b_shape=b.shape)

    np.testing.assert_allclose(np.asarray(jax.vmap(product, (None, 0))(a[0], bs)), a[0] @ bs, rtol=1e-5, atol=1e-5)
    got = jax.jit(jax.vmap(jax.vmap(product, (0, None)), (None, 0)))(a, bs)
    np.testing.assert_allclose(np.asarray(got), np.einsum("imk,jkn->jimn", a, bs), rtol=1e-5, atol=1e-5)


def test_packed_product_refuses_weights_packed_otherwise(native):
    """Packed bytes of another shape are an error naming what was expected, never a read past them."""
    b = np.ones((6, 5), np.float32)
    packed = kernels.pack_weights(b, 4)
    with pytest.raises(Exception, match="from jax_cudnn_rnn_onednn_matmul_pack"):
        jax.block_until_ready(kernels.matmul_packed(np.ones((4, 7), np.float32), packed[:-64], rows=4, b_shape=(7, 5)))
    with pytest.raises(Exception, match="expected K = 6 columns"):
        jax.block_until_ready(kernels.matmul_packed(np.ones((4, 7), np.float32), packed, rows=4, b_shape=(6, 5)))
    with pytest.raises(ValueError, match="expected 2 dimensions and rows >= 1"):
        kernels.packed_bytes(0, (6, 5), "float32", False)


# ------------------------------------------------------------------------------------------------ onednn:gemm


def _value_and_grads(implementation, cfg, params, x, h0, c0, seq_lengths=None, **kwargs):
    """((y, h_n, c_n), (dparams, dx, dh0, dc0)) of a loss over every output, in float32."""
    rng = np.random.default_rng(7)
    wy = rng.normal(size=(*x.shape[:2], cfg.output_size))
    wh = rng.normal(size=cfg.state_shape(x.shape[1]))
    wc = rng.normal(size=cfg.cell_shape(x.shape[1])) if cfg.has_cell_state else None

    def loss(params, x, h0, c0):
        y, h, c = jcr.rnn(params, x, h0, c0, cfg, seq_lengths=seq_lengths, implementation=implementation, **kwargs)
        total = jnp.sum(y.astype(jnp.float32) * wy) + jnp.sum(h.astype(jnp.float32) * wh)
        if c is not None:
            total = total + jnp.sum(c.astype(jnp.float32) * wc)
        return total, (y, h, c)

    argnums = (0, 1, 2, 3) if c0 is not None else (0, 1, 2)
    (_, outs), grads = jax.jit(jax.value_and_grad(loss, argnums=argnums, has_aux=True))(params, x, h0, c0)
    return outs, tuple(grads) + ((None,) if c0 is None else ())


def _assert_grads_close(got, want, tolerance):
    for name, g, w in zip(("dparams", "dx", "dh0", "dc0"), got, want, strict=True):
        if w is None:
            assert g is None
        else:
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tolerance, atol=tolerance, err_msg=name)


CASES = [
    ("lstm", 1, "unidirectional", {}),
    ("lstm", 2, "bidirectional", {"proj_size": 3}),
    ("lstm", 2, "bidirectional", {"input_mode": "skip_input"}),
    ("gru", 1, "unidirectional", {}),
    ("gru", 3, "unidirectional", {"bias_mode": "single_recurrent"}),
    ("gru", 2, "bidirectional", {}),
    ("rnn_tanh", 2, "bidirectional", {"bias_mode": "single_input"}),
    ("rnn_relu", 3, "unidirectional", {"bias_mode": "none"}),
]


@pytest.mark.parametrize("mode,num_layers,direction,extra", CASES, ids=str)
def test_gemm_matches_the_numpy_oracle_and_xla_gradients(native, mode, num_layers, direction, extra):
    """float32: values against the float64 oracle, every gradient against the xla implementation (which runs the
    same decomposition on XLA's GEMMs and is itself checked against the oracle and PyTorch elsewhere)."""
    cfg = make_config(mode, num_layers, direction, **extra)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(1))
    outs, grads = _value_and_grads(GEMM, cfg, params, x, h0, c0)
    assert_outputs_close(outs, oracle(cfg, params, x, h0, c0), atol=1e-5, rtol=1e-5)
    _, want = _value_and_grads("xla", cfg, params, x, h0, c0)
    _assert_grads_close(grads, want, 1e-5)


@pytest.mark.parametrize("mode,num_layers,direction", [("lstm", 2, "bidirectional"), ("gru", 3, "unidirectional")])
def test_gemm_in_bfloat16_matches_float32_within_bfloat16_rounding(native, mode, num_layers, direction):
    """bfloat16 (bfloat16 GEMMs with float32 accumulation, float32 everywhere else) against the xla implementation in
    float32 on the same rounded inputs, as the other oneDNN implementations' bfloat16 tests: |error| <= 3e-2 of each
    output's and gradient's largest magnitude."""
    cfg16, cfg32 = make_config(mode, num_layers, direction, dtype=BF16), make_config(mode, num_layers, direction)
    require_bfloat16_kernels(GEMM, cfg16)
    params, x, h0, c0 = draw_inputs(cfg16, np.random.default_rng(2))
    outs16, grads16 = _value_and_grads(GEMM, cfg16, params, x, h0, c0)
    outs32, grads32 = _value_and_grads("xla", cfg32, _f32(params), _f32(x), _f32(h0), _f32(c0))
    assert outs16[0].dtype == jnp.bfloat16 and grads16[0].dtype == jnp.bfloat16
    names = ("y", "h_n", "c_n", "dparams", "dx", "dh0", "dc0")
    for name, got, want in zip(names, (*outs16, *grads16), (*outs32, *grads32), strict=True):
        if want is None:
            assert got is None
            continue
        got, want = _f32(got), _f32(want)
        assert float(np.abs(got - want).max()) <= 3e-2 * float(np.abs(want).max()), name


@pytest.mark.parametrize("mode,num_layers,direction,extra", CASES, ids=str)
def test_gemm_lengths_match_the_oracle_and_reference_gradients(native, mode, num_layers, direction, extra):
    """seq_lengths (0 and T among them) in the recurrence handlers (a projected LSTM: arranged around its scans by the
    fused kit): values against the oracle's packed-sequence semantics, gradients against the reference
    implementation; what the padding holds does not matter and no gradient reaches x there."""
    lengths = np.asarray((*LENGTHS, 0), np.int32)
    steps = int(lengths.max())
    cfg = make_config(mode, num_layers, direction, **extra)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(3), steps=steps, batch=len(lengths))
    padding = np.arange(steps)[:, None] >= lengths[None, :]
    x[padding] = 1e6
    outs, grads = _value_and_grads(GEMM, cfg, params, x, h0, c0, lengths)
    assert_outputs_close(outs, oracle(cfg, params, x, h0, c0, seq_lengths=lengths), atol=1e-5, rtol=1e-5)
    _, want = _value_and_grads("reference", cfg, params, x, h0, c0, lengths)
    _assert_grads_close(grads, want, 1e-5)
    assert np.all(np.asarray(grads[1])[padding] == 0)


def test_gemm_lengths_in_bfloat16_match_float32_within_bfloat16_rounding(native):
    """bfloat16 with lengths against the xla implementation in float32 on the same rounded inputs (as the bfloat16
    test above); the padding's outputs exactly zero."""
    lengths = np.asarray((*LENGTHS, 0), np.int32)
    cfg16 = make_config("lstm", 2, "bidirectional", dtype=BF16)
    require_bfloat16_kernels(GEMM, cfg16)
    cfg32 = make_config("lstm", 2, "bidirectional")
    params, x, h0, c0 = draw_inputs(cfg16, np.random.default_rng(9), steps=int(lengths.max()), batch=len(lengths))
    outs16, grads16 = _value_and_grads(GEMM, cfg16, params, x, h0, c0, lengths)
    outs32, grads32 = _value_and_grads("xla", cfg32, _f32(params), _f32(x), _f32(h0), _f32(c0), lengths)
    assert np.all(_f32(outs16[0])[np.arange(x.shape[0])[:, None] >= lengths[None, :]] == 0)
    for name, got, want in zip(
        ("y", "h_n", "c_n", "dparams", "dx", "dh0", "dc0"), (*outs16, *grads16), (*outs32, *grads32), strict=True
    ):
        got, want = _f32(got), _f32(want)
        assert float(np.abs(got - want).max()) <= 3e-2 * float(np.abs(want).max()), name


def test_gemm_lengths_run_in_the_recurrence_handlers(native):
    """With lengths the forward and the training step pass them to the recurrence handlers: no padding channel (no
    input wider than the network's), no gather of the final states."""
    cfg = jcr.RNNConfig("lstm", 1, num_units=8, input_size=5)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(10), batch=len(LENGTHS))
    lengths = np.asarray(LENGTHS, np.int32)
    run = lambda p, x: jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths, implementation=GEMM)  # noqa: E731
    wider = f"x{cfg.input_size + 1}x"
    for fn in (run, jax.grad(lambda p, x: jnp.sum(run(p, x)[0] ** 2) + jnp.sum(run(p, x)[2]))):
        text = jax.jit(fn).lower(params, x).as_text()
        assert "has_lengths = true" in text and wider not in text and "gather" not in text


def test_gemm_dropout_matches_xla_with_the_same_key(native):
    """Inter-layer dropout (the fused kit runs the network layer by layer) with the xla implementation's masks."""
    cfg = make_config("gru", 3, "bidirectional", dropout=0.4)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(4))
    key = jax.random.key(5)
    outs, grads = _value_and_grads(GEMM, cfg, params, x, h0, c0, is_training=True, dropout_key=key)
    want_outs, want_grads = _value_and_grads("xla", cfg, params, x, h0, c0, is_training=True, dropout_key=key)
    assert_outputs_close(outs, want_outs, atol=1e-5, rtol=1e-5)
    _assert_grads_close(grads, want_grads, 1e-5)


def test_gemm_under_vmap_matches_each_element(native):
    """vmap over x and h0 (the GEMMs' operands gain a batch axis; the weights' is broadcast), values and gradients
    with respect to params, x and h0 equal to the elements run one by one."""
    cfg = make_config("lstm", 2, "bidirectional")
    rng = np.random.default_rng(5)
    params, _, _, c0 = draw_inputs(cfg, rng)
    xs = rng.normal(size=(3, 5, 3, cfg.input_size)).astype(np.float32)
    h0s = rng.normal(size=(3, *cfg.state_shape(3))).astype(np.float32)

    def loss(params, x, h0):
        y, h, c = jcr.rnn(params, x, h0, c0, cfg, implementation=GEMM)
        return jnp.sum(y**2) + jnp.sum(h) + jnp.sum(c * c0)

    step = jax.value_and_grad(loss, argnums=(0, 1, 2))
    batched = jax.jit(jax.vmap(step, in_axes=(None, 0, 0)))(params, xs, h0s)
    for i in range(3):
        one = step(params, xs[i], h0s[i])
        for got, want in zip(jax.tree.leaves(batched), jax.tree.leaves(one), strict=True):
            np.testing.assert_allclose(np.asarray(got[i]), np.asarray(want), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("mode,num_layers,direction,extra", CASES, ids=str)
@pytest.mark.parametrize("lengths", [None, (1, 0, 1)], ids=("", "lengths"))
# 2 and 5: the handlers' own loops (small_products.h: the scalar ones at this H), 17: oneDNN's products
@pytest.mark.parametrize("batch", [2, 5, 17], ids=("2 rows", "5 rows", "17 rows"))
def test_a_short_call_reads_the_weights_in_place_and_matches_the_oracle(
    native, mode, num_layers, direction, extra, lengths, batch
):
    """A call of at most ``gemm.IN_PLACE_STEPS`` steps reads w_in and w_rec where they lie in the parameter buffer
    (no pack, no copy of them): values against the float64 oracle, every gradient against the xla implementation's
    (the reference's with lengths), the buffer's gradient whole (its weights' parts from the handlers, its biases'
    beside them)."""
    cfg = make_config(mode, num_layers, direction, **extra)
    lengths = None if lengths is None else np.resize(np.asarray(lengths, np.int32), batch)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(11), steps=gemm.IN_PLACE_STEPS, batch=batch)
    outs, grads = _value_and_grads(GEMM, cfg, params, x, h0, c0, lengths)
    assert_outputs_close(outs, oracle(cfg, params, x, h0, c0, seq_lengths=lengths), atol=1e-5, rtol=1e-5)
    _, want = _value_and_grads("xla" if lengths is None else "reference", cfg, params, x, h0, c0, lengths)
    _assert_grads_close(grads, want, 1e-5)
    loss = lambda p, x: jnp.sum(jcr.rnn(p, x, h0, c0, cfg, seq_lengths=lengths, implementation=GEMM)[0])  # noqa: E731
    text = jax.jit(jax.grad(loss)).lower(params, x).as_text()
    directions = num_layers * cfg.num_directions
    if extra.get("proj_size"):  # the projected LSTM's layers are gemm_scan's scans of packed products
        assert "blocks = dense<[" not in text
    else:
        assert text.count("blocks = dense<[") == 2 * directions and extension.PACK_TARGET not in text


def test_a_longer_call_packs_its_recurrent_weights_unless_its_kernel_reads_them_in_place(native):
    """Past ``gemm.IN_PLACE_STEPS`` steps each direction's recurrent weights are packed once for its products, except
    where oneDNN's kernel for them reads a plain b where it lies (`gemm:jit`): there every call is in place."""
    cfg = make_config("gru", 1, "unidirectional")
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(12), steps=gemm.IN_PLACE_STEPS + 1)
    text = jax.jit(lambda p, x: jcr.rnn(p, x, h0, c0, cfg, implementation=GEMM)[0]).lower(params, x).as_text()
    width = cfg.num_gates * cfg.num_units
    in_place = kernels.reads_b_in_place(x.shape[1], (width, cfg.num_units), "float32")
    name = extension.module().matmul_implementation(
        [x.shape[1], cfg.num_units], [width, cfg.num_units], "float32", "float32", transpose_b=True
    )
    assert in_place == name.startswith("gemm:")
    assert (extension.PACK_TARGET in text) != in_place and ("blocks = dense<[" in text) == in_place


ONE_LAYER = [
    ("lstm", {}),
    ("gru", {"bias_mode": "single_recurrent"}),
    ("rnn_tanh", {"bias_mode": "single_input"}),
    ("rnn_relu", {"bias_mode": "none"}),
    ("gru", {"input_mode": "skip_input"}),
]


@pytest.mark.parametrize("mode,extra", ONE_LAYER, ids=str)
@pytest.mark.parametrize("dtype", [jnp.float32, BF16], ids=("float32", "bfloat16"))
def test_one_layer_in_place_has_its_handler_write_the_buffers_whole_gradient(native, mode, extra, dtype):
    """A network of one layer and direction, in place: the backward's handler writes the parameter buffer's whole
    gradient (``params_gradient``: the weights' and biases' at their offsets, zeros where the layer has nothing), with
    no concatenation left to XLA. Every gradient against the xla implementation's (bfloat16: the same float32
    reference and bfloat16's 3e-2 of the largest magnitude, as the bfloat16 test above)."""
    cfg = make_config(mode, 1, "unidirectional", dtype=dtype, **extra)
    if dtype == BF16:
        require_bfloat16_kernels(GEMM, cfg)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(13), steps=gemm.IN_PLACE_STEPS, batch=3)
    _, grads = _value_and_grads(GEMM, cfg, params, x, h0, c0)
    cfg32 = make_config(mode, 1, "unidirectional", **extra)
    _, want = _value_and_grads("xla", cfg32, *(None if a is None else _f32(a) for a in (params, x, h0, c0)))
    if dtype == BF16:
        assert grads[0].dtype == jnp.bfloat16
        for got, expected in zip(grads, want, strict=True):
            if expected is not None:
                scale = float(jnp.max(jnp.abs(expected)))
                np.testing.assert_allclose(_f32(got), expected, atol=3e-2 * scale, rtol=0)
    else:
        _assert_grads_close(grads, want, 1e-5)
    loss = lambda p, x: jnp.sum(jcr.rnn(p, x, h0, c0, cfg, implementation=GEMM)[0])  # noqa: E731
    lowered = jax.jit(jax.grad(loss)).lower(params, x)
    assert lowered.as_text().count("params_gradient = true") == 1
    assert "concatenate" not in lowered.compile().as_text()


def test_the_whole_gradient_refuses_bias_offsets_outside_the_buffer_or_on_another_slot(native):
    """With ``params_gradient`` the handler checks that each bias's slot lies in the buffer and overlaps no other."""
    cfg = jcr.RNNConfig("gru", 1, 4, 5)  # w_in 60 elements at 0, w_rec 48 at 60, then b_in and b_rec, 12 each
    params, x, h0 = jnp.zeros(132), jnp.zeros((1, 3, 5)), jnp.zeros((3, 4))
    b = jnp.zeros(12)
    *_, saved = kernels.gemm_forward(
        x,
        params,
        b,
        b,
        h0,
        None,
        None,
        config=cfg,
        reverse=False,
        training=True,
        weights_dtype=jnp.float32,
        y_dtype=jnp.float32,
        blocks=kernels.buffer_blocks(cfg, 5, 0, 60),
    )

    def backward(b_offsets):
        return jax.block_until_ready(
            kernels.gemm_backward(
                x,
                params,
                jnp.zeros((1, 3, 4)),
                h0,
                None,
                None,
                None,
                saved,
                config=cfg,
                reverse=False,
                blocks=kernels.buffer_blocks(cfg, 5, 0, 60),
                params_gradient=b_offsets,
            )
        )

    np.testing.assert_array_equal(np.asarray(backward((108, 120))[3]), 0.0)
    with pytest.raises(Exception, match=r"b_rec_offset is 125; expected 12 elements from it within params's 132"):
        backward((108, 125))
    with pytest.raises(
        Exception, match=r"b_in_offset is 100; expected it at 108 or later, past w_rec's 48 elements from 60"
    ):
        backward((100, 120))


def test_the_in_place_recurrence_refuses_a_buffer_that_does_not_hold_its_weights(native):
    """In place, the handlers check that the buffer has the weights' dtype and holds each matrix at its offset."""
    cfg = jcr.RNNConfig("gru", 1, 4, 5)
    x, h0, b = jnp.zeros((1, 3, 5)), jnp.zeros((3, 4)), jnp.zeros(12)
    kwargs = dict(config=cfg, reverse=False, training=False, weights_dtype=jnp.float32, y_dtype=jnp.float32)

    def forward(params, offsets):
        blocks = kernels.buffer_blocks(cfg, 5, *offsets)
        return jax.block_until_ready(kernels.gemm_forward(x, params, b, b, h0, None, None, blocks=blocks, **kwargs))

    y, *_ = forward(jnp.zeros(12 * 9), (0, 60))
    np.testing.assert_array_equal(np.asarray(y), 0.0)
    with pytest.raises(Exception, match=r"params has 108 elements; expected gates 0-2 of w_rec within it"):
        forward(jnp.zeros(12 * 9), (0, 61))
    with pytest.raises(Exception, match=r"blocks\[0\] reads gates from 0 \(3\) of operand 0 at -1"):
        forward(jnp.zeros(12 * 9), (-1, 60))
    with pytest.raises(Exception, match=r"params has dtype bfloat16; expected float32, the weights'"):
        forward(jnp.zeros(12 * 9, jnp.bfloat16), (0, 60))


@pytest.mark.parametrize("proj_size", [0, 2])
def test_gemm_runs_its_products_on_the_matmul_target(native, proj_size):
    """The forward and the training step are oneDNN matmul calls and the recurrence handlers (a projected LSTM: a scan
    of packed products instead), no RNN primitive and no dot left to XLA."""
    cfg = make_config("lstm" if proj_size else "gru", 1, "unidirectional", proj_size=proj_size)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(6))
    run = lambda p, x: jcr.rnn(p, x, h0, c0, cfg, implementation=GEMM)[0]  # noqa: E731
    for fn, recurrence in (
        (run, extension.GEMM_FORWARD_TARGET),
        (jax.grad(lambda p, x: jnp.sum(run(p, x) ** 2)), extension.GEMM_BACKWARD_TARGET),
    ):
        text = jax.jit(fn).lower(params, x).as_text()
        width = cfg.num_gates * cfg.num_units
        packs = proj_size or not kernels.reads_b_in_place(x.shape[1], (width, cfg.num_units), "float32")
        assert (extension.PACK_TARGET in text) == bool(packs) and (extension.MATMUL_TARGET in text or not packs)
        assert (recurrence in text) == (not proj_size) and (extension.PACKED_MATMUL_TARGET in text) == bool(proj_size)
        assert extension.FORWARD_TARGET not in text and "dot_general" not in text


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_gemm_saturating_gates_match_the_oracle(native, mode):
    """Pre-activations in the tens, where the recurrence's own tanh and sigmoid (onednn/gemm_cells.cc) saturate and a
    ReLU network grows: values against the float64 oracle, gradients against the xla implementation."""
    cfg = make_config(mode, 1, "bidirectional")
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(8), steps=7)
    params, x = params * 12, x * 4
    outs, grads = _value_and_grads(GEMM, cfg, params, x, h0, c0)
    want = oracle(cfg, params, x, h0, c0)
    for got, expected in zip(outs, want, strict=True):
        if expected is not None:
            np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5 * max(1, np.abs(expected).max()))
    _, want_grads = _value_and_grads("xla", cfg, params, x, h0, c0)
    for got, expected in zip(grads, want_grads, strict=True):
        if expected is not None:
            scale = max(1.0, float(np.abs(expected).max()))
            np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-4, atol=1e-5 * scale)


def test_gemm_recurrence_refuses_what_it_does_not_run(native):
    """The handlers check their network and buffers and name what is wrong."""
    cfg = jcr.RNNConfig("gru", 1, 4, 5)
    x, h0, w_in, b = jnp.zeros((2, 3, 5)), jnp.zeros((3, 4)), jnp.zeros((12, 5)), jnp.zeros(12)
    packed = kernels.pack_weights(jnp.zeros((12, 4)), 3, transpose_b=True)
    kwargs = dict(config=cfg, reverse=False, training=False, weights_dtype=jnp.float32, y_dtype=jnp.float32)

    def forward(x=x, packed=packed, w_in=w_in, **changes):
        return jax.block_until_ready(kernels.gemm_forward(x, packed, b, b, h0, w_in, None, **{**kwargs, **changes}))

    with pytest.raises(Exception, match=r"w_in has shape \(12, 4\); expected \(12, 5\)"):
        forward(w_in=w_in[:, :4])
    with pytest.raises(Exception, match="packed has shape"):
        forward(packed=packed[:-4])
    with pytest.raises(Exception, match=r"x has shape \(2, 3, 5\); expected \[T, B, 5\] of float32 or the weights"):
        forward(x=x.astype(jnp.float16))
    with pytest.raises(Exception, match="weights_dtype is 'float16'"):
        forward(weights_dtype=np.float16)
    with pytest.raises(Exception, match=r"lengths has shape \(2,\)"):
        jax.block_until_ready(kernels.gemm_forward(x, packed, b, b, h0, w_in, None, jnp.zeros(2, jnp.int32), **kwargs))
    with pytest.raises(Exception, match="lengths"):
        jax.block_until_ready(kernels.gemm_forward(x, packed, b, b, h0, w_in, None, jnp.zeros(3), **kwargs))


def test_gemm_is_a_variant_of_onednn_for_the_registry(native):
    """A variant of oneDNN on both sides, listed where the CPU's implementations are (the bench and ``tune`` time
    it), runnable by name where oneDNN runs, with oneDNN's refusals (``SUPPORTS``); the rule estimates it from its
    shipped cells (bfloat16 on native bfloat16 kernels: at a measured shape, the cell's ratio read against its table's
    other implementations) and nowhere else (float32 on AVX-512, emulated bfloat16: nothing measured, so the default
    never runs it there)."""
    cfg = make_config("lstm", 1, "unidirectional", dtype=BF16, proj_size=2)
    assert GEMM in registry.implementations("cpu", by_default=True)
    assert registry.sides_of(GEMM) == registry.SIDES
    assert registry.why_not(GEMM, "cpu", Call(make_config("gru", 1, "unidirectional"))) is None
    if bfloat16_kernels(GEMM) is None:  # oneDNN's primitive has no projected bfloat16 LSTM, which SUPPORTS says
        assert "projection" in registry.why_not(GEMM, "cpu", Call(cfg))
    large = jcr.RNNConfig("gru", 1, 1024, 1024, dtype=BF16)
    isa = "avx512_core_bf16"  # its bfloat16 class's measurements only (an AMX CPU's table is a class of its own)
    cells = [
        cell.ratios
        for entry in cpu_rule.MEASUREMENTS
        if cpu_rule.kernel_class(entry.isa, "bfloat16") == cpu_rule.kernel_class(isa, "bfloat16")
        for cell in entry.cells
        if cell[:5] == ("gru", "bfloat16", 1024, 64, 25)
    ]
    (timed,) = [ratios for ratios in cells if GEMM in ratios]  # one of the class's two tables timed the gemm
    (other,) = [ratios for ratios in cells if GEMM not in ratios]
    for index, side in enumerate(registry.SIDES):
        # Read against what its table timed beside it: that table's offset from the class's pooled ratios is half
        # the mean log difference of the implementations both tables timed on this side.
        both = [name for name in timed if name != GEMM and name in other and timed[name][index] is not None]
        offset = np.mean([np.log(timed[name][index] / other[name][index]) for name in both]) / 2
        found = cpu_rule.estimate(large, 64, side, GEMM, isa=isa)
        want = timed[GEMM][index] * np.exp(-offset)
        assert found is not None and found[0] == pytest.approx(want, rel=1e-6), (side, found, want)
        assert cpu_rule.estimate(large, 64, side, GEMM, isa="avx512_core") is None  # emulated bfloat16
        float32 = jcr.RNNConfig("gru", 1, 1024, 1024)
        assert cpu_rule.estimate(float32, 64, side, GEMM, isa="avx512_core_bf16") is None


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("mode", ["gru", "lstm"])
def test_call_bytes_is_what_the_recurrence_takes_from_the_pool(native, mode, dtype):
    """``gemm.call_bytes`` (the bench's op memory: ``pool_bytes``) is the scratch each recurrence call takes from the
    extension's pool, which keeps it for the next call: the pool holds that after each call alone (within oneDNN's
    products' scratchpads)."""
    from jax_cudnn_rnn.backends.onednn import gemm

    cfg = jcr.RNNConfig(mode, 1, 16, 24, dtype=dtype)
    if dtype == BF16:
        require_bfloat16_kernels(GEMM, cfg)
    steps, batch, lstm = 6, 5, mode == "lstm"
    x = jnp.ones((steps, batch, 24), dtype)
    w_in, w_rec = jnp.ones((cfg.num_gates * 16, 24), dtype), jnp.ones((cfg.num_gates * 16, 16), dtype)
    b = jnp.zeros(cfg.num_gates * 16)
    h0 = c0 = jnp.zeros((batch, 16))
    forward_packed = kernels.pack_weights(w_rec, batch, transpose_b=True)
    backward_packed = kernels.pack_weights(w_rec, batch)
    kwargs = dict(config=cfg, reverse=False, weights_dtype=dtype, y_dtype=dtype)
    _, _, _, saved = kernels.gemm_forward(
        x, forward_packed, b, b, h0, w_in, c0 if lstm else None, training=True, **kwargs
    )
    jax.block_until_ready(saved)
    expected = gemm.call_bytes(cfg, 0, steps, batch)
    native.release_scratch()
    jax.block_until_ready(
        kernels.gemm_forward(x, forward_packed, b, b, h0, w_in, c0 if lstm else None, training=True, **kwargs)
    )
    assert expected[0] <= native.kept_scratch()[0] <= expected[0] + 2**16
    native.release_scratch()
    dy = jnp.ones((steps, batch, 16), dtype)
    jax.block_until_ready(
        kernels.gemm_backward(
            x, backward_packed, dy, h0, c0, w_in, c0 if lstm else None, saved, config=cfg, reverse=False
        )
    )
    assert expected[1] <= native.kept_scratch()[0] <= expected[1] + 2**16
    assert (
        gemm.pool_bytes(cfg, steps, batch, True) == max(expected)
        and gemm.pool_bytes(cfg, steps, batch, False) == expected[0]
    )


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["float32", "bfloat16"])
def test_the_registry_sizes_gemms_scratch_from_its_recurrence_calls(native, dtype):
    """What the bench's memory column asks the registry for "onednn:gemm" (and for it on one side of a pair) is
    ``gemm.pool_bytes``, per side; oneDNN's own run on the other side keeps its primitives' sizes."""
    from jax_cudnn_rnn.backends.onednn import gemm

    cfg = jcr.RNNConfig("gru", 2, 32, 48, dtype=dtype)
    if dtype == BF16:
        require_bfloat16_kernels(GEMM, cfg)
    call = Call(cfg, 7, 5)
    for side in registry.SIDES:
        expected = gemm.pool_bytes(cfg, 7, 5, side == registry.TRAINING)
        assert registry.scratch_bytes(GEMM, call, side) == expected > 0
    sizes = kernels.buffer_sizes(cfg, 7, 5, False, False)
    own = max(sizes["weights_scratch"], sizes["forward_scratch"], sizes["backward_scratch"])
    assert registry.scratch_bytes(f"onednn+{GEMM}", call, registry.FORWARD) == own
    assert registry.scratch_bytes(f"onednn+{GEMM}", call, registry.TRAINING) == gemm.pool_bytes(cfg, 7, 5, True)
