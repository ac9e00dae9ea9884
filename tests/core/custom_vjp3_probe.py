"""Prints whether jax_custom_vjp3 is on in this process (tests/core/test_custom_vjp3.py runs it with the flag set, to
prove that the child pytest really runs under it); not collected by pytest."""

import jax

print("jax_custom_vjp3", jax.config.jax_custom_vjp3)
