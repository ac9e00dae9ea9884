"""cuDNN's kernels stood in for on the CPU (``CudnnStandIn``): the one stand-in the CPU tests of the cuDNN path use,
through the ``cudnn_stand_in`` fixture (tests/conftest.py) or as a context manager in scripts (tests/floor_smoke.py,
tests/multiprocess.py). Imports nothing but jax, so that scripts run without pytest."""

from __future__ import annotations

import dataclasses
import threading

import jax
import jax.numpy as jnp


class CudnnStandIn:
    """cuDNN's kernels stood in for on the CPU, so that everything this library builds around them runs for real: the
    call's plan, its custom_vjp and eager donation, batch partitioning, vmap rules, chunks, segments and dropout
    (jax_cudnn_rnn/backends/cudnn/). What it replaces is the seam jax_cudnn_rnn/backends/cudnn/kernels.py names:

    * ``kernels.forward`` runs the reference implementation; the training forward writes its (local) batch size into
      every byte of its reserve space [B, plan.row_bytes];
    * ``kernels.backward`` takes the reference implementation's vjp and adds (max - min reserve byte) + (first
      reserve byte - its own batch size) to dx, so a backward handed anything but its own forward's buffer (another
      call's, another shard's, a gathered one) changes dx;
    * a row whose length is below 1 comes out NaN from both (cuDNN refuses such rows: none may reach it);
    * ``plan.reserve_space_size`` answers ``reserve_bytes(problem)`` and records each (problem, algorithm, device)
      asked; the extension counts as loaded and a GPU as present, and "cudnn" may run on every platform.

    The reference implementation, which JAX differentiates itself, rather than the xla one: a cuDNN call is one
    opaque call with no custom_vjp inside, and under ``jax_custom_vjp3`` (a custom_vjp is then a hijax primitive) the
    xla implementation's custom_vjps inside the ``custom_partitioning`` around every kernel call cannot be lowered
    ("Primitive 'custom_partitioning' has is_high=True but no to_lojax lowering rule").

    With ``kernels=False`` only what needs a GPU at trace time is stood in for (availability, the reserve size): the
    real kernels are then lowered (for CUDA) but nothing can run.

    ``forwards`` lists each forward's ``training`` flag in call order, ``plans`` its plan, ``batches`` its batch size
    (traced with the global shapes too, so the smallest is the per-device call under sharding); ``calls`` each kernel
    call as (thread id, "forward" or "backward", the algorithm its plan runs); ``asked`` the reserve-size questions. Use
    it as a context manager (scripts), or through the ``cudnn_stand_in`` fixture of tests/conftest.py.
    """

    def __init__(self, reserve_bytes=lambda problem: 100 * problem.batch, kernels: bool = True):
        self.reserve_bytes = reserve_bytes
        self.kernels = kernels
        self.forwards: list[bool] = []
        self.batches: list[int] = []
        self.plans: list = []
        self.calls: list[tuple[int, str, str]] = []
        self.asked: list[tuple] = []
        self._saved: list[tuple] = []

    def _forward(self, x, h0, params, *rest, plan, config, allow_tf32, training):
        with _traced_constants():
            return self._run_forward(x, h0, params, *rest, plan=plan, config=config, training=training)

    def _run_forward(self, x, h0, params, *rest, plan, config, training):
        self.forwards.append(training)
        self.batches.append(x.shape[1])
        self.plans.append(plan)
        self.calls.append((threading.get_ident(), "forward", plan.algorithm))
        c0 = rest[0] if config.has_cell_state else None
        lengths = rest[-1] if len(rest) > config.has_cell_state else None
        y, h_n, c_n = _refused_rows_nan(lengths, *_reference(params, x, h0, c0, config, lengths))
        outs = (y, h_n) + ((c_n,) if c_n is not None else ())
        return outs + ((jnp.full((x.shape[1], plan.row_bytes), x.shape[1] % 256, jnp.uint8),) if training else ())

    def _backward(self, params, x, h0, y, dy, dh_n, reserve_space, *rest, plan, config, allow_tf32):
        with _traced_constants():
            return self._run_backward(params, x, h0, y, dy, dh_n, reserve_space, *rest, plan=plan, config=config)

    def _run_backward(self, params, x, h0, y, dy, dh_n, reserve_space, *rest, plan, config):
        self.calls.append((threading.get_ident(), "backward", plan.algorithm))
        lstm = config.has_cell_state
        c0, dc_n = rest[:2] if lstm else (None, None)
        lengths = rest[-1] if len(rest) > 2 * lstm else None
        _, vjp = jax.vjp(lambda p, x, h, c: _reference(p, x, h, c, config, lengths), params, x, h0, c0)
        dparams, dx, dh0, dc0 = vjp((dy, dh_n, dc_n))
        reserve = reserve_space.astype(jnp.int32)
        dx = dx + (jnp.max(reserve) - jnp.min(reserve) + reserve[0, 0] - x.shape[1] % 256).astype(dx.dtype)
        _, dx, dh0, dc0 = _refused_rows_nan(lengths, dparams, dx, dh0, dc0)
        return (dparams, dx, dh0) + ((dc0,) if lstm else ()) + (reserve_space,)

    def _reserve_space_size(self, problem, chosen, device=-1):
        self.asked.append((problem, chosen, device))
        return self.reserve_bytes(problem)

    def __enter__(self):
        from jax_cudnn_rnn.backends import registry
        from jax_cudnn_rnn.backends.cudnn import backend as cudnn_backend
        from jax_cudnn_rnn.backends.cudnn import kernels, plan

        patches = [(kernels, "forward", self._forward), (kernels, "backward", self._backward)] if self.kernels else []
        patches += [
            (plan, "reserve_space_size", self._reserve_space_size),
            (cudnn_backend, "unavailable", lambda: None),
        ]
        if self.kernels:  # the stand-in kernels run on every platform
            cudnn = dataclasses.replace(registry._BACKENDS["cudnn"], platforms=None)
            patches.append((registry, "_BACKENDS", {**registry._BACKENDS, "cudnn": cudnn}))
        for module, name, value in patches:
            self._saved.append((module, name, getattr(module, name)))
            setattr(module, name, value)
        return self

    def __exit__(self, *exc):
        for module, name, value in reversed(self._saved):
            setattr(module, name, value)
        self._saved.clear()


def _reference(params, x, h0, c0, config, lengths):
    """The reference implementation over one kernel call's arrays."""
    from jax_cudnn_rnn.backends import reference
    from jax_cudnn_rnn.backends.call import Call, Inputs

    call = Call(config, x.shape[0], x.shape[1], lengths is not None)
    return reference.rnn(call, Inputs(params, x, h0, c0, lengths, None, None))


def _traced_constants():
    """Constants inside a stand-in kernel stay traced even under ``jax.ensure_compile_time_eval`` (autotune measures at
    trace time), as a real kernel call has none: ``custom_partitioning`` refuses a body that closes over constants."""
    from jax._src import config

    return config.eager_constant_folding(False)


def _refused_rows_nan(lengths, *arrays):
    """``arrays`` (batch on axis 1; None passes through) with the rows whose length is below 1 made NaN."""
    if lengths is None:
        return arrays
    refused = (lengths < 1)[None, :, None]
    return tuple(a if a is None or a.ndim != 3 else jnp.where(refused, jnp.nan, a) for a in arrays)
