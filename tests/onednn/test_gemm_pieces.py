"""A frontend's call of one time step on the CPU (issue 60: decoding, RL rollouts) runs oneDNN's recurrence handlers
(onednn/gemm_recurrence.h) over the frontend's own tensors where they lie: each of a Flax cell's gate kernels, an nnx
GRU's and a Keras layer's stacked kernels whole (Keras's GRU with its z before r). Values and every gradient against
the peer library's own cell or layer (Flax, Keras), the compiled program free of any copy or concatenation of the
weights, the handlers' refusals of blocks that do not hold the weights, and a step under ``jax.vmap`` (an Equinox
module's) left to the xla implementation, whose products take the mapped axis.

Without the extension these tests skip; with JAX_CUDNN_RNN_REQUIRE_ONEDNN=1 (set in CI) they fail instead.
"""

from __future__ import annotations

import os
import re
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import flax as jcr_flax
from jax_cudnn_rnn import nnx as jcr_nnx
from jax_cudnn_rnn.backends.onednn import extension, kernels

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import skips
from support import import_or_skip, require_bfloat16_kernels, require_extension, run_package_child

B, I, H = 3, 6, 5
GEMM_TARGETS = (extension.GEMM_FORWARD_TARGET, extension.GEMM_BACKWARD_TARGET)


@pytest.fixture(autouse=True)
def native():
    """The loaded oneDNN module; skips (or fails under JAX_CUDNN_RNN_REQUIRE_ONEDNN=1) without it."""
    require_extension(extension.EXTENSION, skips.REQUIRE_ONEDNN)


def _sines(tree) -> jax.Array:
    """A loss weighing each leaf apart (sin of the leaf times its position)."""
    return sum(jnp.sum(jnp.sin(a.astype(jnp.float32) * (k + 1))) for k, a in enumerate(jax.tree.leaves(tree)))


def _assert_close(got, want, tolerance: float) -> None:
    got, want = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=tolerance, atol=tolerance)


def _assert_runs_in_place(step, *args) -> None:
    """``step`` (jitted) compiles, on the CPU, to oneDNN's recurrence handlers with no copy or concatenation of the
    weights: no copy or concatenate of as many elements as a weight matrix or more (the biases, [G*H], are joined)."""
    text = step.lower(*args).compile().as_text()
    assert any(target in text for target in GEMM_TARGETS), "oneDNN's recurrence does not run the step"
    moved = [
        int(np.prod([int(d) for d in dims.split(",")]))
        for dims in re.findall(r"= \w+\[([\d,]+)\]\S* (?:copy|concatenate)\(", text[text.index("ENTRY") :])
    ]
    smallest = min(int(np.prod(a.shape)) for a in jax.tree.leaves(args[0]) if np.ndim(a) == 2)
    assert all(size < smallest for size in moved), f"{moved} elements moved; a weight matrix has {smallest}"


LINEN_CELLS = {"LSTMCell": nn.LSTMCell, "GRUCell": nn.GRUCell, "SimpleCell": nn.SimpleCell}


