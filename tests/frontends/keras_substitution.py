"""A pytest plugin for the child run of tests/frontends/test_keras_own_tests.py: Keras's own test files for LSTM, GRU
and SimpleRNN run with jax_cudnn_rnn.keras's classes in place of Keras's.

The test files call ``keras.src.layers.LSTM(...)`` (imported as ``from keras.src import layers``) when each test runs,
so replacing the three names on ``keras.src.layers`` (and ``keras.layers``) before collection substitutes ours
everywhere the files build a layer; collection checks that each file sees ours. ``EXPECTED_FAILURES`` are the cases that
need what the core does not run yet (issue 40 item 1): strict xfails that must raise the ValueError our constructors
give, so each one fails the run the day it passes. The outcome of every case goes to the JSON file named by
``JAX_CUDNN_RNN_KERAS_OUTCOMES`` for the parent test to check."""

from __future__ import annotations

import json
import os

import keras
import pytest
from keras.src import layers

from jax_cudnn_rnn import keras as ours

NAMES = ("LSTM", "GRU", "SimpleRNN")
EXPECTED_FAILURES: dict[str, str] = {}
_outcomes: dict[str, dict[str, str]] = {}


def case(item: pytest.Item) -> str:
    """``Class::test`` of a collected Keras test."""
    return f"{item.cls.__name__}::{item.name}" if item.cls is not None else item.name


def pytest_configure(config):
    for name in NAMES:
        setattr(layers, name, getattr(ours, name))
        setattr(keras.layers, name, getattr(ours, name))


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        seen = {name: getattr(item.module.layers, name) for name in NAMES}
        if any(seen[name] is not getattr(ours, name) for name in NAMES):
            raise pytest.UsageError(f"{item.nodeid} builds {seen}, not jax_cudnn_rnn.keras's classes")
        reason = EXPECTED_FAILURES.get(case(item))
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, raises=ValueError, strict=True))


def pytest_runtest_logreport(report):
    name = report.nodeid.split("::", 1)[1]
    if report.when == "call" or report.outcome != "passed":  # a setup skip or error is the case's outcome
        if report.skipped:
            outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
            reason = report.wasxfail if hasattr(report, "wasxfail") else str(report.longrepr[-1])
        else:
            outcome, reason = report.outcome, ""
        _outcomes.setdefault(name, {"outcome": outcome, "reason": reason})


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("JAX_CUDNN_RNN_KERAS_OUTCOMES")
    if path:
        with open(path, "w") as file:
            json.dump(_outcomes, file, indent=1)
