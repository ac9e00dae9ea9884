"""Validates the NumPy oracle (tests/numpy_reference.py) against PyTorch's nn.LSTM / nn.GRU / nn.RNN.

PyTorch is an independent implementation of the same cell equations and the same packed-sequence semantics, so
agreement here is what lets the other tests trust ``numpy_rnn`` as a reference. Weights go into torch from the
canonical lists: ``weight_ih_l{l}{_reverse}`` is the row-concatenation of the G input matrices, ``weight_hh`` of the
G recurrent ones, ``bias_ih`` / ``bias_hh`` likewise, ``weight_hr`` the projection. Skip input (which torch lacks) is
emulated with identity input matrices: x entering every gate unchanged is exactly W_k = I.
"""

from __future__ import annotations

import itertools
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from numpy_reference import GATES, numpy_rnn, random_canonical
from skips import import_or_skip

torch = import_or_skip("torch")

# PyTorch's modes; the oracle's reset-before GRU and Keras's activations, which PyTorch lacks, are checked against
# Keras's own layers through the xla implementation (tests/interop/test_keras_cells.py with
# tests/backends/test_general_cells.py).
TORCH_MODES = {
    "lstm": ("LSTM", {}),
    "gru": ("GRU", {}),
    "rnn_tanh": ("RNN", {"nonlinearity": "tanh"}),
    "rnn_relu": ("RNN", {"nonlinearity": "relu"}),
}


def torch_module(
    weights, biases, mode, num_layers, num_units, input_size, bidirectional, skip_input, proj_size=0, bias_mode="double"
):
    """A float64 torch RNN module loaded from canonical lists."""
    cls_name, kwargs = TORCH_MODES[mode]
    if proj_size:
        kwargs = dict(kwargs, proj_size=proj_size)
    module = getattr(torch.nn, cls_name)(
        input_size, num_units, num_layers=num_layers, bidirectional=bidirectional, bias=bias_mode != "none", **kwargs
    ).double()
    G = GATES[mode]
    H = num_units
    D = 2 if bidirectional else 1
    wi = bi = 0
    with torch.no_grad():
        for layer in range(num_layers):
            for d in range(D):
                suffix = f"l{layer}" + ("_reverse" if d else "")
                if skip_input and layer == 0:
                    w_ih = np.concatenate([np.eye(H, input_size)] * G)
                else:
                    w_ih = np.concatenate(weights[wi : wi + G])
                    wi += G
                w_hh = np.concatenate(weights[wi : wi + G])
                wi += G
                getattr(module, f"weight_ih_{suffix}").copy_(torch.from_numpy(w_ih))
                getattr(module, f"weight_hh_{suffix}").copy_(torch.from_numpy(w_hh))
                if proj_size:
                    getattr(module, f"weight_hr_{suffix}").copy_(torch.from_numpy(weights[wi]))
                    wi += 1
                if bias_mode == "none":
                    continue
                zeros = np.zeros(G * H)
                if bias_mode in ("double", "single_input"):
                    b_ih = np.concatenate(biases[bi : bi + G])
                    bi += G
                else:
                    b_ih = zeros
                if bias_mode in ("double", "single_recurrent"):
                    b_hh = np.concatenate(biases[bi : bi + G])
                    bi += G
                else:
                    b_hh = zeros
                getattr(module, f"bias_ih_{suffix}").copy_(torch.from_numpy(b_ih))
                getattr(module, f"bias_hh_{suffix}").copy_(torch.from_numpy(b_hh))
    assert wi == len(weights) and bi == len(biases)
    return module


def run_torch(module, mode, x, h0, c0, seq_lengths=None):
    """Runs a torch module time-major; with seq_lengths through pack_padded_sequence(enforce_sorted=False)."""
    T = x.shape[0]
    xt = torch.from_numpy(x)
    state = (torch.from_numpy(h0), torch.from_numpy(c0)) if mode == "lstm" else torch.from_numpy(h0)
    # oneDNN's LSTM has no projection: PyTorch would try it, warn, and fall back to its own kernel, which is asked
    # for directly here (the same computation, without the warning).
    use_onednn = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = use_onednn and not module.proj_size
    try:
        with torch.no_grad():
            if seq_lengths is None:
                y, hidden = module(xt, state)
            else:
                lengths = torch.as_tensor(seq_lengths, dtype=torch.int64)
                packed = torch.nn.utils.rnn.pack_padded_sequence(xt, lengths, enforce_sorted=False)
                y, hidden = module(packed, state)
                y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=T)
    finally:
        torch.backends.mkldnn.enabled = use_onednn
    if mode == "lstm":
        return y.numpy(), hidden[0].numpy(), hidden[1].numpy()
    return y.numpy(), hidden.numpy(), None