# (batch, H, I): the handlers' own loops (small_products.h) up to 16 rows, their vectors where H >= 32 and I >= 16 and
# their scalar tails elsewhere; oneDNN's products past 16 rows (gemm_recurrence.cc, SmallProducts; a rows block's
# transposed)
SHAPES = {"1 row": (1, H, I), "3 rows": (B, H, I), "vectors and tails": (5, 37, 19), "17 rows": (17, H, I)}
# and for the named modules' rows, oneDNN's products of a rows block as it lies: fewer rows than those transposed,
# weights of more than 2 MiB (a GRU's or LSTM's at H=I=300)
NAMED_SHAPES = {**SHAPES, "8 rows, 2 MiB of weights": (8, 300, 300)}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(LINEN_CELLS))
def test_the_linen_drop_ins_step_reads_the_cells_kernels_and_equals_the_cell(name, dtype, shape):
    """``jax_cudnn_rnn.flax.RNN(cell)``'s one step over the cell's own parameters (a kernel per gate, held [in, H]):
    output, carry and the gradient of every parameter, of the carry and of x against Flax's cell."""
    if dtype == "bfloat16":
        require_bfloat16_kernels("onednn:gemm")
    batch, H, I = SHAPES[shape]  # the module's names, this case's values
    cell = LINEN_CELLS[name](H, dtype=dtype, param_dtype=dtype)
    x = jax.random.normal(jax.random.key(0), (batch, I), dtype)
    carry = jax.tree.map(
        lambda a: jax.random.normal(jax.random.key(1), a.shape, dtype),
        cell.initialize_carry(jax.random.key(2), x.shape),
    )
    variables = LINEN_CELLS[name](H).init(jax.random.key(3), carry, x.astype(jnp.float32))  # no bfloat16 QR
    variables = jax.tree.map(
        lambda a: (a + 0.1 * jax.random.normal(jax.random.key(4), a.shape)).astype(dtype), variables
    )
    drop_in = jcr_flax.RNN(LINEN_CELLS[name](H, dtype=dtype, param_dtype=dtype))

    def ours(v, c, x):
        return drop_in.apply({"params": {"cell": v["params"]}}, x[:, None], initial_carry=c, return_carry=True)

    # The reference: Flax's cell in float32 on the same values (its bfloat16 step rounds each product, and at H=37 its
    # gradients strayed 2-5x further from the float32 cell's than ours, which accumulate in float32)
    reference = LINEN_CELLS[name](H)

    def theirs(v, c, x):
        new, y = reference.apply(*jax.tree.map(lambda a: a.astype(jnp.float32), (v, c, x)))
        return new, y[:, None]

    gradient = lambda step: jax.jit(jax.value_and_grad(lambda *a: _sines(step(*a)), argnums=(0, 1, 2)))  # noqa: E731
    tolerance = 2e-2 if dtype == "bfloat16" else 2e-5
    _assert_close(jax.jit(ours)(variables, carry, x), theirs(variables, carry, x), tolerance)
    _assert_close(gradient(ours)(variables, carry, x), gradient(theirs)(variables, carry, x), tolerance)
    _assert_runs_in_place(jax.jit(ours), variables, carry, x)
    _assert_runs_in_place(gradient(ours), variables, carry, x)


@pytest.mark.parametrize("shape", list(NAMED_SHAPES))
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_the_named_modules_step_reads_its_rows_and_equals_the_xla_step(kind, shape):
    """The named modules hold a tensor per gate as the canonical [H, in] rows (the handlers' rows form, where the
    drop-in's kernels are columns): the one step on "onednn:gemm" against the same module on the xla implementation,
    output, carry and every gradient."""
    batch, H, I = NAMED_SHAPES[shape]  # the module's names, this case's values
    x = jax.random.normal(jax.random.key(0), (batch, 1, I))
    modules = {impl: getattr(jcr_flax, kind)(H, implementation=impl) for impl in ("onednn:gemm", "xla")}
    variables = modules["xla"].init(jax.random.key(1), x)
    carry = jax.tree.map(
        lambda a: jax.random.normal(jax.random.key(2), a.shape),
        modules["xla"].initialize_carry(jax.random.key(3), x[:, 0].shape),
    )

    def step(impl):
        return lambda v, c, x: modules[impl].apply(v, x, initial_carry=c, return_carry=True)

    gradient = lambda f: jax.jit(jax.value_and_grad(lambda *a: _sines(f(*a)), argnums=(0, 1, 2)))  # noqa: E731
    _assert_close(jax.jit(step("onednn:gemm"))(variables, carry, x), step("xla")(variables, carry, x), 2e-5)
    _assert_close(gradient(step("onednn:gemm"))(variables, carry, x), gradient(step("xla"))(variables, carry, x), 2e-5)
    _assert_runs_in_place(jax.jit(step("onednn:gemm")), variables, carry, x)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_nnx_step_reads_the_cells_variables_and_equals_the_cell(kind):
    """``jax_cudnn_rnn.nnx.RNN(cell)``'s one step over an nnx cell's variables (the GRU's kernels stacked [in, 3H], read
    whole as columns; the LSTM's per gate) against the cell's own call, value and gradients."""
    cell_type = nnx.LSTMCell if kind == "lstm" else nnx.GRUCell
    cell = cell_type(I, H, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(0), (B, I))
    carry = jax.tree.map(
        lambda a: jax.random.normal(jax.random.key(1), a.shape), cell.initialize_carry((B, I), nnx.Rngs(1))
    )
    graph, params, rest = nnx.split(jcr_nnx.RNN(cell), nnx.Param, ...)
    cell_graph, cell_params, cell_rest = nnx.split(cell, nnx.Param, ...)

    def ours(p, c, x):
        return nnx.merge(graph, p, rest)(x[:, None], initial_carry=c, return_carry=True)

    def theirs(p, c, x):
        new, y = nnx.merge(cell_graph, p, cell_rest)(c, x)
        return new, y[:, None]

    gradient = lambda step, p: jax.jit(jax.value_and_grad(lambda *a: _sines(step(*a)), argnums=(0, 1, 2)))(p, carry, x)  # noqa: E731
    _assert_close(jax.jit(ours)(params, carry, x), theirs(cell_params, carry, x), 2e-5)
    (value, (d_params, d_carry, dx)), (want_value, (want_params, want_carry, want_dx)) = (
        gradient(ours, params),
        gradient(theirs, cell_params),
    )
    _assert_close((value, d_carry, dx), (want_value, want_carry, want_dx), 2e-5)
    _assert_close(d_params["cell"], want_params, 2e-5)
    _assert_runs_in_place(jax.jit(ours), params, carry, x)


