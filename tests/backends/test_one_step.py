"""A call of one time step (issue 60: decoding, RL rollouts): the xla implementation runs a frontend's ``Pieces`` as the
cell's step alone, reading each tensor where it lies (a Flax cell's kernel [in, H] too: the ``transposed`` flags of
``Pieces``). Its values and gradients against the reference implementation's over the same pieces, through ``rnn()``
and through each frontend, in float32 and bfloat16, with lengths, resets, projection, skip input, both directions,
layers, dropout."""

from __future__ import annotations

import collections
import dataclasses
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import _buffer, layout
from jax_cudnn_rnn import flax as jcr_flax
from jax_cudnn_rnn import nnx as jcr_nnx
from jax_cudnn_rnn.backends import cpu_info, registry
from jax_cudnn_rnn.backends.call import Call

B, I, H = 3, 5, 4
TOL = {
    "float32": dict(rtol=2e-5, atol=2e-6),
    "float32, H=I=256": dict(rtol=1e-4, atol=2e-5),  # sums over 512 terms in another order
    "float32, H=I=128": dict(rtol=1e-4, atol=2e-5),
    "float32, vmapped": dict(rtol=1e-4, atol=1e-5),  # the weights' gradients summed over the batch in another order
    "bfloat16": dict(rtol=2e-2, atol=2e-2),
}


def _pieces(config: jcr.RNNConfig, key: jax.Array, transpose_every: int = 2) -> _buffer.Pieces:
    """The pieces of a random buffer of ``config``, every ``transpose_every``-th matrix held transposed [in, H], and
    every third bias absent (held at zero)."""
    buffer = jcr.init_params(key, config)
    weights, biases = layout.param_slots(config)
    arrays, slots, transposed = [], [], []
    for index, slot in enumerate(weights):
        value = buffer[slot.offset : slot.offset + slot.size].reshape(slot.shape)
        flip = index % transpose_every == 0
        arrays.append(value.T if flip else value)
        slots.append(slot)
        transposed.append(flip)
    for index, slot in enumerate(biases):
        if index % 3 == 2:
            continue
        arrays.append(buffer[slot.offset : slot.offset + slot.size] + 0.1)
        slots.append(slot)
        transposed.append(False)
    return _buffer.Pieces(arrays, slots, config, transposed)


def _sines(tree) -> jax.Array:
    """A scalar of every leaf of ``tree``, each weighted apart (sin of the leaf times its position): a loss."""
    return sum(jnp.sum(jnp.sin(a.astype(jnp.float32) * (k + 1))) for k, a in enumerate(jax.tree.leaves(tree)))


def _assert_close(got, want, dtype: str) -> None:
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), **TOL[dtype])


CASES = {
    "lstm": dict(mode="lstm"),
    "gru": dict(mode="gru"),
    "rnn_tanh": dict(mode="rnn_tanh"),
    "lstm-projection": dict(mode="lstm", proj_size=3),
    "gru-skip-input": dict(mode="gru", input_mode="skip_input", input_size=H),
    "lstm-bidirectional-2-layers": dict(mode="lstm", num_layers=2, direction="bidirectional"),
    "gru-2-layers-dropout": dict(mode="gru", num_layers=2, dropout=0.5),
    "lstm-recurrent-dropout": dict(mode="lstm", recurrent_dropout=0.3),
    "lstm-cell-clip": dict(mode="lstm", cell_clip=0.5),
    "gru-reset-before": dict(mode="gru_reset_before"),
}


