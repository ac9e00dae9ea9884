"""rnn() under the settings a user's process (or JAX's own test suite) may run it under, beside the strict promotion
every test here runs under (tests/strict_promotion.py): ``jax_enable_x64`` (float32 networks stay float32, float64
ones run in float64, both equal to the NumPy oracle), ``jax_debug_nans`` (no NaN anywhere, the padding of ragged
batches and empty sequences included), and ``jax.transfer_guard("disallow")`` around a jitted call whose inputs are
already on the device (nothing crosses to or from the host, compilation included). Each with lengths (but on oneDNN,
which takes none), both directions and two layers, forward and gradients under jax.jit(jax.grad), on the xla (every
mode), reference and (when loaded) oneDNN implementations (``CASES``; issue 37 item 4). The trace-time checks (the
promotion settings) cost nothing; what costs CI time is compiling, so the grid is sampled.

And the core of JAX's own tests/experimental_rnn_test.py (``test_lstm``: values and gradients against
``jax.experimental.rnn.lstm_ref``, ``jax.test_util.check_grads``) on the drop-in ``jax_cudnn_rnn.compat``, which runs
on the CPU; JAX runs that file under rank promotion "raise", where the xla implementation's bias add once failed 11 of
its 21 CPU cases (issue 37)."""

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest
from jax.experimental import rnn as jax_rnn
from skips import REQUIRE_ONEDNN
from strict_promotion import enable_x64
from support import MODES, B, T, draw_inputs, make_config, oracle, require_extension

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import compat
from jax_cudnn_rnn.backends.onednn import extension as onednn_extension

IMPLEMENTATIONS = ("xla", "reference", "onednn")
# CI's time allows every mode on the xla implementation (the default on the CPU), an LSTM on the reference one (the
# cells are the xla implementation's), and an LSTM and a GRU (a cell state; a reset-gate matmul of its own) on oneDNN.
CASES = [("xla", mode) for mode in MODES] + [("reference", "lstm"), ("onednn", "lstm"), ("onednn", "gru")]
# The transfer guard concerns what crosses to the host, not the cell: one mode per implementation.
GUARD_CASES = [("xla", "lstm"), ("xla", "rnn_relu"), ("reference", "gru"), ("onednn", "lstm")]
LENGTHS = (2, 5, 0)  # ragged, with a full and an empty sequence
# Against the float64 oracle: float32 as everywhere else (tests/support.py ORACLE_TOLERANCE), float64 as
# tests/backends/test_xla_vs_numpy.py; float64 gradients against the reference implementation's.
ORACLE_TOLERANCE = {np.float32: 1e-5, np.float64: 1e-12}
GRADIENT_TOLERANCE = {np.float32: 2e-5, np.float64: 1e-11}


def test_the_suite_runs_under_strict_promotion():
    """The autouse fixture of tests/core/conftest.py is in force: every other test here (and in tests/backends and
    tests/frontends) runs under it."""
    assert jax.config.jax_numpy_rank_promotion == "raise"
    assert jax.config.jax_numpy_dtype_promotion == "strict"
    with pytest.raises(ValueError, match="broadcast"):
        jnp.ones((2, 3)) + jnp.ones(3)
    with pytest.raises(jax.dtypes.TypePromotionError):
        jnp.ones(3, jnp.float32) + jnp.ones(3, jnp.int32)


def _config(implementation, mode, dtype=np.float32, **kw):
    """Two bidirectional layers; oneDNN needs its extension (skips, or fails under JAX_CUDNN_RNN_REQUIRE_ONEDNN=1)."""
    if implementation == "onednn":
        require_extension(onednn_extension.EXTENSION, REQUIRE_ONEDNN)
    return make_config(mode, 2, "bidirectional", dtype=dtype, **kw)


def _lengths(implementation):
    """Ragged lengths, but for oneDNN, whose primitives take none (the call would be refused)."""
    return None if implementation == "onednn" else np.array(LENGTHS, np.int32)


def _on_device(*arrays):
    """The arrays put on the device before any guarded call (None stays None)."""
    return [None if a is None else jax.device_put(a) for a in arrays]


def _loss(cfg, implementation, **options):
    """loss(params, x, h0, c0, seq_lengths) = a weighted sum of y, h_n and c_n, with the outputs as aux."""
    wy = np.random.default_rng(3).normal(size=(T, B, cfg.output_size)).astype(cfg.dtype)

    def loss(params, x, h0, c0, seq_lengths):
        y, h_n, c_n = jcr.rnn(params, x, h0, c0, cfg, seq_lengths=seq_lengths, implementation=implementation, **options)
        total = jnp.sum(y * wy) + jnp.sum(h_n) + (0 if c_n is None else jnp.sum(c_n))
        return total, (y, h_n, c_n)

    return loss


