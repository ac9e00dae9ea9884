"""Helpers shared by the test modules (imported like numpy_reference, from this directory): the small random problems
the oracle comparisons run on, the NumPy oracle applied to an opaque buffer, the inter-layer dropout masks built from
their documented recipe, the skip-or-fail rule for the native extensions, a walk over a jaxpr's equations, sub-jaxprs
included, the PyTorch module that a config describes, what the interop tests share: running ``rnn`` on NumPy
inputs, comparing its three outputs with a peer's, importing an optional peer library (tests/skips.py), and what the
fault tests share: a subprocess runner and a watch for an Orbax save in flight, to kill or interrupt a process at."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from cudnn_stand_in import CudnnStandIn  # noqa: F401 - the tests take it from here
from numpy_reference import numpy_rnn
from skips import import_or_skip, skip_or_fail  # import_or_skip: the interop tests take it from here too

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import interop

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
T, B = 5, 3
LENGTHS = (2, 5, 1)  # unsorted, includes 1 and T
# The implementations the value tests of the wrappers (seed classes, Flax/NNX modules, checkpoints) run under: the
# xla one everywhere, cuDNN where there is a GPU (marked gpu: tests/conftest.py), with their float32 tolerances
# against the float64 oracle (cuDNN's strict float32 math sums in another order than XLA's).
IMPLEMENTATIONS = ("xla", pytest.param("cudnn", marks=pytest.mark.gpu))
ORACLE_TOLERANCE = {"xla": 1e-5, "cudnn": 2e-5}


def make_config(mode, num_layers, direction, input_mode="linear_input", dtype=np.float32, **kw) -> jcr.RNNConfig:
    """H = 4; I = 3, or 4 for skip input (which needs I = H)."""
    input_size = 4 if input_mode == "skip_input" else 3
    return jcr.RNNConfig(
        mode=mode,
        num_layers=num_layers,
        num_units=4,
        input_size=input_size,
        direction=direction,
        input_mode=input_mode,
        dtype=dtype,
        **kw,
    )


def draw_inputs(cfg, rng: np.random.Generator, steps: int = T, batch: int = B):
    """(params, x, h0, c0 or None) as NumPy arrays drawn from ``rng`` and rounded to cfg.dtype, so that the float64
    oracle sees exactly the values the implementation under test gets."""
    dt = cfg.dtype
    weights = [rng.uniform(-0.6, 0.6, s.shape).astype(dt) for s in jcr.layout.param_slots(cfg)[0]]
    biases = [rng.uniform(-0.6, 0.6, s.shape).astype(dt) for s in jcr.layout.param_slots(cfg)[1]]
    params = np.asarray(jcr.canonical_to_params(weights, biases, cfg))
    x = rng.normal(size=(steps, batch, cfg.input_size)).astype(dt)
    h0 = (0.5 * rng.normal(size=cfg.state_shape(batch))).astype(dt)
    c0 = (0.5 * rng.normal(size=cfg.cell_shape(batch))).astype(dt) if cfg.mode == "lstm" else None
    return params, x, h0, c0


# oneDNN's instruction sets with bfloat16 instructions (AVX512-BF16, AMX): where its kernels must run bfloat16.
BF16_ISAS = ("bf16", "amx")


def bfloat16_kernels(implementation: str, config: jcr.RNNConfig | None = None) -> str | None:
    """None where oneDNN runs ``implementation`` on a bfloat16 ``config`` (a small LSTM when None) on this CPU, else
    why not, as the registry says (no bfloat16 kernels below AVX-512: an AVX2 CPU, or one capped with
    ONEDNN_MAX_CPU_ISA). Fails the calling test where the CPU has bfloat16 instructions and the kernels are still
    refused (a skip or a branch not taken would hide that)."""
    from jax_cudnn_rnn.backends import registry
    from jax_cudnn_rnn.backends.call import Call
    from jax_cudnn_rnn.backends.onednn import extension

    config = config or jcr.RNNConfig("lstm", 1, 4, 3, dtype="bfloat16")
    reason = registry.why_not(implementation, "cpu", Call(config, T, B))
    isa = extension.effective_cpu_isa() or ""
    if reason is not None and any(kind in isa for kind in BF16_ISAS):
        pytest.fail(f"{implementation} refuses bfloat16 on a CPU whose oneDNN ISA is {isa}: {reason}")
    return reason


def require_bfloat16_kernels(implementation: str, config: jcr.RNNConfig | None = None) -> None:
    """Skips the calling test where oneDNN has no bfloat16 kernels for ``implementation`` here
    (``bfloat16_kernels``); the float32 tests run everywhere."""
    reason = bfloat16_kernels(implementation, config)
    if reason is not None:
        from jax_cudnn_rnn.backends.onednn import extension

        pytest.skip(
            f"oneDNN has no bfloat16 kernels for {implementation} on this CPU ({extension.effective_cpu_isa()})"
            f": {reason}"
        )


def require_extension(extension, env_var: str) -> None:
    """Skips the calling test when ``extension`` (a ``native_extension.NativeExtension``) is not loaded, or fails it
    when ``env_var`` is "1" (CI sets it where it builds the extension, so that a silently skipped build cannot pass)."""
    if not extension.loaded():
        skip_or_fail(f"{extension.what} not loaded: {extension.error()}", env_var)


def oracle(cfg, params, x, h0, c0, seq_lengths=None, dropout_masks=None, resets=None, recurrent_masks=None):
    """The float64 NumPy oracle (numpy_reference.numpy_rnn) run on the canonical lists of the opaque buffer ``params``
    under ``cfg``: (y, h_n, c_n or None) as float64 arrays."""
    weights, biases = jcr.params_to_canonical(jnp.asarray(params), cfg)
    up = lambda a: None if a is None else np.asarray(a).astype(np.float64)  # noqa: E731
    return numpy_rnn(
        [up(w) for w in weights],
        [up(b) for b in biases],
        up(x),
        up(h0),
        up(c0),
        cfg.mode,
        cfg.num_layers,
        cfg.num_units,
        cfg.num_directions == 2,
        cfg.skip_input,
        seq_lengths=None if seq_lengths is None else np.asarray(seq_lengths),
        dropout_masks=dropout_masks,
        proj_size=cfg.proj_size,
        cell_clip=cfg.cell_clip,
        bias_mode=cfg.bias_mode,
        resets=None if resets is None else np.asarray(resets),
        activation=cfg.activation,
        recurrent_activation=cfg.recurrent_activation,
        recurrent_masks=recurrent_masks,
    )


def documented_dropout_masks(key, cfg, shape) -> list[np.ndarray]:
    """The inter-layer dropout masks as docs/architecture.md describes them, built here rather than taken from the
    package: mask l (l < num_layers - 1) keeps each entry with probability 1 - dropout, drawn as
    ``jax.random.bernoulli(jax.random.fold_in(key, l), 1 - dropout, shape)``, and scales kept entries by
    1 / (1 - dropout). float64 [T, B, D*H] arrays."""
    keep = 1.0 - cfg.dropout
    return [
        np.asarray(jax.random.bernoulli(jax.random.fold_in(key, layer), keep, shape), np.float64) / keep
        for layer in range(cfg.num_layers - 1)
    ]


def documented_recurrent_masks(key, cfg, batch) -> np.ndarray:
    """The recurrent-dropout masks as docs/architecture.md describes them, built here rather than taken from the
    package: for state index i = l*D + d, ``jax.random.bernoulli(fold_in(fold_in(key, 2**31 - 1), i), 1 -
    recurrent_dropout, [G, B, hidden])`` scaled by 1 / (1 - recurrent_dropout). float64 [L*D, G, B, hidden]."""
    keep = 1.0 - cfg.recurrent_dropout
    stream = jax.random.fold_in(key, 2**31 - 1)
    shape = (cfg.num_gates, batch, cfg.hidden_size)
    return np.stack(
        [
            np.asarray(jax.random.bernoulli(jax.random.fold_in(stream, i), keep, shape), np.float64) / keep
            for i in range(cfg.num_layers * cfg.num_directions)
        ]
    )


def mapped_gradients(one, xs, *mapped):
    """``one(params, x, *rest)``'s gradient over ``jax.vmap`` of ``xs`` (and ``mapped``, each mapped on its first axis)
    in both orders: ``grad(vmap)`` (of the elements' summed values) and ``vmap(grad)`` (each element's own), as two
    functions of the parameters."""
    axes = (None, 0, *[0] * len(mapped))

    def grad_of_vmap(params):
        return jax.grad(lambda p: jnp.sum(jax.vmap(one, in_axes=axes)(p, xs, *mapped)))(params)

    def vmap_of_grad(params):
        return jax.vmap(jax.grad(one), in_axes=axes)(params, xs, *mapped)

    return grad_of_vmap, vmap_of_grad


def jaxpr_eqns(jaxpr) -> Iterator:
    """Every equation of ``jaxpr`` (a core Jaxpr), then those of its sub-jaxprs (scan bodies, custom rules, ...) and of
    what its hijax primitives lower to (``_hijax_expansion``)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            yield from jaxpr_eqns(sub)
        if eqn.primitive.name == "call_hi_primitive":
            yield from jaxpr_eqns(_hijax_expansion(eqn))


