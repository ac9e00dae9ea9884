"""The CPU chooser's tables (jax_cudnn_rnn/backends/onednn/cpu_table.py): how a table's rows decide, which measured
table a CPU takes by its oneDNN instruction set, and a CPU below AVX-512 (oneDNN capped with ONEDNN_MAX_CPU_ISA in a
process of its own), where oneDNN has no bfloat16 kernels: the default runs the xla implementation and
implementation="onednn" says why it cannot run, instead of failing inside the computation."""

from __future__ import annotations

import os
import sys

import pytest

import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.backends.onednn import backend as onednn_backend
from jax_cudnn_rnn.backends.onednn import cpu_table, extension

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import skips
from support import require_extension, run_package_child


def test_cpu_choice_reads_the_first_row_that_covers_the_step(monkeypatch):
    """The table's mechanics on a made-up table: rows by the first layer's step in multiply-adds, B * G * H * (I + H);
    "xla" where no row covers the call, where the mode or dtype has no rows, and where the batch is unknown."""
    monkeypatch.setattr(
        cpu_table, "CPU_TABLE", {("lstm", "float32"): ((1000, "xla", "onednn"), (4000, "onednn", "onednn"))}
    )
    cfg = jcr.RNNConfig("lstm", 2, 4, 3)  # one step of one sequence: 4 gates * 4 units * (3 + 4) = 112
    assert onednn.cpu_choice(cfg, 8) == ("xla", "onednn")  # 896
    assert onednn.cpu_choice(cfg, 9) == ("onednn", "onednn")  # 1008
    assert onednn.cpu_choice(cfg, 35) == ("onednn", "onednn")  # 3920
    assert onednn.cpu_choice(cfg, 36) == ("xla", "xla")  # 4032: no row covers it
    assert onednn.cpu_choice(cfg, None) == ("xla", "xla")
    assert onednn.cpu_choice(jcr.RNNConfig("gru", 1, 4, 3), 8) == ("xla", "xla")


def test_every_table_is_sorted_names_implementations_and_says_where_it_was_measured():
    assert onednn.CPU_TABLES
    assert len({table.isa for table in onednn.CPU_TABLES}) == len(onednn.CPU_TABLES)
    for table in onednn.CPU_TABLES:
        assert table.isa in cpu_table.ISA_BITS
        assert {"date", "cpu", "cores", "software", "how"} <= set(table.measured), table.isa
        for (mode, dtype), rows in table.rows.items():
            assert mode in onednn_backend.MODES and dtype in onednn.DTYPES, (table.isa, mode, dtype)
            bounds = [bound for bound, _, _ in rows]
            assert bounds == sorted(bounds) and bounds[-1] == float("inf"), (table.isa, mode, dtype)
            # Undifferentiated oneDNN's or xla's forward; under jax.grad either of oneDNN's backwards, or xla.
            for _, inference, training in rows:
                assert inference in ("onednn", "xla") and training in onednn_backend._SIDES, (table.isa, mode, dtype)


def test_a_cpu_takes_the_table_of_the_most_capable_instruction_set_it_has(monkeypatch):
    tables = {isa: cpu_table.Table(isa, {}, {}) for isa in ("avx2", "avx512_core_bf16")}
    monkeypatch.setattr(cpu_table, "TABLES", tuple(tables.values()))
    assert cpu_table.table_for("avx512_core_amx") is tables["avx512_core_bf16"]  # a superset of the measured one
    assert cpu_table.table_for("avx512_core_bf16") is tables["avx512_core_bf16"]
    assert cpu_table.table_for("avx512_core_vnni") is tables["avx2"]  # no bfloat16 instructions: not the Zen 4 table
    assert cpu_table.table_for("avx2_vnni") is tables["avx2"]
    assert cpu_table.table_for("avx") is None  # below every measured one
    assert cpu_table.table_for("other") is None and cpu_table.table_for(None) is None


def test_this_cpu_uses_the_table_of_its_instruction_set():
    require_extension(extension.EXTENSION, skips.REQUIRE_ONEDNN)
    isa = onednn.effective_cpu_isa()
    assert isa in cpu_table.ISA_BITS or isa == "other"
    table = cpu_table.table_for(isa)
    assert ({} if table is None else table.rows) == onednn.CPU_TABLE
    assert (table is None) == ("no table" in onednn.TABLE_MEASURED)


