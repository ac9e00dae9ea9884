"""The registry's decision apart from any backend's numbers (jax_cudnn_rnn/backends/registry.py): the names it takes,
how it picks per side from estimates (a variant or a hybrid only where more than 5 % faster), the hybrid it builds
where the sides differ, and the fallback it gives cuDNN for resets beyond max_segments."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn.backends import hybrid, reference, registry, xla
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.sharding.placement import Placement


def _costs(**relative):
    return {name.replace("_", ":"): registry.Cost(value, "test") for name, value in relative.items()}


@pytest.mark.parametrize(
    "forward, training, want",
    [
        # The lowest estimate per side.
        (dict(xla=1.0, onednn=0.5), dict(xla=1.0, onednn=0.6), ("onednn", "onednn")),
        (dict(xla=1.0, onednn=0.5), dict(xla=1.0, onednn=2.0), ("onednn", "xla")),
        # A variant only where more than 5 % faster than its backend's own run.
        (dict(xla=1.0, onednn=0.5), dict(xla=1.0, onednn=0.6, onednn_plain=0.58), ("onednn", "onednn")),
        (dict(xla=1.0, onednn=0.5), dict(xla=1.0, onednn=0.6, onednn_plain=0.5), ("onednn", "onednn:plain")),
        # Two implementations only where more than 5 % faster on one side than one of them on both.
        (dict(xla=1.0, onednn=0.5), dict(xla=1.0, onednn=1.04), ("onednn", "onednn")),
        (dict(xla=1.0, onednn=1.03), dict(xla=1.0, onednn=0.5), ("onednn", "onednn")),
        (dict(xla=1.0, onednn=0.9), dict(xla=1.0, onednn=1.2), ("onednn", "xla")),
        # A training-side variant bends toward its backend's own forward.
        (dict(xla=1.0, onednn=1.02), dict(xla=1.0, onednn=0.9, onednn_plain=0.5), ("onednn", "onednn:plain")),
    ],
)
def test_pick_per_side_with_the_5_percent_tie(forward, training, want):
    assert registry.pick({registry.FORWARD: _costs(**forward), registry.TRAINING: _costs(**training)}) == want


@pytest.mark.parametrize(
    "name, forward, training, shortest",
    [
        ("xla", "xla", "xla", "xla"),
        ("onednn", "onednn", "onednn", "onednn"),
        ("onednn:plain", "onednn", "onednn:plain", "onednn:plain"),  # offered for training: oneDNN's own forward
        ("onednn+onednn:plain", "onednn", "onednn:plain", "onednn:plain"),
        ("onednn+xla", "onednn", "xla", "onednn+xla"),
        ("xla+onednn:plain", "xla", "onednn:plain", "xla+onednn:plain"),
        ("xla+xla", "xla", "xla", "xla"),
    ],
)
def test_names_and_their_shortest_form(name, forward, training, shortest):
    choice = registry.Choice(forward, training, ("", ""))
    parsed = registry._parse(name)
    assert (parsed[0].name, parsed[1].name) == (forward, training)
    assert choice.name == shortest
    assert registry.sides_of("onednn:plain") == (registry.TRAINING,) and registry.sides_of("xla") == registry.SIDES


@pytest.mark.parametrize(
    "name, error, message",
    [
        ("cuda", ValueError, "implementation is 'cuda'; expected None or one of"),
        ("onednn:fast", ValueError, "implementation is 'onednn:fast'; expected None or one of"),
        ("xla+onednn+xla", ValueError, "'forward+training'"),
        ("onednn:plain+xla", ValueError, "'onednn:plain' runs only on the training side, not the forward side"),
        (["xla"], TypeError, "implementation must be None or a str, got list"),
    ],
)
def test_a_name_that_is_none_says_what_is_one(name, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace("+", r"\+")):
        registry.choose(name, Call())


def test_a_pair_runs_one_implementation_undifferentiated_and_the_other_under_grad():
    """The registry's hybrid: "reference+xla" is the reference implementation's values undifferentiated and the xla
    implementation's values and gradients under jax.grad, exactly, with lengths and dropout each side's own."""
    cfg = jcr.RNNConfig("gru", 2, 5, 3, dropout=0.4)
    params = jcr.init_params(jax.random.key(0), cfg)
    x = jax.random.normal(jax.random.key(1), (6, 3, 3))
    h0 = jax.random.normal(jax.random.key(2), cfg.state_shape(3))
    lengths = jnp.array([6, 2, 4], jnp.int32)
    key = jax.random.key(3)

    def run(implementation, params=params, x=x):
        return jcr.rnn(
            params,
            x,
            h0,
            None,
            cfg,
            seq_lengths=lengths,
            is_training=True,
            dropout_key=key,
            implementation=implementation,
        )

    def loss(implementation):
        return lambda p, x: jnp.sum(run(implementation, p, x)[0] ** 2) + jnp.sum(run(implementation, p, x)[1])

    for got, want in zip(run("reference+xla")[:2], run("reference")[:2], strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(
        jax.grad(loss("reference+xla"), argnums=(0, 1))(params, x),
        jax.grad(loss("xla"), argnums=(0, 1))(params, x),
        strict=True,
    ):
        np.testing.assert_array_equal(got, want)
    # built once per pair (the reference packing a frontend's named tensors; the xla one reads them as they lie)
    assert registry._run_named("reference+xla") is hybrid.hybrid(registry.packing(reference.rnn), xla.rnn, True)


def test_cudnns_fallback_is_the_registrys_next_choice():
    """Resets beyond max_segments are known only from the data; cuDNN runs there what the registry would choose for the
    call on CUDA without it: the xla implementation (the only one with resets there)."""
    call = Call(jcr.RNNConfig("lstm", 1, 4, 3), 5, 2, resets=True, placement=Placement(platform="cuda"))
    assert registry.fallback("cudnn", call) is xla.rnn
    assert registry.decide("cuda", call, excluded="cudnn").name == "xla"