@pytest.mark.parametrize("batch", [2, B, 17])  # 17: the backward's products of a columns block transposed
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "SimpleRNN"])
def test_the_keras_step_reads_the_layers_kernels_and_equals_keras(kind, batch):
    """A Keras layer's one step (``stateless_call`` at T=1) over its variables as they lie (the kernel [in, G*H] whole;
    the GRU's gates z, r, h each a block of its columns, r and z put back in place by where their products land)
    against Keras's own layer, value and gradients."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    keras = import_or_skip("keras")
    if keras.backend.backend() != "jax":
        pytest.skip("Keras runs another backend in this process")
    from jax_cudnn_rnn import keras as jk

    ours, theirs = getattr(jk, kind)(H, return_state=True), getattr(keras.layers, kind)(H, return_state=True)
    for layer in (ours, theirs):
        layer.build((batch, 1, I))
    weights = [
        np.random.default_rng(k).normal(0, 0.5, w.shape).astype(np.float32) for k, w in enumerate(theirs.get_weights())
    ]
    x = jax.random.normal(jax.random.key(0), (batch, 1, I))
    states = [jax.random.normal(jax.random.key(k + 1), (batch, H)) for k in range(2 if kind == "LSTM" else 1)]

    def grads(layer):
        fixed = [v.value for v in layer.non_trainable_variables]

        def loss(trainable, x, states):
            out, _ = layer.stateless_call(trainable, fixed, x, initial_state=states)
            return _sines(out)

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))

    trainable = [jnp.asarray(w) for w in weights]
    _assert_close(grads(ours)(trainable, x, states), grads(theirs)(trainable, x, states), 2e-5)
    fixed = [v.value for v in ours.non_trainable_variables]
    forward = jax.jit(lambda w, x, s: ours.stateless_call(w, fixed, x, initial_state=s)[0])
    _assert_runs_in_place(forward, trainable, x, states)


def test_a_step_under_vmap_is_one_call_and_trains_on_the_xla_step():
    """An Equinox module's one step under the user's ``jax.vmap`` (each sequence a call of one row): its forward is one
    call of oneDNN's recurrence over the mapped rows folded into its batch (``kernels.gemm_forward``), not one per
    row; its training step the xla step's, which JAX differentiates itself under vmap (no handler, no custom_vjp:
    ``hybrid._by_jvp``). Its values against Equinox's own cell, its gradients the xla implementation's."""
    eqx = import_or_skip("equinox")
    from jax_cudnn_rnn import equinox as jcr_eqx

    model = jcr_eqx.LSTM(I, H, key=jax.random.key(0))
    xs = jax.random.normal(jax.random.key(1), (B, 1, I))
    forward = eqx.filter_jit(jax.vmap(lambda m, x: m(x)[0], in_axes=(None, 0)))
    text = forward.lower(model, xs).as_text()
    calls = re.findall(rf"{extension.GEMM_FORWARD_TARGET}.*", text)
    assert len(calls) == 1 and f"tensor<1x{B}x{I}xf32>" in text, text
    cell = model.to_cells()[0][0]
    want = jax.vmap(lambda x: cell(x[0], (jnp.zeros(H), jnp.zeros(H)))[0][None])(xs)
    _assert_close(forward(model, xs), want, 2e-6)

    def loss(m, x):
        return jnp.sum(jax.vmap(lambda x: m(x)[0], in_axes=0)(x) ** 2)

    grads = eqx.filter_jit(eqx.filter_grad(loss))
    assert not any(target in grads.lower(model, xs).as_text() for target in GEMM_TARGETS)
    on_xla = jcr_eqx.LSTM(I, H, implementation="xla", key=jax.random.key(0))
    _assert_close(grads(model, xs), grads(on_xla, xs), 1e-6)


def _forward(x, pieces, blocks, **changes):
    """oneDNN's forward handler over ``pieces`` (a GRU, H=2, I=3: w_in [6, 3], w_rec [6, 2]) read as ``blocks``."""
    config = jcr.RNNConfig("gru", 1, 2, 3)
    b, h0 = jnp.zeros(6), jnp.zeros((x.shape[1], 2))
    kwargs = dict(config=config, reverse=False, training=False, weights_dtype=jnp.float32, y_dtype=jnp.float32)
    y, *_ = kernels.gemm_forward(
        x, pieces[0], b, b, h0, None, None, blocks=blocks, pieces=pieces[1:], **{**kwargs, **changes}
    )
    return jax.block_until_ready(y)


