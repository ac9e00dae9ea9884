"""Issue 59: every operand a oneDNN handler reads is checked where it is read (onednn/rnn_operands.h,
onednn/recurrence_operands.h, common/ffi_args.h), so that a disagreement between what Python hands over and the
network the attributes describe is an error naming the operand, what was expected and what came, never a read of
memory nobody wrote; and every output the handlers give XLA is written.

The handlers are called here as kernels.py calls them, with one thing wrong at a time."""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import _buffer, layout
from jax_cudnn_rnn.backends.onednn import extension, kernels

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import skips
from support import require_extension

T, B = 5, 3


@pytest.fixture(autouse=True)
def native():
    require_extension(extension.EXTENSION, skips.REQUIRE_ONEDNN)


def _case(mode="lstm"):
    cfg = jcr.RNNConfig(mode, 1, 8, 4)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.random.normal(jax.random.key(1), (T, B, 4))
    h0 = jnp.zeros(cfg.state_shape(B))
    return cfg, params, x, h0


def _pieces(cfg, params, dtype):
    weights, biases = layout.param_slots(cfg)
    slots = weights + biases
    arrays = [params[s.offset : s.offset + s.size].reshape(s.shape).astype(dtype) for s in slots]
    return _buffer.Pieces(arrays, slots, cfg)


def _run(fn):
    with pytest.raises(jax.errors.JaxRuntimeError) as caught:
        jax.block_until_ready(fn())
    return str(caught.value)


def test_pieces_of_another_dtype_than_the_network_are_refused_by_the_weights_handler():
    """The defect: a linen module's parameters cast to bfloat16 reached the weights handler, which took the first
    piece's dtype for the network's and wrote a bfloat16 network into the float32-sized buffer the forward then read
    (sum |y| different on every run). Now the handler is told the network's dtype and checks each piece against it."""
    cfg, params, x, h0 = _case()
    error = _run(lambda: kernels.forward(x, h0, _pieces(cfg, params, jnp.bfloat16), h0, config=cfg, training=False))
    assert "params piece 0 has dtype bfloat16; expected the network's, float32" in error
    error = _run(lambda: kernels.forward(x, h0, params.astype(jnp.bfloat16), h0, config=cfg, training=False))
    assert "params piece 0 has dtype bfloat16; expected the network's, float32" in error


def test_a_buffer_shorter_than_the_networks_is_refused():
    """Its last tensors would have read as zero, as a frontend's held biases do."""
    cfg, params, x, h0 = _case()
    error = _run(lambda: kernels.forward(x, h0, params[:-8], h0, config=cfg, training=False))
    assert f"params has {params.size - 8} elements; expected the network's buffer of {params.size}" in error


def test_byte_buffers_must_be_exactly_the_size_the_plan_needs(monkeypatch):
    """A weights buffer (or reserve space) larger than the network's was sized for another one; "at least" let the
    forward read it."""
    cfg, params, x, h0 = _case()
    real = kernels.buffer_sizes

    def larger(*args, **kwargs):
        sizes = dict(real(*args, **kwargs))
        sizes["weights"] += 64
        return sizes

    monkeypatch.setattr(kernels, "buffer_sizes", larger)
    needed = real(cfg, T, B, False)["weights"]
    error = _run(lambda: kernels.forward(x, h0, params, h0, config=cfg, training=False))
    assert f"weights has shape ({needed + 64},) of dtype uint8; expected a 1-D uint8 buffer of exactly {needed}" in (
        error
    )


def test_gradient_pieces_must_be_shaped_as_the_params_pieces():
    cfg, params, x, h0 = _case("gru")
    y, h_n, reserve = kernels.forward(x, h0, params, config=cfg, training=True)
    operands = (x, h0, y, h_n, jnp.ones_like(y), jnp.zeros_like(h_n), reserve)
    attrs = dict(
        training=np.bool_(True),
        plain_backward_weights=np.bool_(False),
        **kernels.attributes(cfg),
        piece_offsets=np.zeros(1, np.int64),
        params_elements=np.int64(params.size),
        **kernels.channel_attributes(cfg, None),
    )
    out = [jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(h0.shape, x.dtype)]
    call = jax.ffi.ffi_call(extension.BACKWARD_TARGET, [*out, jax.ShapeDtypeStruct((params.size, 1), params.dtype)])
    error = _run(lambda: call(*operands, params, **attrs))
    assert f"dparams piece 0 has shape ({params.size}, 1); expected params piece 0's, ({params.size},)" in error


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_the_gemm_forward_writes_every_output_at_padding_steps(mode):
    """The recurrence's saved gates (and a GRU's recurrent product) at steps past a row's length are outputs XLA sees:
    written, as zeros, where they were left as the allocation found them (the backward reads none of them there)."""
    cfg = jcr.RNNConfig(mode, 1, 8, 4)
    width = cfg.num_gates * 8
    lengths = jnp.asarray([T, 2, 0], jnp.int32)
    w_in = jax.random.normal(jax.random.key(0), (width, 4))
    w_rec = jax.random.normal(jax.random.key(1), (width, 8))
    b = jax.random.normal(jax.random.key(2), (width,))
    x = jax.random.normal(jax.random.key(3), (T, B, 4))
    h0 = c0 = jax.random.normal(jax.random.key(4), (B, 8))
    packed = kernels.pack_weights(w_rec, B, transpose_b=True)
    kwargs = dict(config=cfg, reverse=False, training=True, weights_dtype=jnp.float32, y_dtype=jnp.float32)
    for _ in range(3):  # fresh allocations each time: whatever they held must not show
        y, _, _, saved = jax.block_until_ready(
            kernels.gemm_forward(x, packed, b, b, h0, w_in, c0 if mode == "lstm" else None, lengths, **kwargs)
        )
        padding = np.arange(T)[:, None] >= np.asarray(lengths)[None, :]
        assert np.all(np.asarray(y)[padding] == 0)
        gates = np.asarray(saved[0])
        assert np.all(gates[padding] == 0) and np.all(np.isfinite(gates))
        assert np.any(gates[~padding] != 0)
        if mode == "gru":
            aux = np.asarray(saved[1])
            assert np.all(aux[padding] == 0) and np.any(aux[~padding] != 0)