_BELOW_AVX512 = """
import jax, jax.numpy as jnp, numpy as np
import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.backends.call import Call
assert onednn.effective_cpu_isa() == "avx2", onednn.effective_cpu_isa()
for mode in ("lstm", "gru", "rnn_tanh"):
    for dtype in ("float32", "bfloat16"):
        cfg = jcr.RNNConfig(mode, 1, 8, 4, dtype=dtype)
        p = jcr.init_params(jax.random.key(0), cfg)
        x = jax.random.normal(jax.random.key(1), (5, 3, 4)).astype(dtype)
        h0 = jnp.zeros(cfg.state_shape(3), dtype)
        c0 = jnp.zeros(cfg.cell_shape(3), dtype) if cfg.has_cell_state else None
        loss = lambda p, impl: jnp.sum(jcr.rnn(p, x, h0, c0, cfg, implementation=impl)[0].astype(jnp.float32) ** 2)
        want = jax.value_and_grad(loss)(p, "xla")
        got = jax.value_and_grad(loss)(p, None)
        if dtype == "bfloat16":
            assert jcr.implementation_for("cpu", Call(cfg, 5, 3)) == "xla", (mode, dtype)
            np.testing.assert_array_equal(np.asarray(got[1], np.float32), np.asarray(want[1], np.float32))
            try:
                loss(p, "onednn")
            except RuntimeError as e:
                assert "bfloat16" in str(e) and "avx2" in str(e), e
            else:
                raise AssertionError(f"implementation='onednn' ran {mode} in bfloat16 without kernels for it")
        else:
            got = jax.value_and_grad(loss)(p, "onednn")
            np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-4, atol=1e-5)
print("ok")
"""


def test_below_avx512_bfloat16_runs_on_xla_and_onednn_says_why_it_cannot(tmp_path):
    """oneDNN 3.2 has no bfloat16 RNN kernels below AVX-512 (an AVX2 CPU, as oneDNN sees this one under
    ONEDNN_MAX_CPU_ISA=AVX2): the default computes the xla implementation's values and gradients, the request by
    name raises the RuntimeError that names the instruction set, and float32 still runs on oneDNN."""
    require_extension(extension.EXTENSION, skips.REQUIRE_ONEDNN)
    result = run_package_child(_BELOW_AVX512, tmp_path, ONEDNN_MAX_CPU_ISA="AVX2")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


_TABLE_IN_USE = """
import sys
import jax_cudnn_rnn as jcr
from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.onednn import cpu_table
isa = sys.argv[1]
assert onednn.effective_cpu_isa() == isa, onednn.effective_cpu_isa()
table = next(t for t in onednn.CPU_TABLES if t.isa == isa)
assert onednn.CPU_TABLE == table.rows and isa in onednn.TABLE_MEASURED
for mode in ("lstm", "gru"):
    for dtype in ("float32", "bfloat16"):
        cfg = jcr.RNNConfig(mode, 1, 256, 256, dtype=dtype)
        pair = cpu_table.cpu_choice(cfg, 32)
        want = "xla" if pair == ("xla", "xla") or (dtype == "bfloat16" and isa == "avx2") else "onednn"
        assert jcr.implementation_for("cpu", Call(cfg, 100, 32)) == want, (mode, dtype, pair)
print("ok")
"""


@pytest.mark.parametrize("cap, isa", [("AVX2", "avx2"), ("AVX512_CORE", "avx512_core")])
def test_a_capped_cpu_takes_its_own_table(cap, isa, tmp_path):
    """oneDNN capped at a lesser instruction set, as on a CPU that has no more: the default reads that instruction
    set's table (on AVX-512 without bfloat16 instructions, the xla implementation for bfloat16, whose dot products
    oneDNN there emulates at 2-4x its float32 time)."""
    require_extension(extension.EXTENSION, skips.REQUIRE_ONEDNN)
    result = run_package_child(_TABLE_IN_USE, tmp_path, isa, ONEDNN_MAX_CPU_ISA=cap)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
