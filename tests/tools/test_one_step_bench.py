"""benchmarks/one_step.py's contenders (issue 60 item 3): ``contender@implementation`` runs this package's contender
on that implementation, over the same weights as the contender on the default's choice, so that its step computes the
same numbers; Flax's cell and Keras's layer take none. Numbers only: the script's timings are benchmarks, not tests."""

import importlib.util
import os
import sys

import jax
import numpy as np
import pytest

pytest.importorskip("flax")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import skips
from support import require_extension

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SPEC = importlib.util.spec_from_file_location("one_step", os.path.join(ROOT, "benchmarks", "one_step.py"))
one_step = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(one_step)


@pytest.mark.parametrize("contender", ["dropin", "named", "rnn"])
@pytest.mark.parametrize("mode", ["gru", "lstm"])
def test_a_contender_on_a_named_implementation_computes_the_same_step(contender, mode):
    forward, gradient, args = one_step._step_functions(contender, mode, 3, 8)
    forward_xla, gradient_xla, args_xla = one_step._step_functions(f"{contender}@xla", mode, 3, 8)
    for a, b in zip(jax.tree.leaves(args), jax.tree.leaves(args_xla), strict=True):
        np.testing.assert_array_equal(a, b)  # the same weights, carry and input
    for got, want in ((forward_xla(*args), forward(*args)), (gradient_xla(*args), gradient(*args))):
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


def test_the_named_implementation_is_the_one_that_runs():
    forward, _, args = one_step._step_functions("rnn@xla", "gru", 2, 4)
    assert "onednn" not in jax.jit(forward).lower(*args).as_text()
    with pytest.raises(ValueError, match="flax_cell takes no implementation"):
        one_step._step_functions("flax_cell@xla", "gru", 2, 4)


def test_a_named_onednn_implementation_runs_the_extension():
    """The other side of the test above: ``@onednn:gemm`` lowers to the extension's call (where it is loaded), so that
    a column of the benchmark named for an implementation times that implementation."""
    from jax_cudnn_rnn.backends.onednn import extension

    require_extension(extension.EXTENSION, skips.REQUIRE_ONEDNN)
    forward, _, args = one_step._step_functions("rnn@onednn:gemm", "gru", 4, 8)
    assert "onednn" in jax.jit(forward).lower(*args).as_text()


def test_settling_the_allocator_keeps_freed_pages_between_calls():
    """The benchmark's workers settle glibc's allocator first (``settle_allocator``): in a new process, eight 1 MiB
    arrays written and freed per round (a step's gradients at H=512) fault every page in anew each round; after one
    16 MiB array was freed, no page."""
    if sys.platform != "linux" or not os.confstr("CS_GNU_LIBC_VERSION"):
        pytest.skip("glibc's allocator")
    program = f"""
import importlib.util, resource, numpy as np
spec = importlib.util.spec_from_file_location("one_step", {os.path.join(ROOT, "benchmarks", "one_step.py")!r})
one_step = importlib.util.module_from_spec(spec)
spec.loader.exec_module(one_step)

def faults_per_round():
    for _ in range(3):
        [np.ones(1 << 18, np.float32) for _ in range(8)]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        [np.ones(1 << 18, np.float32) for _ in range(8)]
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10

fresh = faults_per_round()
one_step.settle_allocator()
print(fresh, faults_per_round())
"""
    import subprocess

    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    fresh, settled = (float(v) for v in done.stdout.split())
    assert fresh > 1000 and settled < 50, (fresh, settled)  # 8 MiB is 2,048 pages of 4 KiB
