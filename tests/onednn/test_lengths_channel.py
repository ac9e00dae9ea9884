"""The padding channel of lengths on oneDNN (jax_cudnn_rnn/backends/fused/lengths.py) written by the handlers
(onednn/weights.cc, network.h InputChannel): the params go to the kernel as they are, no widened copy of the buffer is
built in XLA, the kernel's results and gradients are those of the widened buffer, and a malformed channel description
is refused by the handler, naming it."""

from __future__ import annotations

import dataclasses
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import layout
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.fused import lengths
from jax_cudnn_rnn.backends.onednn import backend as onednn_backend
from jax_cudnn_rnn.backends.onednn import extension, kernels

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import skips
from support import draw_inputs, make_config, require_extension

T, B = 5, 3
LENGTHS = np.array([5, 2, 0], np.int32)


@pytest.fixture(autouse=True)
def native():
    require_extension(extension.EXTENSION, skips.REQUIRE_ONEDNN)


def _runs_or_skip(cfg):
    """Skips where oneDNN has no kernels for ``cfg`` on this CPU (bfloat16 below AVX-512)."""
    if why := onednn_backend.unsupported_reason(cfg):
        pytest.skip(why)


def _wide(cfg):
    return dataclasses.replace(cfg, input_size=lengths.channel_width(cfg), input_mode="linear_input")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("differentiated", [False, True], ids=["forward", "grad"])
def test_an_lstm_with_lengths_builds_no_widened_buffer(dtype, differentiated):
    """The compiled call has no array of the widened buffer's size (what ``with_channel`` built at every call, and
    its gradient): the weights call reads the params themselves, and the backward writes their gradient."""
    cfg = jcr.RNNConfig("lstm", input_size=6, num_units=4, num_layers=1, dtype=dtype)
    _runs_or_skip(cfg)
    wide = layout.params_size(_wide(cfg))
    assert wide != layout.params_size(cfg)
    params, x, h0, c0 = (jnp.asarray(a) for a in draw_inputs(cfg, np.random.default_rng(0), steps=T, batch=B))

    def loss(params, x):
        outputs = jcr.rnn(params, x, h0, c0, cfg, seq_lengths=jnp.asarray(LENGTHS), implementation="onednn")
        return sum(jnp.sum(o.astype(jnp.float32)) for o in outputs)

    step = jax.grad(loss) if differentiated else loss
    text = jax.jit(step).lower(params, x).compile().as_text()
    assert extension.WEIGHTS_TARGET in text
    assert (extension.BACKWARD_TARGET in text) == differentiated
    assert f"[{wide}]" not in text, text
    calls = [line for line in text.splitlines() if f'custom_call_target="{extension.WEIGHTS_TARGET}"' in line]
    assert len(calls) == 1 and f"[{layout.params_size(cfg)}]" in calls[0], calls


CASES = [
    ("lstm", {}),
    ("lstm", {"input_mode": "skip_input"}),
    ("lstm", {"dtype": "bfloat16"}),
    ("rnn_relu", {}),
]


@pytest.mark.parametrize("mode,extra", CASES, ids=str)
def test_the_channel_written_by_the_handlers_equals_the_widened_buffer(mode, extra):
    """oneDNN's kernel (training forward and backward) given the params and the channel (``Call.input_channel``, x
    wider than the config) against the same kernel given ``with_channel``'s widened buffer: the same outputs, and the
    same gradients (the params' is the widened buffer's less the channel's columns: ``_widened``'s vjp)."""
    cfg = make_config(mode, 1, "unidirectional", **extra)
    _runs_or_skip(cfg)
    params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(3), steps=T, batch=B)
    wide_params, wide_cfg = lengths.with_channel(jnp.asarray(params), cfg)
    extra_columns = np.random.default_rng(4).integers(0, 2, (T, B, wide_cfg.input_size - cfg.input_size))
    x = np.concatenate([x, extra_columns.astype(x.dtype)], -1)
    states = (h0,) if c0 is None else (h0, c0)

    def run(call, params):
        def loss(params, x, *states):
            inputs = Inputs(params, x, states[0], states[1] if len(states) > 1 else None, None, None, None)
            out = [o for o in onednn_backend.rnn(call, inputs) if o is not None]
            return sum(jnp.sum(o.astype(jnp.float32) * (i + 1.0)) for i, o in enumerate(out)), out

        grad = jax.value_and_grad(loss, argnums=tuple(range(2 + len(states))), has_aux=True)
        (_, out), grads = jax.jit(grad)(params, x, *states)
        return out, grads

    got, got_grads = run(Call(cfg, T, B, input_channel=lengths.CHANNEL_WEIGHTS[mode]), params)
    want, want_grads = run(Call(wide_cfg, T, B), wide_params)
    want_grads = (lengths._widened_bwd(mode, *_widening(cfg, wide_cfg), None, want_grads[0])[0], *want_grads[1:])
    for g, w in zip([*got, *got_grads], [*want, *want_grads], strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), atol=1e-6, rtol=1e-6)