def make_case(
    seed,
    mode,
    num_layers,
    H,
    I,
    bidirectional,
    skip_input,
    T=5,
    B=3,
    with_lengths=False,
    proj_size=0,
    bias_mode="double",
):
    rng = np.random.default_rng(seed)
    D = 2 if bidirectional else 1
    hidden = proj_size or H
    weights, biases = random_canonical(
        rng, mode, num_layers, H, I, bidirectional, skip_input, proj_size=proj_size, bias_mode=bias_mode
    )
    x = rng.normal(size=(T, B, I))
    h0 = rng.normal(size=(num_layers * D, B, hidden)) * 0.5
    c0 = rng.normal(size=(num_layers * D, B, H)) * 0.5 if mode == "lstm" else None
    # Distinct lengths including 1 and T, unsorted, so enforce_sorted=False and padding both matter.
    lengths = np.array([2, T, 1][:B]) if with_lengths else None
    return weights, biases, x, h0, c0, lengths


def assert_all_close(ours, theirs, atol=1e-10):
    y, h, c = ours
    ty, th, tc = theirs
    np.testing.assert_allclose(y, ty, rtol=0, atol=atol)
    np.testing.assert_allclose(h, th, rtol=0, atol=atol)
    if tc is None:
        assert c is None
    else:
        np.testing.assert_allclose(c, tc, rtol=0, atol=atol)


@pytest.mark.parametrize(
    "mode,num_layers,bidirectional,with_lengths",
    list(itertools.product(TORCH_MODES, (1, 2, 3), (False, True), (False, True))),
)
def test_linear_input_matches_torch(mode, num_layers, bidirectional, with_lengths):
    H, I = 4, 3
    w, b, x, h0, c0, lengths = make_case(
        num_layers * 7 + bidirectional, mode, num_layers, H, I, bidirectional, False, with_lengths=with_lengths
    )
    module = torch_module(w, b, mode, num_layers, H, I, bidirectional, False)
    ours = numpy_rnn(w, b, x, h0, c0, mode, num_layers, H, bidirectional, False, seq_lengths=lengths)
    assert_all_close(ours, run_torch(module, mode, x, h0, c0, lengths))
    if lengths is not None:  # padding really is zero and the packed outputs are not trivially zero
        assert np.all(ours[0][lengths[0] :, 0] == 0)
        assert np.all(np.abs(ours[0][: lengths[0], 0]).max(axis=-1) > 0)


@pytest.mark.parametrize(
    "mode,bidirectional,with_lengths", list(itertools.product(TORCH_MODES, (False, True), (False, True)))
)
def test_skip_input_matches_torch_with_identity_input_matrices(mode, bidirectional, with_lengths):
    H = I = 4
    w, b, x, h0, c0, lengths = make_case(11, mode, 2, H, I, bidirectional, True, with_lengths=with_lengths)
    module = torch_module(w, b, mode, 2, H, I, bidirectional, True)
    ours = numpy_rnn(w, b, x, h0, c0, mode, 2, H, bidirectional, True, seq_lengths=lengths)
    assert_all_close(ours, run_torch(module, mode, x, h0, c0, lengths))


@pytest.mark.parametrize(
    "bidirectional,with_lengths,num_layers", [(False, False, 1), (True, True, 2), (True, False, 2)]
)
def test_lstm_projection_matches_torch(bidirectional, with_lengths, num_layers):
    H, I, P = 5, 3, 2
    w, b, x, h0, c0, lengths = make_case(
        3, "lstm", num_layers, H, I, bidirectional, False, with_lengths=with_lengths, proj_size=P
    )
    module = torch_module(w, b, "lstm", num_layers, H, I, bidirectional, False, proj_size=P)
    ours = numpy_rnn(w, b, x, h0, c0, "lstm", num_layers, H, bidirectional, False, seq_lengths=lengths, proj_size=P)
    assert ours[0].shape == (5, 3, (2 if bidirectional else 1) * P)
    assert_all_close(ours, run_torch(module, "lstm", x, h0, c0, lengths))