def _hijax_expansion(eqn):
    """The jaxpr a ``call_hi_primitive`` equation lowers to. Under ``jax_custom_vjp3`` a custom_vjp is such an equation:
    its function's jaxpr is no parameter (a ``jax.stages.Traced`` inside the primitive), and under ``jax.vmap`` the
    primitive becomes a ``VmapOf`` of it, which JAX batches (custom_vmap rules included) only when it lowers the
    program, by the primitive's ``expand``; this traces that ``expand`` on the equation's operand types."""
    prim = eqn.params["_prim"]
    operands = [jax.ShapeDtypeStruct(var.aval.shape, var.aval.dtype) for var in eqn.invars]
    expand = lambda *leaves: jax.tree.leaves(prim.expand(*prim.in_tree.unflatten(leaves)))  # noqa: E731
    return jax.make_jaxpr(expand)(*operands).jaxpr


def torch_module(config, state_dict=None, seed=0):
    """The ``torch.nn`` module ``interop.torch_module_kwargs(config)`` builds (float32, CPU), with ``state_dict`` (NumPy
    arrays, e.g. from ``interop.canonical_to_torch``) loaded, or seeded random weights; skips without PyTorch (fails
    under JAX_CUDNN_RNN_REQUIRE_PEERS)."""
    torch = import_or_skip("torch")
    torch.manual_seed(seed)
    module = getattr(torch.nn, interop.torch_module_name(config))(**interop.torch_module_kwargs(config))
    if state_dict is not None:
        module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state_dict.items()})
    return module


