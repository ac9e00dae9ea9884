"""An independent float64 NumPy implementation of the stacked RNN, written from the cell equations in
docs/architecture.md.

It walks one time step at a time, per layer and direction, over the CANONICAL (weights, biases) lists, and knows
nothing of the opaque buffer: it deliberately imports nothing from ``jax_cudnn_rnn`` so that it can serve as an
independent oracle for every implementation (and is itself validated against PyTorch in
``tests/interop/test_numpy_reference_vs_torch.py``).

Canonical order, per layer l, per direction (forward then backward):
  weights: G input matrices [H, in_l] (absent for layer 0 under skip input), G recurrent matrices [H, hidden],
           then, for a projected LSTM, the projection matrix [P, H];
  biases:  G input biases [H] (absent when bias_mode is "single_recurrent" or "none"), then G recurrent biases [H]
           (absent when bias_mode is "single_input" or "none").
Gate order: LSTM i, f, g, o; GRU r, z, n; RNN one gate.
"""

from __future__ import annotations

import numpy as np

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _step(mode, w_in, b_in, w_rec, b_rec, w_proj, x_t, h, c, skip, cell_clip):
    """One cell step for one batch of rows. Returns (h_new, c_new). Lists are per gate."""
    G = GATES[mode]
    # Input part per gate: W_k x + b_Wk; under skip input x itself enters every gate.
    xin = [(x_t if skip else x_t @ w_in[k].T) + b_in[k] for k in range(G)]
    hrec = [h @ w_rec[k].T + b_rec[k] for k in range(G)]
    if mode == "lstm":
        i = _sigmoid(xin[0] + hrec[0])
        f = _sigmoid(xin[1] + hrec[1])
        g = np.tanh(xin[2] + hrec[2])
        o = _sigmoid(xin[3] + hrec[3])
        # cuDNN's CUDNN_RNN_CLIP_MINMAX clips the cell state where it is read (by this step and by tanh), and keeps
        # the unclipped value as the state.
        clip = (lambda v: v) if cell_clip is None else (lambda v: np.clip(v, -cell_clip, cell_clip))
        c_new = f * clip(c) + i * g
        h_new = o * np.tanh(clip(c_new))
        if w_proj is not None:
            h_new = h_new @ w_proj.T
        return h_new, c_new
    if mode == "gru":
        r = _sigmoid(xin[0] + hrec[0])
        z = _sigmoid(xin[1] + hrec[1])
        n = np.tanh(xin[2] + r * hrec[2])
        return (1.0 - z) * n + z * h, None
    pre = xin[0] + hrec[0]
    if mode == "rnn_tanh":
        return np.tanh(pre), None
    if mode == "rnn_relu":
        return np.maximum(pre, 0.0), None
    raise ValueError(f"unknown mode {mode!r}")