def test_the_handlers_read_blocks_as_numpy_does_and_refuse_those_that_do_not_hold_the_weights():
    """The forward over a kernel held [in, G*H] with its gates in another order (two blocks of columns) and w_rec
    per gate as rows equals NumPy's GRU step; blocks outside their operand, skipping a gate, of another dtype or
    mixing rows and columns on one operand are refused by name, never read."""
    Block = kernels.WeightBlock
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 4, 3)).astype(np.float32)
    w_in, w_rec = rng.normal(size=(6, 3)).astype(np.float32), rng.normal(size=(6, 2)).astype(np.float32)
    kernel = np.concatenate([w_in[2:4].T, w_in[0:2].T, w_in[4:6].T], axis=1)  # [3, 6]: z, r, n
    pieces = [jnp.asarray(kernel), *(jnp.asarray(w_rec[2 * g : 2 * g + 2]) for g in range(3))]
    blocks = (
        Block(0, 0, 2, 0, 1, 1, 6),  # r: columns 2-3
        Block(0, 0, 0, 1, 1, 1, 6),  # z: columns 0-1
        Block(0, 0, 4, 2, 1, 1, 6),  # n: columns 4-5
        *(Block(1, g + 1, 0, g, 1, 2, 1) for g in range(3)),
    )
    y = _forward(jnp.asarray(x), pieces, blocks)
    xp, hp = x[0] @ w_in.T, np.zeros((4, 6), np.float32)  # h0 = 0, biases 0
    r, z = (1 / (1 + np.exp(-(xp[:, k : k + 2] + hp[:, k : k + 2]))) for k in (0, 2))
    n = np.tanh(xp[:, 4:] + r * hp[:, 4:])
    np.testing.assert_allclose(np.asarray(y[0]), (1 - z) * n, rtol=1e-5, atol=1e-6)

    with pytest.raises(Exception, match=r"pieces\[0\] has 4 elements; expected gates 0-0 of w_rec within it"):
        _forward(jnp.asarray(x), pieces, (*blocks[:3], Block(1, 1, 1, 0, 1, 2, 1), *blocks[4:]))
    with pytest.raises(
        Exception, match=r"blocks\[1\] reads gates from 2 \(1\) of operand 0 at 4 .* expected gates from 1 of 3"
    ):
        _forward(jnp.asarray(x), pieces, (blocks[0], blocks[2], blocks[1], *blocks[3:]))
    with pytest.raises(Exception, match=r"pieces\[1\] has dtype bfloat16; expected float32, the weights'"):
        _forward(jnp.asarray(x), [*pieces[:2], pieces[2].astype(jnp.bfloat16), pieces[3]], blocks)
    rows = Block(0, 0, 0, 2, 1, 3, 1)  # n's rows at the start of the kernel: another form on the same operand
    with pytest.raises(Exception, match=r"params holds blocks as rows and as columns; expected one form"):
        _forward(jnp.asarray(x), pieces, (*blocks[:2], rows, *blocks[3:]))