def _grads(loss, cfg, arrays):
    """(gradients with respect to params, x, h0 and c0 for an LSTM; the outputs), one jax.jit(jax.grad) of ``loss``."""
    argnums = (0, 1, 2, 3) if cfg.has_cell_state else (0, 1, 2)
    return jax.jit(jax.grad(loss, argnums=argnums, has_aux=True))(*arrays)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("implementation, mode", CASES)
def test_x64_keeps_the_network_dtype_and_matches_the_oracle(implementation, mode, dtype):
    """Under jax_enable_x64 a float32 network computes and returns float32 (nothing promotes to float64, which the
    strict dtype promotion would refuse) and a float64 one float64: outputs equal to the oracle's, float64 gradients
    to the reference implementation's."""
    if implementation == "onednn" and dtype == np.float64:
        pytest.skip("oneDNN's RNN primitives run float32 and bfloat16 (jax_cudnn_rnn/backends/onednn/backend.py)")
    with enable_x64():
        cfg = _config(implementation, mode, dtype)
        params, x, h0, c0 = draw_inputs(cfg, np.random.default_rng(0))
        lengths = _lengths(implementation)
        arrays = _on_device(params, x, h0, c0, lengths)
        grads, outputs = _grads(_loss(cfg, implementation), cfg, arrays)
        # float64 gradients against the reference implementation's; float32 ones compute as without x64 and are
        # compared so in tests/backends/test_gradients.py.
        reference = _grads(_loss(cfg, "reference"), cfg, arrays)[0] if dtype == np.float64 else grads
        want = oracle(cfg, params, x, h0, c0, seq_lengths=lengths)
    tol = ORACLE_TOLERANCE[dtype]
    for name, got, expected in zip(("y", "h_n", "c_n"), outputs, want, strict=True):
        assert (got is None) == (expected is None), name
        if got is not None:
            assert got.dtype == dtype, name
            np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=tol, atol=tol, err_msg=name)
    tol = GRADIENT_TOLERANCE[dtype]
    for name, got, expected in zip(("params", "x", "h0", "c0")[: len(grads)], grads, reference, strict=True):
        assert got.dtype == dtype and np.all(np.isfinite(got)), f"d{name}"
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=tol, atol=tol, err_msg=f"d{name}")


@pytest.mark.parametrize("implementation, mode", CASES)
def test_debug_nans_finds_none(implementation, mode):
    """jax_debug_nans raises at the first NaN it sees: none in the jitted outputs and gradients, nor in the eager
    forward, where it checks every primitive outside the compiled scans (the masks and padding of an empty sequence,
    the inter-layer dropout)."""
    cfg = _config(implementation, mode, dropout=0.25)
    arrays = _on_device(*draw_inputs(cfg, np.random.default_rng(1)), _lengths(implementation))
    loss = _loss(cfg, implementation, is_training=True, dropout_key=jax.random.key(2))
    with jax.debug_nans(True):
        jax.block_until_ready(_grads(loss, cfg, arrays))
        jax.block_until_ready(loss(*arrays))
    with jax.debug_nans(True), pytest.raises(FloatingPointError):  # the check is on: a NaN input is caught
        jax.block_until_ready(_grads(loss, cfg, [arrays[0] * np.float32(np.nan), *arrays[1:]]))


@pytest.mark.parametrize("implementation, mode", GUARD_CASES)
def test_a_jitted_call_on_device_inputs_transfers_nothing(implementation, mode):
    """With params, x, states, lengths and the dropout key on the device, tracing, compiling and running the outputs
    and their gradients under jax.transfer_guard("disallow") transfers nothing: no argument or index that JAX would
    have to copy to the device, no value read back to the host."""
    cfg = _config(implementation, mode, dropout=0.25)
    arrays = _on_device(*draw_inputs(cfg, np.random.default_rng(4)), _lengths(implementation))
    key = jax.device_put(jax.random.key(5))

    def loss(params, x, h0, c0, seq_lengths, key):
        y, h_n, c_n = jcr.rnn(
            params, x, h0, c0, cfg, seq_lengths=seq_lengths, is_training=True, dropout_key=key,
            implementation=implementation,
        )  # fmt: skip
        return jnp.sum(y) + jnp.sum(h_n) + (0 if c_n is None else jnp.sum(c_n)), (y, h_n, c_n)

    run = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))
    with jax.transfer_guard("disallow"):
        for _ in range(2):  # the first call traces and compiles, the second runs the cached executable
            jax.block_until_ready(run(*arrays, key))
    with jax.transfer_guard("disallow"), pytest.raises(Exception, match=r"[Dd]isallowed"):  # the guard is on
        run(np.asarray(arrays[0]), *arrays[1:], key)