def run_xla(params, config, x, h0, c0, seq_lengths=None):
    """``rnn(implementation="xla")`` on NumPy inputs; returns (y, h_n, c_n or None) as NumPy arrays."""
    y, h_n, c_n = jcr.rnn(
        jnp.asarray(params),
        jnp.asarray(x),
        jnp.asarray(h0),
        None if c0 is None else jnp.asarray(c0),
        config,
        seq_lengths=None if seq_lengths is None else jnp.asarray(seq_lengths, jnp.int32),
        implementation="xla",
    )
    return np.asarray(y), np.asarray(h_n), None if c_n is None else np.asarray(c_n)


def records(params, x, h0, c0, config, seq_lengths=None, dropout_masks=None, resets=None, max_segments=None):
    """The prepared call and its arrays (jax_cudnn_rnn/backends/call.py) that the fused kit's parts take, for tests
    that call them directly (``max_segments``: cuDNN's option, which the reset segments read)."""
    from jax_cudnn_rnn.backends.call import Call, CudnnOptions, Inputs

    call = Call(
        config,
        int(x.shape[0]),
        int(x.shape[1]),
        seq_lengths is not None,
        bool(dropout_masks),
        resets is not None,
        cudnn=CudnnOptions(max_segments=max_segments),
    )
    return call, Inputs(params, x, h0, c0, seq_lengths, resets, dropout_masks)