@pytest.mark.parametrize(
    "mode,bias_mode",
    [
        ("lstm", "none"),
        ("gru", "single_input"),
        ("gru", "single_recurrent"),
        ("rnn_tanh", "none"),
        ("lstm", "single_recurrent"),
    ],
)
def test_bias_modes_match_torch(mode, bias_mode):
    H, I = 4, 3
    w, b, x, h0, c0, lengths = make_case(5, mode, 2, H, I, True, False, with_lengths=True, bias_mode=bias_mode)
    module = torch_module(w, b, mode, 2, H, I, True, False, bias_mode=bias_mode)
    ours = numpy_rnn(w, b, x, h0, c0, mode, 2, H, True, False, seq_lengths=lengths, bias_mode=bias_mode)
    assert_all_close(ours, run_torch(module, mode, x, h0, c0, lengths))


def test_gru_single_input_bias_differs_from_single_recurrent():
    """The GRU's n gate puts b_Rn inside r * (...), so where the single bias lives changes the result: a check that
    numpy_rnn really routes the two bias groups differently."""
    H, I = 4, 3
    rng = np.random.default_rng(0)
    w, b = random_canonical(rng, "gru", 1, H, I, False, False, bias_mode="single_input")
    x = rng.normal(size=(4, 2, I))
    h0 = rng.normal(size=(1, 2, H))
    y_in = numpy_rnn(w, b, x, h0, None, "gru", 1, H, False, False, bias_mode="single_input")[0]
    y_rec = numpy_rnn(w, b, x, h0, None, "gru", 1, H, False, False, bias_mode="single_recurrent")[0]
    assert np.abs(y_in - y_rec).max() > 1e-3


def test_lstm_cell_clip_against_hand_computed_step():
    """cell_clip (which torch lacks): one step, one unit, computed by hand."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    # W_k = [[a_k]], R_k = [[r_k]], biases 0; x = 2, h0 = 0.5, c0 = 3.
    a = [1.0, 0.5, 2.0, -1.0]
    r = [0.2, 0.1, 0.3, 0.4]
    w = [np.array([[v]]) for v in a] + [np.array([[v]]) for v in r]
    b = [np.zeros(1)] * 8
    x, h0, c0 = np.array([[[2.0]]]), np.array([[[0.5]]]), np.array([[[3.0]]])
    pre = [a[k] * 2.0 + r[k] * 0.5 for k in range(4)]
    c_unclipped = sig(pre[1]) * 3.0 + sig(pre[0]) * np.tanh(pre[2])
    # cuDNN's semantics: c0 = 3 is read clipped to 1, the new state is kept unclipped and read clipped by tanh.
    c_clipped_read = sig(pre[1]) * 1.0 + sig(pre[0]) * np.tanh(pre[2])
    assert c_clipped_read > 1.0  # so clip 1.0 bites twice
    _, h, c = numpy_rnn(w, b, x, h0, c0, "lstm", 1, 1, False, False, cell_clip=1.0)
    np.testing.assert_allclose(c[0, 0, 0], c_clipped_read, rtol=1e-14)
    np.testing.assert_allclose(h[0, 0, 0], sig(pre[3]) * np.tanh(1.0), rtol=1e-14)
    _, _, c2 = numpy_rnn(w, b, x, h0, c0, "lstm", 1, 1, False, False)
    np.testing.assert_allclose(c2[0, 0, 0], c_unclipped, rtol=1e-14)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_dropout_masks_match_layer_by_layer_torch(mode):
    """numpy_rnn's dropout_masks multiply layer l's output before layer l+1: compare with single-layer torch modules
    chained by hand with the same masks in between."""
    L, H, I, T, B = 3, 4, 3, 5, 3
    w, b, x, h0, c0, lengths = make_case(9, mode, L, H, I, True, False, with_lengths=True)
    rng = np.random.default_rng(1)
    masks = [(rng.uniform(size=(T, B, 2 * H)) > 0.3) / 0.7 for _ in range(L - 1)]
    ours = numpy_rnn(w, b, x, h0, c0, mode, L, H, True, False, seq_lengths=lengths, dropout_masks=masks)
    G = GATES[mode]
    per_layer_w = 4 * G  # 2 directions x (G input + G recurrent)
    per_layer_b = 4 * G
    inp = x
    hs, cs = [], []
    for layer in range(L):
        in_size = I if layer == 0 else 2 * H
        module = torch_module(
            w[layer * per_layer_w : (layer + 1) * per_layer_w],
            b[layer * per_layer_b : (layer + 1) * per_layer_b],
            mode,
            1,
            H,
            in_size,
            True,
            False,
        )
        sl = slice(2 * layer, 2 * layer + 2)
        y, h, c = run_torch(
            module, mode, np.ascontiguousarray(inp), h0[sl].copy(), None if c0 is None else c0[sl].copy(), lengths
        )
        hs.append(h)
        cs.append(c)
        inp = y * masks[layer] if layer < L - 1 else y
    assert_all_close(ours, (inp, np.concatenate(hs), None if c0 is None else np.concatenate(cs)))
    # and the masks matter
    plain = numpy_rnn(w, b, x, h0, c0, mode, L, H, True, False, seq_lengths=lengths)
    assert np.abs(plain[0] - ours[0]).max() > 1e-3


def segment_bounds(resets_column, length):
    """[(start, end)] of one row's segments: a segment starts at 0 and wherever a valid step has its reset set."""
    starts = [0] + [t for t in range(1, length) if resets_column[t]]
    return list(zip(starts, [*starts[1:], length], strict=True))