# ----------------------------------------------------------------------------------------------------------------------
# JAX's tests/experimental_rnn_test.py test_lstm, on the drop-in: its parameter grid sampled so that each value of each
# parameter appears but num_layers 4 (2 instead: CI's time; JAX samples its 64 combinations too), under rank promotion
# "raise" (this module's fixture).
# ----------------------------------------------------------------------------------------------------------------------

JAX_LSTM_CASES = [  # (batch_size, seq_len, input_size, hidden_size, num_layers, bidirectional)
    (1, 1, 1, 1, 1, False),
    (4, 4, 2, 6, 2, True),
    (1, 4, 2, 1, 1, True),
]


@pytest.mark.parametrize("batch_size, seq_len, input_size, hidden_size, num_layers, bidirectional", JAX_LSTM_CASES)
def test_jax_experimental_rnn_test_lstm(batch_size, seq_len, input_size, hidden_size, num_layers, bidirectional):
    """JAX's test_lstm with ``compat`` for ``jax.experimental.rnn``'s lstm (its GPU-only decorator dropped): values,
    weight gradients and check_grads against ``lstm_ref`` with lengths in [1, seq_len); its tolerances. Also the
    values against the NumPy oracle, and y zero past each length."""
    num_directions = 2 if bidirectional else 1
    seq_length_key, root_key = jax.random.split(jax.random.key(0))
    seq_lengths = jax.random.randint(seq_length_key, (batch_size,), 1, seq_len, dtype=jnp.int32)
    k1, k2, k3, k4 = jax.random.split(root_key, 4)
    x = jax.random.normal(k1, (batch_size, seq_len, input_size), dtype=jnp.float32)
    h_0 = jax.random.normal(k2, (num_directions * num_layers, batch_size, hidden_size), dtype=jnp.float32)
    c_0 = jax.random.normal(k3, (num_directions * num_layers, batch_size, hidden_size), dtype=jnp.float32)
    weights = compat.init_lstm_weight(k4, input_size, hidden_size, num_layers, bidirectional)
    arguments = dict(
        seq_lengths=seq_lengths,
        input_size=input_size,
        hidden_size=hidden_size,
        num_layers=num_layers,
        dropout=False,
        bidirectional=bidirectional,
    )
    mask = (jnp.tile(jnp.arange(seq_len, dtype=jnp.int32)[None], [batch_size, 1]) < seq_lengths[:, None])[..., None]

    def f(weights, x, h_0, c_0):
        y, h, c = compat.lstm(x, h_0, c_0, weights, **arguments)
        return jnp.sum(jnp.where(mask, y, 0.0)), (y, h, c)

    def g(weights, x, h_0, c_0):
        unpacked = jax_rnn.unpack_lstm_weights(weights, input_size, hidden_size, num_layers, bidirectional)
        y, h, c = jax_rnn.lstm_ref(x, h_0, c_0, *unpacked, **arguments)
        return jnp.sum(jnp.where(mask, y, 0.0)), (y, h, c)

    with jax.default_matmul_precision("float32"):  # jitted, unlike JAX's test: a third of the time
        jax.test_util.check_grads(jax.jit(f), (weights, x, h_0, c_0), modes=["rev"], order=1, atol=5e-3, rtol=5e-3)
        (loss, (y, h_n, c_n)), weights_grad = jax.jit(jax.value_and_grad(f, has_aux=True))(weights, x, h_0, c_0)
        (loss_ref, (y_ref, h_n_ref, c_n_ref)), weights_grad_ref = jax.jit(jax.value_and_grad(g, has_aux=True))(
            weights, x, h_0, c_0
        )
    close = dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(weights_grad_ref, weights_grad, **close)
    np.testing.assert_allclose(loss_ref, loss, **close)
    np.testing.assert_allclose(y_ref, y, **close)
    np.testing.assert_allclose(h_n_ref, h_n, **close)
    np.testing.assert_allclose(c_n_ref, c_n, **close)

    direction = "bidirectional" if bidirectional else "unidirectional"
    config = jcr.RNNConfig("lstm", num_layers, hidden_size, input_size, direction)
    want = oracle(config, weights, np.swapaxes(np.asarray(x), 0, 1), h_0, c_0, seq_lengths=seq_lengths)
    np.testing.assert_allclose(np.swapaxes(np.asarray(y), 0, 1), want[0], **close)
    np.testing.assert_allclose(np.asarray(h_n), want[1], **close)
    np.testing.assert_allclose(np.asarray(c_n), want[2], **close)
    for i, length in enumerate(np.asarray(seq_lengths)):
        assert np.all(np.asarray(y)[i, length:] == 0)
