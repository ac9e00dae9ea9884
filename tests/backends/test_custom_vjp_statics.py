"""The package's ``custom_vjp`` wrapper (jax_cudnn_rnn/backends/custom_vjp.py) builds one ``jax.custom_vjp`` per static
arguments: values that compare equal but differ in type (``1 == True == 1.0``, with equal hashes) must each get their
own, or the closure built for the first runs for the others with the first one's value (issue 51)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_cudnn_rnn.backends.custom_vjp import custom_vjp, static_key


def _type_scaled():
    """f(static, x) = x * c and df/dx = c, where c depends on the static argument's type: 2 for a bool, 3 for an int,
    5 for a float (and the same for the static inside a tuple)."""

    def scale(static):
        inner = static[0] if isinstance(static, tuple) else static
        return {bool: 2.0, int: 3.0, float: 5.0}[type(inner)]

    def fun(static, x):
        return x * scale(static)

    def fwd(static, x):
        return fun(static, x), None

    def bwd(static, residuals, g):
        return (g * scale(static),)

    f = custom_vjp(fun, nondiff_argnums=(0,))
    f.defvjp(fwd, bwd)
    return f


@pytest.mark.parametrize("static", [(1, True, 1.0), ((1,), (True,), (1.0,))], ids=["scalars", "in-tuples"])
def test_equal_statics_of_other_types_get_their_own_closure(static):
    f = _type_scaled()
    x = jnp.float32(1.5)
    for value, want in zip(static, (3.0, 2.0, 5.0), strict=True):
        np.testing.assert_array_equal(f(value, x), np.float32(1.5 * want))
        np.testing.assert_array_equal(jax.grad(lambda x, value=value: f(value, x))(x), np.float32(want))
    assert len(f._built) == 3


def test_the_key_keeps_equal_values_of_one_type_together():
    assert static_key((1, "lstm")) == static_key((1, "lstm"))
    assert static_key(1) != static_key(True) != static_key(1.0) != static_key(1)
    assert static_key((0,)) != static_key([0])
    hash(static_key((1, (2.0, None), "x")))