def _widening(cfg, wide_cfg):
    """``lengths._widened``'s static arguments (rows, input_size, width, has_input) for ``cfg``."""
    return cfg.num_gates * cfg.num_units, cfg.input_size, wide_cfg.input_size, not cfg.skip_input


def _weights_call(cfg, params, x, **channel):
    """The weights handler called directly on ``params`` of ``cfg`` for the network as wide as ``x``, with the
    channel attributes ``channel``."""
    width = x.shape[-1]
    out = jax.ShapeDtypeStruct((kernels.buffer_sizes(kernels.network(cfg, width), T, B, False)["weights"],), np.uint8)
    return jax.ffi.ffi_call(extension.WEIGHTS_TARGET, out)(
        params,
        dtype=cfg.dtype.name,
        max_time=np.int64(T),
        batch=np.int64(B),
        training=np.bool_(False),
        plain_backward_weights=np.bool_(False),
        **kernels.attributes(cfg, width),
        piece_offsets=np.zeros(1, np.int64),
        params_elements=np.int64(params.shape[0]),
        **channel,
    )


def _channel(columns, weights, skip_input=False):
    return dict(
        channel_columns=np.int64(columns),
        channel_weights=np.asarray(weights, np.float32),
        channel_skip_input=np.bool_(skip_input),
    )


@pytest.mark.parametrize(
    "channel,message",
    [
        (_channel(2, [1.0, 2.0, 3.0]), r"channel_weights has 3 entries; expected one per gate \(4\)"),
        (_channel(0, [1.0, 2.0, 3.0, 4.0]), r"channel_columns is 0; expected 0 \(no channel\) or 1 to 7"),
        (_channel(8, [1.0, 2.0, 3.0, 4.0]), r"channel_columns is 8; expected"),
        (_channel(-1, []), r"channel_columns is -1; expected"),
        (_channel(2, [1.0, 2.0, 3.0, 4.0], True), r"channel_skip_input needs the params' input width \(6\)"),
    ],
    ids=["weights", "no-columns", "too-many-columns", "negative", "skip-input"],
)
def test_a_malformed_channel_is_refused_by_the_handler(channel, message):
    """A channel description that does not fit the network (onednn/network.cc DecodeInputChannel) fails the call,
    saying which attribute and what was expected, before any weight is read."""
    cfg = jcr.RNNConfig("lstm", input_size=6, num_units=4, num_layers=1)
    params, x, _, _ = draw_inputs(cfg, np.random.default_rng(0), steps=T, batch=B)
    x = np.concatenate([x, np.zeros((T, B, 2), x.dtype)], -1)
    jax.block_until_ready(_weights_call(cfg, jnp.asarray(params), x, **_channel(2, [1.0, 2.0, 3.0, 4.0])))
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(_weights_call(cfg, jnp.asarray(params), x, **channel))


def test_a_channel_that_does_not_fit_the_config_is_a_value_error():
    """kernels.forward checks the channel before the call: one weight per gate, and an x wider than input_size."""
    cfg = jcr.RNNConfig("lstm", input_size=6, num_units=4, num_layers=1)
    params, x, h0, c0 = (jnp.asarray(a) for a in draw_inputs(cfg, np.random.default_rng(0), steps=T, batch=B))
    with pytest.raises(ValueError, match="channel has 3 weights over 0 extra input columns"):
        kernels.forward(x, h0, params, c0, config=cfg, training=False, channel=(1.0, 2.0, 3.0))