def positional(run, **options):
    """The kit's ``run(call, inputs)`` as ``run(params, x, h0, c0, config, seq_lengths=None, dropout_masks=None)``,
    the form these tests compare implementations in (``options``: ``records``' other keywords)."""

    def run_positional(params, x, h0, c0, config, seq_lengths=None, dropout_masks=None):
        return run(*records(params, x, h0, c0, config, seq_lengths, dropout_masks, **options))

    return run_positional


def assert_outputs_close(ours, theirs, atol=1e-5, rtol=1e-5, what=""):
    """(y, h_n, c_n) against a peer's or the oracle's, compared in float64; c_n None on both sides unless LSTM."""
    for name, a, b in zip(("y", "h_n", "c_n"), ours, theirs, strict=True):
        if a is None or b is None:
            assert a is None and b is None, f"{what} {name}"
            continue
        np.testing.assert_allclose(
            np.asarray(a, np.float64), np.asarray(b, np.float64), atol=atol, rtol=rtol, err_msg=f"{what} {name}"
        )


def summed_biases(config, biases, exact_gates=()):
    """The canonical biases (bias_mode 'double') that come back from a peer keeping one summed bias per gate: the sum
    as the input bias and a zero recurrent bias, but for ``exact_gates``, where the peer keeps both apart."""
    named = {s.name(config): np.asarray(b) for s, b in zip(jcr.layout.param_slots(config)[1], biases, strict=True)}
    result = []
    for slot in jcr.layout.param_slots(config)[1]:
        name = slot.name(config)
        if config.gate_names[slot.gate] in exact_gates:
            result.append(named[name])
        elif slot.group == "b_recurrent":
            result.append(np.zeros_like(named[name]))
        else:
            result.append(named[name] + named[name.replace("b_input", "b_recurrent")])
    return result


def run_package_child(code: str, tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -c code *args`` in a fresh process with ``env`` added to this one's environment, importing the package
    this process tests (not a checkout's unbuilt copy from the working directory, which is ``tmp_path``)."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(jcr.__file__)))
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env, "PYTHONPATH": package_root},
        cwd=tmp_path,
    )


def run_checked(command: list[str], timeout: float, **kwargs) -> str:
    """Runs ``command`` (``subprocess.run`` keywords in ``kwargs``) and returns its stdout; fails the test with the
    command and the tails of both outputs when it exits with an error."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


def saves_in_flight(directory) -> list[str]:
    """The names of Orbax's temporary directories in ``directory`` (``<step>.orbax-checkpoint-tmp``, as Orbax 0.12
    names them): saves begun and not yet committed."""
    try:
        return sorted(name for name in os.listdir(directory) if ".orbax-checkpoint-tmp" in name)
    except FileNotFoundError:
        return []


def _writing_arrays(save_dir) -> bool:
    """Whether the save in ``save_dir`` (an Orbax temporary directory) has begun writing array data: a file in one of
    tensorstore's ``d/`` folders. Until the save commits, the arrays' writing takes most of its time."""
    return any(os.path.basename(root) == "d" and files for root, _, files in os.walk(save_dir))


def wait_for_a_save_in_flight(
    process: subprocess.Popen, directory, min_step: int, timeout: float, describe=lambda: ""
) -> None:
    """Polls ``directory`` every millisecond until ``process`` is writing the arrays of a step >= ``min_step`` (its
    temporary directory exists and holds array data); fails the test, with ``describe()`` (e.g. the process's output),
    when the process exits first or ``timeout`` seconds pass, and kills the process then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the process exited ({process.returncode}) before a save was seen:\n{describe()}")
        if any(
            int(name.split(".")[0]) >= min_step and _writing_arrays(os.path.join(directory, name))
            for name in saves_in_flight(directory)
        ):
            return
        time.sleep(0.001)
    process.kill()
    pytest.fail(f"no save in flight within {timeout} s:\n{describe()}")
