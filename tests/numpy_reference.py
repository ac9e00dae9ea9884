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
Gate order: LSTM i, f, g, o; GRU r, z, n (both GRUs); RNN one gate.

Modes: cuDNN's four, and "gru_reset_before", the GRU that applies the reset gate before the recurrent matrix (Keras's
``GRU(reset_after=False)``): n = act(W_n x + b_Wn + R_n (r * h) + b_Rn). ``activation`` / ``recurrent_activation``
name the candidate and the gates' activation (None: tanh, relu for rnn_relu / sigmoid), with Keras 3's definitions
written out below from its documentation. ``recurrent_masks`` are Keras's recurrent dropout: gate k's recurrent
product reads h * mask_k.
"""

from __future__ import annotations

import math

import numpy as np

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1, "gru_reset_before": 3}


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _softplus(v):
    return np.logaddexp(0.0, v)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
_erf = np.vectorize(math.erf)

#: Keras 3's elementwise activations, as its documentation of keras.activations defines them, in float64.
ACTIVATIONS = {
    "celu": lambda v: np.maximum(v, 0.0) + np.expm1(np.minimum(v, 0.0)),
    "elu": lambda v: np.where(v > 0, v, np.expm1(np.minimum(v, 0.0))),
    "exponential": np.exp,
    "gelu": lambda v: 0.5 * v * (1.0 + _erf(v / np.sqrt(2.0))),
    "hard_shrink": lambda v: np.where(np.abs(v) > 0.5, v, 0.0),
    "hard_sigmoid": lambda v: np.clip(v / 6.0 + 0.5, 0.0, 1.0),
    "hard_silu": lambda v: v * np.clip(v / 6.0 + 0.5, 0.0, 1.0),
    "hard_tanh": lambda v: np.clip(v, -1.0, 1.0),
    "leaky_relu": lambda v: np.where(v >= 0, v, 0.2 * v),
    "linear": lambda v: v,
    "log_sigmoid": lambda v: -_softplus(-v),
    "mish": lambda v: v * np.tanh(_softplus(v)),
    "relu": lambda v: np.maximum(v, 0.0),
    "relu6": lambda v: np.clip(v, 0.0, 6.0),
    "selu": lambda v: _SELU_SCALE * np.where(v > 0, v, _SELU_ALPHA * np.expm1(np.minimum(v, 0.0))),
    "sigmoid": _sigmoid,
    "silu": lambda v: v * _sigmoid(v),
    "soft_shrink": lambda v: np.where(v > 0.5, v - 0.5, np.where(v < -0.5, v + 0.5, 0.0)),
    "softplus": _softplus,
    "softsign": lambda v: v / (1.0 + np.abs(v)),
    "sparse_plus": lambda v: np.where(v <= -1, 0.0, np.where(v >= 1, v, (v + 1.0) ** 2 / 4.0)),
    "sparse_sigmoid": lambda v: np.where(v <= -1, 0.0, np.where(v >= 1, 1.0, 0.5 * (v + 1.0))),
    "squareplus": lambda v: (v + np.sqrt(v * v + 4.0)) / 2.0,
    "tanh": np.tanh,
    "tanh_shrink": lambda v: v - np.tanh(v),
}


def _step(mode, w_in, b_in, w_rec, b_rec, w_proj, x_t, h, c, skip, cell_clip, act, gate_act, rmask):
    """One cell step for one batch of rows. Returns (h_new, c_new). Lists are per gate; rmask: None or a list of G
    masks [rows, hidden] (gate k's recurrent product reads h * rmask[k])."""
    G = GATES[mode]
    # Input part per gate: W_k x + b_Wk; under skip input x itself enters every gate.
    xin = [(x_t if skip else x_t @ w_in[k].T) + b_in[k] for k in range(G)]

    def rec(k, v):  # R_k (v * mask_k) + b_Rk
        return (v if rmask is None else v * rmask[k]) @ w_rec[k].T + b_rec[k]

    if mode == "lstm":
        i = gate_act(xin[0] + rec(0, h))
        f = gate_act(xin[1] + rec(1, h))
        g = act(xin[2] + rec(2, h))
        o = gate_act(xin[3] + rec(3, h))
        # cuDNN's CUDNN_RNN_CLIP_MINMAX clips the cell state where it is read (by this step and by tanh), and keeps
        # the unclipped value as the state.
        clip = (lambda v: v) if cell_clip is None else (lambda v: np.clip(v, -cell_clip, cell_clip))
        c_new = f * clip(c) + i * g
        h_new = o * act(clip(c_new))
        if w_proj is not None:
            h_new = h_new @ w_proj.T
        return h_new, c_new
    if mode in ("gru", "gru_reset_before"):
        r = gate_act(xin[0] + rec(0, h))
        z = gate_act(xin[1] + rec(1, h))
        n = act(xin[2] + (r * rec(2, h) if mode == "gru" else rec(2, r * h)))
        return (1.0 - z) * n + z * h, None
    if mode in ("rnn_tanh", "rnn_relu"):
        return act(xin[0] + rec(0, h)), None
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
    activation=None,
    recurrent_activation=None,
    recurrent_masks=None,
):
    """Runs the stacked RNN in float64. Returns (y [T,B,D*hidden], h_n [L*D,B,hidden], c_n [L*D,B,H] or None).

    seq_lengths: optional [B] ints in [0, T], PyTorch packed-sequence semantics; 0 is an empty sequence (zero outputs,
      final state = initial state).
    dropout_masks: optional list of L-1 arrays [T, B, D*hidden] multiplied into layer l's output before layer l+1.
    resets: optional bool [T, B]; where resets[t, b] a new segment starts at step t: the forward direction's state
      entering step t is zero, and the backward direction's state entering step t - 1 is zero (it reads each segment
      from its last valid step, from zero, except the last segment, which starts from h0's backward entries).
    activation, recurrent_activation: names in ``ACTIVATIONS``, or None for the mode's own (tanh, relu for rnn_relu;
      sigmoid).
    recurrent_masks: optional [L*D, G, B, hidden]: Keras's recurrent dropout, the same masks at every step.
    """
    act = ACTIVATIONS[activation or ("relu" if mode == "rnn_relu" else "tanh")]
    gate_act = ACTIVATIONS[recurrent_activation or "sigmoid"]
    rmasks = None if recurrent_masks is None else np.asarray(recurrent_masks, np.float64)
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
                        mode,
                        w_in,
                        b_in,
                        w_rec,
                        b_rec,
                        w_proj,
                        layer_input[t, b : b + 1],
                        h,
                        c,
                        skip,
                        cell_clip,
                        act,
                        gate_act,
                        None if rmasks is None else [m[b : b + 1] for m in rmasks[idx]],
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