def numpy_rnn(
    weights,
    biases,
    x,
    h0,
    c0,
    mode,
    num_layers,
    num_units,
    bidirectional,
    skip_input,
    seq_lengths=None,
    dropout_masks=None,
    proj_size=0,
    cell_clip=None,
    bias_mode="double",
    resets=None,
):
    """Runs the stacked RNN in float64. Returns (y [T,B,D*hidden], h_n [L*D,B,hidden], c_n [L*D,B,H] or None).

    seq_lengths: optional [B] ints in [0, T], PyTorch packed-sequence semantics; 0 is an empty sequence (zero outputs,
      final state = initial state).
    dropout_masks: optional list of L-1 arrays [T, B, D*hidden] multiplied into layer l's output before layer l+1.
    resets: optional bool [T, B]; where resets[t, b] a new segment starts at step t: the forward direction's state
      entering step t is zero, and the backward direction's state entering step t - 1 is zero (it reads each segment
      from its last valid step, from zero, except the last segment, which starts from h0's backward entries).
    """
    f64 = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    weights = [f64(w) for w in weights]
    biases = [f64(b) for b in biases]
    x = f64(x)
    h0 = f64(h0)
    c0 = None if c0 is None else f64(c0)
    T, B, _ = x.shape
    G = GATES[mode]
    H = num_units
    D = 2 if bidirectional else 1
    hidden = proj_size or H
    lengths = np.full((B,), T, dtype=np.int64) if seq_lengths is None else np.asarray(seq_lengths, np.int64)
    assert np.all(lengths >= 0) and np.all(lengths <= T), lengths
    resets = np.zeros((T, B), bool) if resets is None else np.asarray(resets, bool)
    assert resets.shape == (T, B), resets.shape
    if mode == "lstm":
        assert c0 is not None
    has_in_bias = bias_mode in ("double", "single_input")
    has_rec_bias = bias_mode in ("double", "single_recurrent")

    wi = bi = 0  # cursors into the canonical lists
    layer_input = x
    h_n = np.zeros((num_layers * D, B, hidden))
    c_n = np.zeros((num_layers * D, B, H)) if mode == "lstm" else None
    for layer in range(num_layers):
        skip = skip_input and layer == 0
        out = np.zeros((T, B, D * hidden))
        for d in range(D):
            if skip:
                w_in = None
            else:
                w_in = weights[wi : wi + G]
                wi += G
            w_rec = weights[wi : wi + G]
            wi += G
            w_proj = None
            if proj_size:
                w_proj = weights[wi]
                wi += 1
            if has_in_bias:
                b_in = biases[bi : bi + G]
                bi += G
            else:
                b_in = [np.zeros(H)] * G
            if has_rec_bias:
                b_rec = biases[bi : bi + G]
                bi += G
            else:
                b_rec = [np.zeros(H)] * G
            idx = layer * D + d
            # Each sequence separately: exactly PyTorch's packed-sequence semantics.
            for b in range(B):
                n = int(lengths[b])
                h = h0[idx, b : b + 1]
                c = None if c0 is None else c0[idx, b : b + 1]
                steps = range(n) if d == 0 else range(n - 1, -1, -1)
                for t in steps:
                    # Forward: a segment starts at t. Backward: a segment ends at t (the next starts at t + 1).
                    start = resets[t, b] if d == 0 else (t + 1 < n and resets[t + 1, b])
                    if start:
                        h = np.zeros_like(h)
                        c = None if c is None else np.zeros_like(c)
                    h, c = _step(
                        mode, w_in, b_in, w_rec, b_rec, w_proj, layer_input[t, b : b + 1], h, c, skip, cell_clip
                    )
                    out[t, b, d * hidden : (d + 1) * hidden] = h[0]
                h_n[idx, b] = h[0]
                if c_n is not None:
                    c_n[idx, b] = c[0]
        if dropout_masks is not None and layer < num_layers - 1:
            out = out * f64(dropout_masks[layer])
        layer_input = out
    assert wi == len(weights), (wi, len(weights))
    assert bi == len(biases), (bi, len(biases))
    return layer_input, h_n, c_n


def random_canonical(
    rng, mode, num_layers, num_units, input_size, bidirectional, skip_input, proj_size=0, bias_mode="double", scale=0.5
):
    """Random canonical (weights, biases) lists in float64 with the shapes of docs/architecture.md (for tests)."""
    G = GATES[mode]
    H = num_units
    D = 2 if bidirectional else 1
    hidden = proj_size or H
    weights, biases = [], []
    for layer in range(num_layers):
        in_l = input_size if layer == 0 else D * hidden
        for _ in range(D):
            if not (skip_input and layer == 0):
                weights += [rng.uniform(-scale, scale, (H, in_l)) for _ in range(G)]
            weights += [rng.uniform(-scale, scale, (H, hidden)) for _ in range(G)]
            if proj_size:
                weights.append(rng.uniform(-scale, scale, (proj_size, H)))
            if bias_mode in ("double", "single_input"):
                biases += [rng.uniform(-scale, scale, (H,)) for _ in range(G)]
            if bias_mode in ("double", "single_recurrent"):
                biases += [rng.uniform(-scale, scale, (H,)) for _ in range(G)]
    return weights, biases