@pytest.mark.parametrize("implementation", ["xla", "onednn:gemm"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("extras", ["plain", "lengths", "lengths+resets"])
def test_rnn_one_step_on_pieces_matches_the_reference(case, dtype, extras, implementation):
    """The xla implementation's step and oneDNN's recurrence over the pieces where they lie (the CPU's default for a
    frontend's one step where the extension is loaded; skipped where it is not, or does not run the case)."""
    options = dict(CASES[case])
    mode, num_layers = options.pop("mode"), options.pop("num_layers", 1)
    input_size = options.pop("input_size", I)
    try:
        config = jcr.RNNConfig(mode, num_layers, H, input_size, dtype=dtype, **options)
    except (TypeError, ValueError) as error:
        pytest.skip(f"not a config here: {error}")
    keys = jax.random.split(jax.random.key(7), 5)
    pieces = _pieces(config, keys[0])
    d = config.num_layers * config.num_directions
    x = jax.random.normal(keys[1], (1, B, input_size), dtype)
    h0 = jax.random.normal(keys[2], (d, B, config.hidden_size), dtype)
    c0 = jax.random.normal(keys[3], (d, B, H), dtype) if mode == "lstm" else None
    kwargs = {}
    if extras != "plain":  # a row past its length too: its state stays, its output is zero
        kwargs = dict(seq_lengths=jnp.array([1, 0, 1], jnp.int32))
    if extras == "lengths+resets":
        kwargs.update(resets=jnp.array([[True, False, True]]))
    training = config.dropout > 0 or config.recurrent_dropout > 0
    if training:
        kwargs.update(is_training=True, dropout_key=keys[4])
    call = Call(config, 1, B, "seq_lengths" in kwargs, training, "resets" in kwargs, pieces=True)
    call = dataclasses.replace(call, recurrent_dropout=training and config.recurrent_dropout > 0)
    reason = registry.why_not(implementation, "cpu", call)
    if reason is not None:
        pytest.skip(f"{implementation} does not run it here: {reason}")

    def run(implementation):
        def loss(pieces, x, h0, c0):
            y, h_n, c_n = jcr.rnn(pieces, x, h0, c0, config, implementation=implementation, **kwargs)
            total = jnp.sum(y.astype(jnp.float32) * jnp.arange(y.size, dtype=jnp.float32).reshape(y.shape) / y.size)
            total += jnp.sum(jnp.sin(h_n.astype(jnp.float32)))
            if c_n is not None:
                total += jnp.sum(jnp.cos(c_n.astype(jnp.float32)))
            return total, (y, h_n, c_n)

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(pieces, x, h0, c0)

    (grads, outputs), (want_grads, want_outputs) = run(implementation), run("reference")
    _assert_close(outputs, want_outputs, dtype)
    _assert_close(grads, want_grads, dtype)
    assert jax.tree.structure(grads[0]) == jax.tree.structure(pieces)
    for got, array in zip(grads[0].arrays, pieces.arrays, strict=True):
        assert got.shape == array.shape  # a transposed piece's gradient comes back as the piece lies


def test_one_step_runs_the_step_without_a_loop():
    """What makes one step cost a Flax cell's step: no while loop, and undifferentiated no copy of a kernel, transposed
    or not (XLA:CPU copies a transposed operand of a matrix-vector product)."""
    config = jcr.RNNConfig("gru", 1, 16, 16)
    pieces = _pieces(config, jax.random.key(0), transpose_every=1)
    x, h0 = jnp.ones((1, 1, 16)), jnp.ones((1, 1, 16))

    def forward(params, x, h0):
        return jnp.sum(jcr.rnn(params, x, h0, None, config, implementation="xla")[0])

    def hlo(f, params):
        return jax.jit(f).lower(params, x, h0).compile().as_text()

    assert " while(" not in hlo(jax.grad(forward), pieces)
    step = hlo(forward, pieces)
    assert " while(" not in step and " transpose(" not in step and " copy(" not in step


def _linen_cases(dtype: str):
    own = cell = dict(dtype=dtype, param_dtype=dtype)
    return {
        "GRUCell": lambda: jcr_flax.RNN(nn.GRUCell(H, **cell)),
        "LSTMCell": lambda: jcr_flax.RNN(nn.LSTMCell(H, **cell)),
        "OptimizedLSTMCell": lambda: jcr_flax.RNN(nn.OptimizedLSTMCell(H, **cell)),
        "named GRU": lambda: jcr_flax.GRU(H, **own),
        "named LSTM 2 layers bidirectional": lambda: jcr_flax.LSTM(H, num_layers=2, direction="bidirectional", **own),
    }


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(_linen_cases("float32")))
def test_linen_one_step_matches_the_reference(name, dtype):
    module = _linen_cases(dtype)[name]()
    x = jax.random.normal(jax.random.key(1), (B, 1, I), dtype)
    # A Flax cell's orthogonal initializer has no bfloat16 on the CPU: its float32 parameters cast, as a mixed-precision
    # program casts a trained model's
    float32 = _linen_cases("float32")[name]().init(jax.random.key(2), x.astype(jnp.float32))
    variables = jax.tree.map(lambda a: a.astype(dtype), float32)
    carry = module.initialize_carry(jax.random.key(3), x[:, 0].shape)
    carry = jax.tree.map(lambda a: jax.random.normal(jax.random.key(4), a.shape, a.dtype), carry)
    lengths = jnp.array([1, 1, 1])

    def run(implementation):
        def loss(variables, x, carry):
            new, y = module.clone(implementation=implementation).apply(
                variables, x, initial_carry=carry, return_carry=True, seq_lengths=lengths
            )
            return _sines([y, new]), (new, y)

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(variables, x, carry)

    _assert_close(run("xla"), run("reference"), dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["GRUCell", "LSTMCell", "OptimizedLSTMCell", "named GRU"])
def test_nnx_one_step_matches_the_reference(kind, dtype):
    def build(implementation):
        rngs = nnx.Rngs(0)
        if kind == "named GRU":
            return jcr_nnx.GRU(I, H, implementation=implementation, param_dtype=dtype, rngs=rngs)
        cell = getattr(nnx, kind)(I, H, rngs=rngs, dtype=dtype)
        return jcr_nnx.RNN(cell, implementation=implementation)

    x = jax.random.normal(jax.random.key(1), (B, 1, I), dtype)
    results = []
    for implementation in ("xla", "reference"):
        model = build(implementation)
        carry = model.initialize_carry((B, 1, I))
        carry = jax.tree.map(lambda a: jax.random.normal(jax.random.key(4), a.shape, a.dtype), carry)

        def loss(model, x, carry):
            new, y = model(x, initial_carry=carry, return_carry=True)
            return _sines([y, new]), (new, y)

        grads, outputs = nnx.grad(loss, argnums=(0, 1, 2), has_aux=True)(model, x, carry)
        results.append((outputs, jax.tree.leaves(nnx.state(grads[0])), grads[1:]))
    _assert_close(results[0], results[1], dtype)


@pytest.mark.parametrize("kind", ["GRUCell", "OptimizedLSTMCell"])
def test_an_nnx_cells_stacked_kernels_are_read_whole_by_one_step(kind):
    """nnx's GRUCell and OptimizedLSTMCell keep every gate's columns side by side in one kernel [in, G*H]: a lone step
    of the module over that cell runs one product per kernel, as the cell does, and its gradient is one product per
    kernel, with no copy of a gate's columns on the way in (a slice each: nnx's GRU step at B=4, H=I=512 took 0.70 ms
    against 0.35) nor a pass over the kernel's gradient on the way out (pads and adds of the slices' transposes:
    1.49 ms against 1.15). In the compiled program, the only arrays of a kernel's shape are the kernels and their
    gradients' products; none of one gate's."""
    inputs, units = 24, 32
    cell = getattr(nnx, kind)(inputs, units, rngs=nnx.Rngs(0))
    gates = cell.dense_h.kernel.shape[1] // units
    graph, params, rest = nnx.split(jcr_nnx.RNN(cell, implementation="xla"), nnx.Param, ...)
    x = jax.random.normal(jax.random.key(1), (4, 1, inputs))
    carry = nnx.merge(graph, params, rest).initialize_carry((4, 1, inputs))

    def run(params, x, carry):
        return nnx.merge(graph, params, rest)(x, initial_carry=carry, return_carry=True)

    def loss(params, x, carry):
        return _sines(run(params, x, carry))

    for program, kernels in ((run, 0), (jax.grad(loss), 2)):
        text = jax.jit(program).lower(params, x, carry).compile().as_text()
        entry = text[text.index("ENTRY") :]
        shapes = collections.Counter(re.findall(r"= f32\[(\d+,\d+)\]\S* (\w+)\(", entry))
        whole = {f"{inputs},{gates * units}", f"{units},{gates * units}"}
        made = sum(n for (shape, op), n in shapes.items() if shape in whole and op != "parameter")
        gate = sum(n for (shape, op), n in shapes.items() if shape in (f"{inputs},{units}", f"{units},{units}"))
        assert (made, gate) == (kernels, 0), shapes
        products = [
            e.outvars[0].aval.shape
            for e in jax.make_jaxpr(program)(params, x, carry).jaxpr.eqns
            if e.primitive.name == "dot_general"
        ]
        assert sorted(products) == sorted(
            [(4, gates * units)] * 2 + [(gates * units, inputs), (gates * units, units)][:kernels]
        ), products


def _nt_form(eqn) -> str | None:
    """How ``eqn`` runs a product of rows with a weight held transposed where it is one of xla._nt_product's other
    forms (a ``custom_jvp_call`` of products): "rows" (``_nt_by_rows``: one matrix-vector product per row, each row's
    shape), "transposed" (``_nt_transposed``: the weight times the rows' transpose), "one row" (``_one_row``: the
    one product of one row, whose batching chooses again); None otherwise. Looks through the wrappers."""
    name = eqn.primitive.name
    if name == "cond":  # lax.platform_dependent: the form on the CPU, the plain product elsewhere
        call = _form_call(eqn)
        return None if call is None else _nt_form(call)
    if name not in ("custom_jvp_call", "custom_vmap_call"):
        return None
    inner = (eqn.params["call_jaxpr"] if name == "custom_jvp_call" else eqn.params["call"]).jaxpr
    nested = [e for e in inner.eqns if e.primitive.name in ("custom_jvp_call", "custom_vmap_call", "cond")]
    if len(nested) == 1:
        return _nt_form(nested[0])
    dots = [e for e in inner.eqns if e.primitive.name == "dot_general"]
    if dots and all(e.invars[0].aval.ndim == 1 for e in dots):
        return "rows"
    barriers = [e for e in inner.eqns if e.primitive.name == "optimization_barrier"]
    if len(dots) == 1 and len(barriers) == 2 and dots[0].outvars[0].aval.shape[0] == dots[0].invars[0].aval.shape[0]:
        return "transposed"
    if len(dots) == 1 and name == "custom_vmap_call":
        return "one row"
    return None


def _form_call(eqn):
    """The call of a form in the CPU's branch of ``eqn``, the ``cond`` of ``lax.platform_dependent`` that runs
    xla._nt_product's forms on the CPU only; None where there is none."""
    calls = [e for branch in eqn.params["branches"] for e in branch.jaxpr.eqns if _nt_form(e) is not None]
    return calls[0] if len(calls) == 1 else None


def _on_the_cpu(eqns) -> list:
    """``eqns`` with each ``lax.platform_dependent``'s ``cond`` replaced by the equations of its CPU branch."""
    out = []
    for eqn in eqns:
        platforms = eqn.params.get("branches_platforms") if eqn.primitive.name == "cond" else None
        if platforms is None:
            out.append(eqn)
            continue
        branch = next(i for i, names in enumerate(platforms) if names is None or "cpu" in names)
        out += _on_the_cpu(eqn.params["branches"][branch].jaxpr.eqns)
    return out


def _dots(jaxpr) -> list[int]:
    """The number of products in ``jaxpr``'s top level (a product in another form counting one), then in each loop
    body's (scan's), outermost first."""
    counts = [sum(eqn.primitive.name == "dot_general" or _nt_form(eqn) is not None for eqn in jaxpr.eqns)]
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            counts += _dots(eqn.params["jaxpr"].jaxpr)
    return counts


def _forms(jaxpr) -> list[str]:
    return [form for form in map(_nt_form, jaxpr.eqns) if form is not None]


_AVX2 = frozenset({"avx2", "fma"})
_AVX512 = frozenset({"avx2", "fma", "avx512f"})


@pytest.mark.parametrize(
    "flags, batch, units, form",
    [
        (_AVX2, 2, 128, None),
        (_AVX2, 1, 256, "one row"),
        (_AVX2, 2, 256, "rows"),
        (_AVX2, 4, 256, "rows"),
        (_AVX2, 5, 256, None),
        (_AVX512, 1, 128, "one row"),
        (_AVX512, 2, 128, "transposed"),
        (_AVX512, 16, 256, "transposed"),
        (_AVX512, 17, 128, None),
    ],
)
def test_a_few_rows_times_a_weight_held_transposed_run_in_the_cpus_fastest_form(monkeypatch, flags, batch, units, form):
    """A lone step of the named LSTM (its weights [H, in], a product with them transposed) on a CPU with these flags
    (whatever this one is): without AVX-512, at B=2-4, each gate's product runs as B matrix-vector products where the
    weight has 256 x 256 elements or more (XLA:CPU packs a transposed operand for a product of a few rows at every
    call); with it, at B=2-16, as the weight times the rows' transpose; one row as the one product, which ``jax.vmap``
    batches into the form of the rows it batches to; else one product per gate. Values, the
    forward-mode derivative (``jax.jvp``) and the gradient against the reference implementation's; the tangent of the
    weights alone runs no product of the input's tangent."""
    monkeypatch.setattr(cpu_info, "flags", lambda: flags)
    module = jcr_flax.LSTM(units)
    x = jax.random.normal(jax.random.key(1), (batch, 1, units))
    variables = module.init(jax.random.key(2), x)
    carry = jax.tree.map(
        lambda a: jax.random.normal(jax.random.key(4), a.shape), module.initialize_carry(None, x[:, 0].shape)
    )

    def step(implementation):
        def run(variables, x, carry):
            return module.clone(implementation=implementation).apply(
                variables, x, initial_carry=carry, return_carry=True
            )

        return run

    jaxpr = jax.make_jaxpr(step("xla"))(variables, x, carry).jaxpr
    assert _forms(jaxpr) == ([] if form is None else [form] * 8)
    if form == "rows":  # B matrix-vector products, each of one row
        for eqn in jaxpr.eqns:
            if _nt_form(eqn):
                call = _form_call(eqn) if eqn.primitive.name == "cond" else eqn
                inner = [e for e in call.params["call_jaxpr"].jaxpr.eqns if e.primitive.name == "dot_general"]
                assert [tuple(e.invars[0].aval.shape) for e in inner] == [(units,)] * batch
    tangents = jax.tree.map(lambda a: jax.random.normal(jax.random.key(5), a.shape), (variables, x, carry))
    _assert_close(
        jax.jvp(step("xla"), (variables, x, carry), tangents),
        jax.jvp(step("reference"), (variables, x, carry), tangents),
        f"float32, H=I={units}",
    )

    def loss(implementation):
        def total(variables, x, carry):
            return _sines(step(implementation)(variables, x, carry))

        return jax.grad(total, argnums=(0, 1, 2))(variables, x, carry)

    _assert_close(loss("xla"), loss("reference"), f"float32, H=I={units}")
    if form:  # the weights' tangent alone: one product per gate (v dW^T), none of a zero input tangent
        weights_only = jax.make_jaxpr(lambda v, t: jax.jvp(lambda v: step("xla")(v, x, carry), (v,), (t,)))(
            variables, tangents[0]
        ).jaxpr
        full = [eqn for eqn in _on_the_cpu(weights_only.eqns) if eqn.primitive.name == "dot_general"]
        assert all(len(eqn.invars[0].aval.shape) == 2 for eqn in full) and len(full) == 8, len(full)


@pytest.mark.parametrize("flags, form", [(_AVX2, "rows"), (_AVX512, "transposed"), (frozenset(), "rows")])
def test_the_form_of_a_few_rows_follows_the_cpus_flags(monkeypatch, flags, form):
    """With AVX-512 (measured on an Intel Xeon with AMX) four rows times a weight held transposed run as the weight
    times the rows' transpose (the rows lost there: the named GRU's step at B=4, H=I=512 0.667 ms by rows against
    0.434 as one product); without it, or where the CPU's flags cannot be read, as rows, as measured on a Zen 3 with
    AVX2."""
    monkeypatch.setattr(cpu_info, "flags", lambda: flags)
    module = jcr_flax.LSTM(256)
    x = jnp.ones((4, 1, 256))
    variables = module.init(jax.random.key(2), x)
    run = lambda v, x: module.clone(implementation="xla").apply(v, x)  # noqa: E731
    assert _forms(jax.make_jaxpr(run)(variables, x).jaxpr) == [form] * 8


@pytest.mark.parametrize("flags", [_AVX2, _AVX512], ids=["avx2", "avx512"])
def test_the_cpus_forms_are_lowered_for_the_cpu_only(monkeypatch, flags):
    """The forms are this CPU's (its flags; the rows' and the transpose's barriers): a lone step of the named LSTM at
    B=4 lowered for a GPU or a TPU (a host with these flags: a TPU host has AVX-512) runs the plain products, its
    gradient too; lowered for the CPU, the form's products (one per row, or the barriers around the transposed one)."""
    monkeypatch.setattr(cpu_info, "flags", lambda: flags)
    module = jcr_flax.LSTM(256, implementation="xla")
    x = jnp.ones((4, 1, 256))
    variables = module.init(jax.random.key(2), x)
    loss = lambda v, x: _sines(module.apply(v, x))  # noqa: E731
    for program in (module.apply, jax.grad(loss)):
        for platform in ("cpu", "cuda", "tpu"):
            text = jax.export.export(jax.jit(program), platforms=[platform])(variables, x).mlir_module()
            barriers, row_products = (
                text.count("optimization_barrier"),
                len(re.findall(r"dot_general.*\(tensor<256xf32>, tensor<256x256xf32>\)", text)),
            )
            form = "transposed" if barriers else "rows" if row_products else None
            assert form == (None if platform != "cpu" else "transposed" if "avx512f" in flags else "rows"), platform


@pytest.mark.parametrize("batch, form", [(4, "transposed"), (20, None)])
def test_a_step_vmapped_over_the_batch_takes_the_form_of_its_batch(monkeypatch, batch, form):
    """The Equinox modules run one sequence and users ``jax.vmap`` them over the batch: the step is traced at one row,
    and its products' batching chooses the form by the rows it batches to: on a CPU with AVX-512 the transposed form
    at 4 rows (the plain product of 4 rows by a weight held [H, in]: 1.24-1.31x the form's time at H=512), the plain
    product at 20 (the form at 64 rows: 1.16-1.23x). Values and gradients against the reference implementation's."""
    import equinox as eqx

    from jax_cudnn_rnn import equinox as jcr_eqx

    monkeypatch.setattr(cpu_info, "flags", lambda: _AVX512)
    units = 16
    x = jax.random.normal(jax.random.key(1), (batch, 1, units))
    state = tuple(jax.random.normal(jax.random.key(k), (batch, 1, units)) for k in (2, 3))

    def run(implementation):
        module = jcr_eqx.LSTM(units, units, implementation=implementation, key=jax.random.key(0))
        params, static = eqx.partition(module, eqx.is_array)

        def total(params, x, state):
            y, final = jax.vmap(eqx.combine(params, static))(x, state)
            return _sines([y, final])

        return jax.make_jaxpr(total)(params, x, state).jaxpr, jax.grad(total, argnums=(0, 1, 2))(params, x, state)

    jaxpr, got = run("xla")
    assert _forms(jaxpr) == ([form] * 8 if form else [])
    _assert_close(got, run("reference")[1], "float32, vmapped")


def test_the_cpu_flags_come_from_proc_cpuinfo():
    """``cpu_info.flags`` is /proc/cpuinfo's first processor's "flags" field, as the bench records it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            line = next(line for line in f if line.startswith("flags"))
    except (OSError, StopIteration):
        assert cpu_info.flags() == frozenset()
        return
    assert cpu_info.flags() == frozenset(line.split(":", 1)[1].split())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["LSTMCell", "named GRU", "named LSTM 2 layers bidirectional"])
def test_a_decoding_loop_runs_one_product_per_matrix(name, dtype):
    """In a loop whose body closes over the weights (decoding in ``lax.scan``), each step runs one product per matrix
    over its gates concatenated (which XLA hoists out of the loop), as Flax's ``OptimizedLSTMCell``; a lone step under
    ``jit``, whose weights are arguments, one per gate. The loop's values and gradients against the reference
    implementation's (a scan of the step over the same weights)."""
    module = _linen_cases(dtype)[name]()
    steps = 4
    xs = jax.random.normal(jax.random.key(1), (steps, B, 1, I), dtype)
    float32 = _linen_cases("float32")[name]().init(jax.random.key(2), xs[0].astype(jnp.float32))
    variables = jax.tree.map(lambda a: a.astype(dtype), float32)
    carry = module.initialize_carry(jax.random.key(3), xs[0, :, 0].shape)
    carry = jax.tree.map(lambda a: jax.random.normal(jax.random.key(4), a.shape, a.dtype), carry)

    def decode(implementation):
        def run(variables, xs):
            def step(carry, x):
                carry, y = module.clone(implementation=implementation).apply(
                    variables, x, initial_carry=carry, return_carry=True
                )
                return carry, y

            return jax.lax.scan(step, carry, xs)

        return run

    def loss(implementation):
        def total(variables, xs):
            new, ys = decode(implementation)(variables, xs)
            return _sines([ys, new]), (new, ys)

        return jax.jit(jax.grad(total, argnums=(0, 1), has_aux=True))

    _assert_close(loss("xla")(variables, xs), loss("reference")(variables, xs), dtype)

    kernels = sum(a.ndim == 2 for a in jax.tree.leaves(variables))  # one per gate of each matrix
    gates = 4 if "LSTM" in name else 3
    looped = _dots(jax.make_jaxpr(decode("xla"))(variables, xs).jaxpr)
    assert looped[0] == 0 and sum(looped[1:]) == kernels // gates, looped  # one product per matrix, in the loop
    lone = jax.make_jaxpr(
        lambda v, c, x: module.clone(implementation="xla").apply(v, x, initial_carry=c, return_carry=True)
    )(variables, carry, xs[0]).jaxpr
    assert _dots(lone) == [kernels]  # one per gate, each kernel where it lies


def test_only_a_loops_body_closing_over_the_weights_concatenates_them():
    """The step joins each matrix's gates where a loop's body closes over the weights (``lax.scan``, ``fori_loop``,
    ``while_loop``, under ``jax.grad`` too), and nowhere else: not a lone step under ``jax.grad`` of the parameters
    only (the weights the gradient's tracers, the input the jit's), under ``jax.vmap`` over the input, with both
    differentiated, or under a ``jit``, ``checkpoint`` or ``cond`` closing over the weights, where a concatenation
    would copy the weights at every call."""
    module = jcr_flax.LSTM(H)
    x = jnp.ones((1, 1, I))
    variables = module.init(jax.random.key(0), x)
    carry = module.initialize_carry(None, x[:, 0].shape)

    def loss(variables, x):
        return jnp.sum(module.clone(implementation="xla").apply(variables, x, initial_carry=carry))

    def scan(variables, xs):
        return jax.lax.scan(lambda total, x: (total + loss(variables, x), None), 0.0, xs)[0]

    def joins(f, *args) -> bool:
        return "concatenate" in str(jax.make_jaxpr(f)(*args))

    xs = jnp.ones((3, 1, 1, I))
    assert joins(scan, variables, xs) and joins(jax.grad(scan), variables, xs)
    assert not joins(loss, variables, x)
    assert not joins(jax.grad(loss), variables, x)
    assert not joins(jax.grad(loss, argnums=(0, 1)), variables, x)
    assert not joins(jax.vmap(loss, in_axes=(None, 0)), variables, xs)

    def fori(variables, x):
        return jax.lax.fori_loop(0, 3, lambda i, total: total + loss(variables, x), 0.0)

    def while_(variables, x):
        body = lambda state: (state[0] + 1, state[1] + loss(variables, x))  # noqa: E731
        return jax.lax.while_loop(lambda state: state[0] < 3, body, (0, 0.0))[1]

    assert joins(fori, variables, x) and joins(while_, variables, x)
    for wrap in (jax.jit, jax.checkpoint, lambda f: lambda x: jax.lax.cond(True, f, f, x)):
        assert not joins(lambda variables, x, wrap=wrap: wrap(lambda x: loss(variables, x))(x), variables, x)


def _operations(compiled_text: str) -> collections.Counter:
    """The operations of a compiled XLA program, as (result shape with layout, opcode), counted."""
    return collections.Counter(re.findall(r"= (\S+) ([\w-]+)\(", compiled_text))


# Not OptimizedLSTMCell: its step concatenates the gates' kernels at each call, ours reads each where it lies
@pytest.mark.parametrize("cell_type", [nn.GRUCell, nn.LSTMCell, nn.SimpleCell])
def test_the_drop_ins_one_step_compiles_to_flax_cells_program(cell_type):
    """What a one-step call of ``jax_cudnn_rnn.flax.RNN(cell)`` on the xla implementation (where oneDNN's extension is
    not loaded; a GPU's or a TPU's one step) costs is what Flax's cell's step costs: the programs XLA compiles are the
    same operation for operation (shape and opcode), the gradient's exactly, the forward's but for the output's time
    axis ([B, 1, H] where the cell returns [B, H]). Timings of the two (docs/BENCHMARKS.md) then differ by what the
    machine does, not by what runs. (With the extension the CPU's default runs oneDNN's recurrence over the cell's
    tensors instead: tests/onednn/test_gemm_pieces.py.)"""
    batch, units = 4, 16
    cell = cell_type(units)
    x = jax.random.normal(jax.random.key(0), (batch, units))
    carry = cell.initialize_carry(jax.random.key(1), x.shape)
    variables = cell.init(jax.random.key(2), carry, x)
    drop_in = jcr_flax.RNN(cell_type(units), implementation="xla")

    def flax_step(variables, carry, x):
        return cell.apply(variables, carry, x)

    def our_step(variables, carry, x):
        return drop_in.apply(
            {"params": {"cell": variables["params"]}}, x[:, None], initial_carry=carry, return_carry=True
        )

    def total(step):
        return lambda *args: _sines(step(*args))

    def program(f):
        return _operations(jax.jit(f).lower(variables, carry, x).compile().as_text())

    assert program(jax.grad(total(flax_step), argnums=(0, 1, 2))) == program(
        jax.grad(total(our_step), argnums=(0, 1, 2))
    )
    theirs, ours = program(flax_step), program(our_step)
    only_theirs, only_ours = theirs - ours, ours - theirs
    assert all(shape.startswith(f"f32[{batch},{units}]") for shape, _ in only_theirs), only_theirs
    assert all(shape.startswith(f"f32[{batch},1,{units}]") for shape, _ in only_ours), only_ours
    assert sum(only_theirs.values()) <= 1 and sum(only_ours.values()) <= 4, (only_theirs, only_ours)