@pytest.mark.parametrize(
    "mode,num_layers,bidirectional",
    [("lstm", 2, True), ("gru", 2, False), ("rnn_tanh", 1, True), ("rnn_relu", 3, True), ("lstm", 1, False)],
)
def test_resets_match_torch_run_segment_by_segment(mode, num_layers, bidirectional):
    """Each segment is an independent sequence through the whole stack: torch runs it on its own, from h0/c0 for the
    forward direction of the first segment (zero if the row resets at 0), from h0/c0 for the backward direction of the
    last segment, from zero otherwise. Row 0 resets mid-sequence, row 1 at 0 and on its last step, row 2 also past
    its length (ignored)."""
    T, B, H, I = 7, 3, 4, 3
    D = 2 if bidirectional else 1
    w, b, x, h0, c0, _ = make_case(
        num_layers * 5 + bidirectional, mode, num_layers, H, I, bidirectional, False, T=T, B=B
    )
    lengths = np.array([6, 7, 3])
    resets = np.zeros((T, B), bool)
    resets[[2, 3], 0] = True
    resets[[0, 4, 6], 1] = True
    resets[[1, 5], 2] = True
    module = torch_module(w, b, mode, num_layers, H, I, bidirectional, False)
    ours = numpy_rnn(w, b, x, h0, c0, mode, num_layers, H, bidirectional, False, seq_lengths=lengths, resets=resets)

    y = np.zeros_like(ours[0])
    h_n = np.zeros_like(h0)
    c_n = None if c0 is None else np.zeros_like(c0)
    for row in range(B):
        bounds = segment_bounds(resets[:, row], lengths[row])
        for k, (start, end) in enumerate(bounds):
            first, last = k == 0, k == len(bounds) - 1
            keep = np.zeros((num_layers * D, 1, 1))
            keep[0::D] = first and not resets[0, row]  # forward entries
            if bidirectional:
                keep[1::D] = last  # backward entries
            hs = h0[:, row : row + 1] * keep
            cs = None if c0 is None else c0[:, row : row + 1] * keep
            ys, hn, cn = run_torch(module, mode, np.ascontiguousarray(x[start:end, row : row + 1]), hs, cs)
            y[start:end, row] = ys[:, 0]
            for index in range(num_layers * D):
                if (index % D == 0 and last) or (index % D == 1 and first):
                    h_n[index, row] = hn[index, 0]
                    if c_n is not None:
                        c_n[index, row] = cn[index, 0]
    assert_all_close(ours, (y, h_n, c_n))
    plain = numpy_rnn(w, b, x, h0, c0, mode, num_layers, H, bidirectional, False, seq_lengths=lengths)
    assert np.abs(plain[0] - ours[0]).max() > 1e-3  # the resets matter


def test_zero_length_is_an_empty_sequence():
    """A length of 0: zero outputs and the initial state as the final state; the other rows are unaffected."""
    w, b, x, h0, c0, _ = make_case(4, "lstm", 2, 4, 3, True, False)
    ours = numpy_rnn(w, b, x, h0, c0, "lstm", 2, 4, True, False, seq_lengths=np.array([2, 0, 5]))
    assert np.all(ours[0][:, 1] == 0)
    np.testing.assert_array_equal(ours[1][:, 1], h0[:, 1])
    np.testing.assert_array_equal(ours[2][:, 1], c0[:, 1])
    rest = numpy_rnn(
        w, b, x[:, [0, 2]], h0[:, [0, 2]], c0[:, [0, 2]], "lstm", 2, 4, True, False, seq_lengths=np.array([2, 5])
    )
    for got, want in zip(ours, rest, strict=True):
        np.testing.assert_array_equal(got[:, [0, 2]], want)
