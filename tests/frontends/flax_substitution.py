"""A pytest plugin for the child run of tests/frontends/test_flax_own_tests.py: Flax's own tests of its recurrent layers
(``tests/linen/linen_recurrent_test.py`` and ``tests/nnx/nn/recurrent_test.py`` of the installed Flax's source
distribution) run with jax_cudnn_rnn's modules in place of ``nn.RNN`` and ``nnx.RNN``.

In each file the layer it tests is substituted, mechanically: the file's ``nn`` (linen's file) or ``nnx`` (nnx's) is
Flax's module with ``RNN`` replaced by ``jax_cudnn_rnn.flax.RNN`` (``jax_cudnn_rnn.nnx.RNN``), which take nn.RNN's
(nnx.RNN's) arguments, a cell first; everything else is Flax's own (``nn.Bidirectional`` wraps our modules, the cells
are Flax's, and nnx's file keeps Flax's ``linen.RNN`` as the reference it compares with). Flax is not patched.

Which cases count (``LAYER_CLASSES``: the test classes of the layers): every case of those must pass, except

* ``NOT_THE_LAYER``: cases of those classes that test one cell, a scan of a cell or a helper function, not the layer
  (deselected);
* ``REFUSED``: the layer over a cell this library has no fused kernel for (a ConvLSTM, a user-written cell), which our
  module must refuse with a TypeError or ValueError that says to keep Flax's RNN (strict xfails);
* ``EXPECTED_FAILURES``: documented semantic differences (strict xfails, raising AssertionError).

Cases of the files' other classes (the cells' own tests) are deselected. The outcome of every case goes to the JSON file
named by ``JAX_CUDNN_RNN_FLAX_OUTCOMES`` for the parent test to check."""

from __future__ import annotations

import json
import os
import types

import flax.linen
import pytest
from flax import nnx

from jax_cudnn_rnn import flax as ours_linen
from jax_cudnn_rnn import nnx as ours_nnx

LAYER_CLASSES = ("RNNTest", "BidirectionalTest", "TestRNN")
NOT_THE_LAYER = {
    "RNNTest::test_numerical_equivalence_single_batch_nn_scan": "nn.scan of one cell",
    "RNNTest::test_numerical_equivalence_single_batch_jax_scan": "jax.lax.scan of one cell",
    "RNNTest::test_flip_sequence": "the flip_sequences function",
    "RNNTest::test_flip_sequence_more_feature_dims": "the flip_sequences function",
    "RNNTest::test_flip_sequence_time_major": "the flip_sequences function",
    "RNNTest::test_flip_sequence_time_major_more_feature_dims": "the flip_sequences function",
}
REFUSED = {
    "RNNTest::test_rnn_with_spatial_dimensions": "nn.ConvLSTMCell: no fused kernel (keep nn.RNN)",
    "TestRNN::test_rnn_with_custom_cell": "a user-written cell: no fused kernel (keep nnx.RNN)",
    "TestRNN::test_recurrent_dropout": "a user-written subclass of OptimizedLSTMCell: no fused kernel (keep nnx.RNN)",
}
EXPECTED_FAILURES = {
    # The test compares every output, those past a sequence's length included, with the cell's steps.
    "RNNTest::test_numerical_equivalence_with_mask": (
        "outputs past a sequence's seq_lengths are zero (PyTorch's and cuDNN's packed sequences); nn.RNN runs the cell "
        "over the padding and returns its outputs there (docs/porting.md, Flax linen)"
    ),
}
_outcomes: dict[str, dict[str, str]] = {}


class _Substituted(types.ModuleType):
    """Flax's module ``original`` with the names in ``names`` replaced (what a test file sees as ``nn`` or ``nnx``)."""

    def __init__(self, original: types.ModuleType, **names):
        super().__init__(original.__name__)
        self.__dict__.update(names)
        self._original = original

    def __getattr__(self, name):
        return getattr(self._original, name)


SUBSTITUTES = {
    "linen_recurrent_test": ("nn", _Substituted(flax.linen, RNN=ours_linen.RNN), ours_linen.RNN),
    "recurrent_test": ("nnx", _Substituted(nnx, RNN=ours_nnx.RNN), ours_nnx.RNN),
}


def case(item: pytest.Item) -> str:
    """``Class::test`` of a collected Flax test."""
    return f"{item.cls.__name__}::{item.name}" if item.cls is not None else item.name


def pytest_collection_modifyitems(session, config, items):
    kept, dropped = [], []
    for item in items:
        module = item.module
        name, substitute, layer = SUBSTITUTES[module.__name__.rsplit(".", 1)[-1]]
        setattr(module, name, substitute)
        if getattr(module, name).RNN is not layer:
            raise pytest.UsageError(f"{item.nodeid} does not see {layer} as {name}.RNN")
        if item.cls is None or item.cls.__name__ not in LAYER_CLASSES or case(item) in NOT_THE_LAYER:
            dropped.append(item)
            continue
        kept.append(item)
        if case(item) in REFUSED:
            item.add_marker(pytest.mark.xfail(reason=REFUSED[case(item)], raises=(TypeError, ValueError), strict=True))
        elif case(item) in EXPECTED_FAILURES:
            reason = EXPECTED_FAILURES[case(item)]
            item.add_marker(pytest.mark.xfail(reason=reason, raises=AssertionError, strict=True))
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def pytest_runtest_logreport(report):
    name = report.nodeid.split("::", 1)[1]
    if report.when == "call" or report.outcome != "passed":  # a setup skip or error is the case's outcome
        if report.skipped:
            outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
            reason = report.wasxfail if hasattr(report, "wasxfail") else str(report.longrepr[-1])
        else:
            outcome, reason = report.outcome, ""
            if report.failed:
                reason = str(report.longrepr)[-1500:]
        _outcomes.setdefault(name, {"outcome": outcome, "reason": reason})


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("JAX_CUDNN_RNN_FLAX_OUTCOMES")
    if path:
        with open(path, "w") as file:
            json.dump(_outcomes, file, indent=1)
