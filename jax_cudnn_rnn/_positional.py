"""The positional signatures that ``jax_cudnn_rnn.xla`` and ``jax_cudnn_rnn.chunking`` documented before 0.2.0, kept
while those names warn (deprecated since 0.2.0, removed in 0.3.0: CHANGELOG.md). The package itself passes a call and
its arrays as records (jax_cudnn_rnn/backends/call.py); each function here builds them and runs what the name always
ran."""

from __future__ import annotations

from typing import Any

from jax_cudnn_rnn.backends import reference, xla
from jax_cudnn_rnn.backends.call import Call, Inputs
from jax_cudnn_rnn.backends.fused import chunking
from jax_cudnn_rnn.config import RNNConfig

reverse_rows = chunking.reverse_rows


def _records(
    params,
    x,
    h0,
    c0,
    config: RNNConfig,
    seq_lengths=None,
    dropout_masks=None,
    precision: str = "float32",
    resets=None,
    recurrent_masks=None,
) -> tuple[Call, Inputs]:
    call = Call(
        config,
        int(x.shape[0]),
        int(x.shape[1]),
        seq_lengths is not None,
        recurrent_masks is not None or bool(dropout_masks),
        resets is not None,
        precision,
        recurrent_dropout=recurrent_masks is not None,
    )
    return call, Inputs(params, x, h0, c0, seq_lengths, resets, dropout_masks, recurrent_masks)


def rnn_xla(params, x, h0, c0, config: RNNConfig, *args: Any, **kwargs: Any):
    """The xla implementation: ``(params, x, h0, c0, config, seq_lengths=None, dropout_masks=None,
    precision="float32", resets=None, recurrent_masks=None)`` after validation."""
    return xla.rnn(*_records(params, x, h0, c0, config, *args, **kwargs))


def rnn_reference(params, x, h0, c0, config: RNNConfig, *args: Any, **kwargs: Any):
    """The reference implementation, with ``rnn_xla``'s arguments."""
    return reference.rnn(*_records(params, x, h0, c0, config, *args, **kwargs))


def _as_runner(run):
    """A positional ``run(params, x, h0, c0, config, seq_lengths, dropout_masks)`` as the kit's ``Runner``."""

    def runner(call: Call, inputs: Inputs):
        return run(inputs.params, inputs.x, inputs.h0, inputs.c0, call.config, inputs.seq_lengths, inputs.dropout_masks)

    return runner


def allow_empty(run):
    """``run`` (positional) with lengths below 1 meaning an empty sequence."""
    wrapped = chunking.allow_empty(_as_runner(run))

    def positional(params, x, h0, c0, config, seq_lengths, dropout_masks):
        return wrapped(*_records(params, x, h0, c0, config, seq_lengths, dropout_masks))

    return positional


def run_chunked(run, max_steps: int, params, x, h0, c0, config: RNNConfig, seq_lengths=None, dropout_masks=None):
    """``run(params, x, h0, c0, config, seq_lengths, dropout_masks)`` as time chunks of at most ``max_steps`` steps."""
    call, inputs = _records(params, x, h0, c0, config, seq_lengths, dropout_masks)
    return chunking.run_chunked(_as_runner(run), max_steps, call, inputs)