def test_the_backward_refuses_a_kernel_its_blocks_do_not_cover():
    """The backward writes each operand's whole gradient (``params_gradient``): a kernel held [in, L] whose blocks
    leave columns untaken would leave them unwritten, so the handler refuses it (the forward reads it)."""
    Block = kernels.WeightBlock
    config = jcr.RNNConfig("rnn_tanh", 1, 2, 3)
    x, h0, b = jnp.ones((1, 4, 3)), jnp.zeros((4, 2)), jnp.zeros(2)
    kernel, w_rec = jnp.ones((3, 5)), jnp.ones((2, 2))  # w_in's 2 columns, then 3 no block takes
    blocks = (Block(0, 0, 0, 0, 1, 1, 5), Block(1, 1, 0, 0, 1, 2, 1))
    common = dict(config=config, reverse=False, blocks=blocks, pieces=(w_rec,))
    y, h_n, _, saved = kernels.gemm_forward(
        x, kernel, b, b, h0, None, None, training=True, weights_dtype=jnp.float32, y_dtype=jnp.float32, **common
    )
    np.testing.assert_allclose(np.asarray(y[0]), np.tanh(3.0), rtol=1e-6)
    with pytest.raises(Exception, match=r"params's blocks take its columns other than once each"):
        jax.block_until_ready(
            kernels.gemm_backward(x, kernel, y, h_n, None, None, None, saved, params_gradient=(None, None), **common)
        )


_FOUR_ROW_STEP = """
import jax, flax.linen as nn
from jax_cudnn_rnn import flax as jcr_flax
module = jcr_flax.RNN(nn.LSTMCell(128))
x = jax.random.normal(jax.random.key(0), (4, 1, 128))
variables = module.init(jax.random.key(1), x)
jax.block_until_ready(jax.jit(module.apply)(variables, x))
print("stepped", flush=True)
"""


@pytest.mark.parametrize("cap", ["", "AVX2"])
def test_a_cap_below_avx512_reaches_the_handlers_tiles(cap, tmp_path):
    """The handlers' AVX-512 tiles (small_products.h) run where oneDNN's kernels do, so that ONEDNN_MAX_CPU_ISA=AVX2
    (.ci/onednn_caps) tests the AVX2 class's products: a step of 4 rows calls oneDNN's matmul under the cap, none
    without it."""
    from jax_cudnn_rnn import onednn

    if not onednn.effective_cpu_isa().startswith("avx512"):
        pytest.skip("the tiles run on AVX-512 only")
    env = {"ONEDNN_VERBOSE": "1", **({"ONEDNN_MAX_CPU_ISA": cap} if cap else {})}
    done = run_package_child(_FOUR_ROW_STEP, tmp_path, **env)
    assert "stepped" in done.stdout, done.stderr[-3000:]
    matmuls = done.stdout.count("exec,cpu,matmul")  # oneDNN's verbose lines go to stdout
    assert (matmuls > 0) == (cap == "AVX2"), f"{matmuls} matmul calls with the cap {cap!r}"
