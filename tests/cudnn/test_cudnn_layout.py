"""layout.py against cuDNN itself: the weight-space size and the offset and shape of every matrix and bias that
cudnnGetRNNWeightParams reports, for every mode x direction x input mode x dtype and the projection and bias modes.

Marked ``gpu`` (tests/conftest.py: skipped without the cuDNN extension and a CUDA device). A failure here is a bug in
layout.py.
"""

import itertools
import math

import ml_dtypes
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import layout
from jax_cudnn_rnn.backends.cudnn import extension as _extension

pytestmark = pytest.mark.gpu  # tests/conftest.py: skips without cuDNN and a GPU, fails where the run requires them

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def _configs():
    for mode, direction, input_mode, dtype in itertools.product(
        ["lstm", "gru", "rnn_tanh", "rnn_relu"],
        ["unidirectional", "bidirectional"],
        ["linear_input", "skip_input"],
        DTYPES,
    ):
        yield jcr.RNNConfig(
            mode=mode,
            num_layers=3,
            num_units=6,
            input_size=6 if input_mode == "skip_input" else 5,
            direction=direction,
            input_mode=input_mode,
            dtype=dtype,
        )
    for bias_mode in ["single_input", "single_recurrent", "none"]:
        yield jcr.RNNConfig(
            mode="gru", num_layers=2, num_units=6, input_size=5, direction="bidirectional", bias_mode=bias_mode
        )
    yield jcr.RNNConfig(mode="lstm", num_layers=2, num_units=8, input_size=5, proj_size=3)
    yield jcr.RNNConfig(
        mode="lstm",
        num_layers=2,
        num_units=8,
        input_size=8,
        direction="bidirectional",
        proj_size=5,
        input_mode="skip_input",
        dtype=np.float16,
    )


def _id(cfg):
    return (
        f"{cfg.mode}-{cfg.direction[:3]}-{cfg.input_mode[:4]}-{cfg.dtype.name}-{cfg.bias_mode}"
        f"{'-proj' if cfg.proj_size else ''}"
    )


def _cudnn_report(cfg):
    if cfg.dtype == np.dtype(ml_dtypes.bfloat16) and _extension.module().cudnn_version() < 91300:
        pytest.skip("bfloat16 RNNs need cuDNN >= 9.13")
    return _extension.module().weight_params(
        mode=cfg.mode,
        num_layers=cfg.num_layers,
        num_units=cfg.num_units,
        input_size=cfg.input_size,
        proj_size=cfg.proj_size,
        direction=cfg.direction,
        input_mode=cfg.input_mode,
        bias_mode=cfg.bias_mode,
        cell_clip=cfg.cell_clip or 0.0,
        dtype=cfg.dtype.name,
    )


def _expected(cfg):
    """{(pseudo_layer, lin_layer_id): (matrix slot or None, bias slot or None)} from layout.py."""
    gates = cfg.num_gates
    expected = {}
    for layer, direction in itertools.product(range(cfg.num_layers), range(cfg.num_directions)):
        groups = layout.layer_slots(cfg, layer, direction)
        pseudo_layer = layer * cfg.num_directions + direction
        for gate in range(gates):
            for lin_id, w, b in ((gate, "w_input", "b_input"), (gates + gate, "w_recurrent", "b_recurrent")):
                matrix = next((s for s in groups[w] if s.gate == gate), None)
                bias = next((s for s in groups[b] if s.gate == gate), None)
                expected[pseudo_layer, lin_id] = (matrix, bias)
        if cfg.proj_size:
            expected[pseudo_layer, 8] = (groups["w_projection"][0], None)
    return expected


@pytest.mark.parametrize("cfg", list(_configs()), ids=_id)
def test_layout_matches_cudnn(cfg):
    report = _cudnn_report(cfg)
    itemsize = cfg.dtype.itemsize
    assert report["weight_space_size"] == layout.params_size(cfg) * itemsize, "weight space size"
    expected = _expected(cfg)
    seen = set()
    for entry in report["params"]:
        key = entry["pseudo_layer"], entry["lin_layer_id"]
        matrix, bias = expected[key]
        seen.add(key)
        where = f"pseudo-layer {key[0]}, linLayerID {key[1]}"
        if matrix is None:
            assert entry["matrix_offset"] is None, f"{where}: cuDNN stores a matrix layout.py has not"
        else:
            assert entry["matrix_offset"] == matrix.offset * itemsize, f"{where}: {matrix.name(cfg)} offset"
            shape = entry["matrix_shape"]
            assert math.prod(shape) == matrix.size and tuple(shape[-2:]) == matrix.shape, f"{where}: {shape}"
        if bias is None:
            assert entry["bias_offset"] is None, f"{where}: cuDNN stores a bias layout.py has not"
        else:
            assert entry["bias_offset"] == bias.offset * itemsize, f"{where}: {bias.name(cfg)} offset"
            assert math.prod(entry["bias_shape"]) == bias.size, f"{where}: {entry['bias_shape']}"
    assert seen == set(expected)
