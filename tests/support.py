"""Helpers shared by the test modules (imported like numpy_reference, from this directory): the small random problems
the oracle comparisons run on, a walk over a jaxpr's equations, sub-jaxprs included, and the PyTorch module that a
config describes."""

from __future__ import annotations

from collections.abc import Iterator

import jax.extend
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import interop

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
T, B = 5, 3
LENGTHS = (2, 5, 1)  # unsorted, includes 1 and T


def make_config(mode, num_layers, direction, input_mode="linear_input", dtype=np.float32, **kw) -> jcr.RNNConfig:
    """H = 4; I = 3, or 4 for skip input (which needs I = H)."""
    input_size = 4 if input_mode == "skip_input" else 3
    return jcr.RNNConfig(mode=mode, num_layers=num_layers, num_units=4, input_size=input_size, direction=direction,
                         input_mode=input_mode, dtype=dtype, **kw)


def draw_inputs(cfg, rng: np.random.Generator, steps: int = T, batch: int = B):
    """(params, x, h0, c0 or None) as NumPy arrays drawn from ``rng`` and rounded to cfg.dtype, so that the float64
    oracle sees exactly the values the implementation under test gets."""
    dt = cfg.dtype
    weights = [rng.uniform(-0.6, 0.6, s.shape).astype(dt) for s in jcr.param_slots(cfg)[0]]
    biases = [rng.uniform(-0.6, 0.6, s.shape).astype(dt) for s in jcr.param_slots(cfg)[1]]
    params = np.asarray(jcr.canonical_to_params(weights, biases, cfg))
    x = rng.normal(size=(steps, batch, cfg.input_size)).astype(dt)
    h0 = (0.5 * rng.normal(size=cfg.state_shape(batch))).astype(dt)
    c0 = (0.5 * rng.normal(size=cfg.cell_shape(batch))).astype(dt) if cfg.mode == "lstm" else None
    return params, x, h0, c0


def jaxpr_eqns(jaxpr) -> Iterator:
    """Every equation of ``jaxpr`` (a core Jaxpr), then those of its sub-jaxprs (scan bodies, custom rules, ...)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from jaxpr_eqns(sub)


def torch_module(config, state_dict=None, seed=0):
    """The ``torch.nn`` module ``interop.torch_module_kwargs(config)`` builds (float32, CPU), with ``state_dict`` (NumPy
    arrays, e.g. from ``interop.canonical_to_torch``) loaded, or seeded random weights; skips without PyTorch."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    module = getattr(torch.nn, interop.torch_module_name(config))(**interop.torch_module_kwargs(config))
    if state_dict is not None:
        module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state_dict.items()})
    return module
