"""What ``jax-cudnn-rnn bench`` reports: the machine it ran on (CPU model and features, load, thread counts,
library versions), the results table and its legend, the roofline (each step's matrix products at the machine's
measured GEMM peak), the neighbour ratio, and the JSON, Markdown and PNG outputs."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import math
import os
import platform
from collections.abc import Sequence
from typing import Any

from jax_cudnn_rnn.backends import cpu_info
from jax_cudnn_rnn.tools.bench import contenders as C
from jax_cudnn_rnn.tools.bench import measure as M

NOTES = (
    "op_bytes: device memory one step needs beyond its inputs (outputs, temporaries, workspace), the table's 'op MiB' "
    "(of the training step where there is one). torch on CUDA: max_memory_allocated - memory_allocated, both after "
    "reset_peak_memory_stats; jax: XLA's memory analysis of the compiled step (outputs + temporaries - aliased) plus, "
    "for jcr-cudnn, the largest cuDNN workspace of its calls (taken from XLA's scratch allocator at run time, which "
    "the analysis does not see), for oneDNN's calls the largest scratch they take from the extension's pool; None for "
    "torch off CUDA.",
    "peak_bytes: torch = torch.cuda.max_memory_allocated after reset_peak_memory_stats; jax = the device's "
    "peak_bytes_in_use, a high-water mark since process start that JAX cannot reset; None off GPU.",
    "compiled_bytes (jax contenders only): XLA's memory analysis of the compiled step (arguments + outputs + "
    "temporaries - aliased).",
    "float32 precision (settings.precision) is the same for every contender that has the knob: the JAX ones run "
    "under jax.default_matmul_precision(precision) (rnn()'s precision=None follows it), PyTorch under "
    "torch.backends.cudnn.allow_tf32 / cuda.matmul.allow_tf32 = (precision == 'tensorfloat32'); "
    "jax.experimental.rnn sets its own cuDNN math type.",
    "process: each record's worker process (settings.isolation 'process per contender'): its thread count at the "
    "end, PyTorch's thread counts where PyTorch was imported, whether this package was imported, the load average.",
    "gflop: the step's matrix products (2 flops per multiply-add; the training step 3x the forward's); "
    "roofline_fraction: gflop / time over the machine's GEMM peak for the dtype (machine.gemm_gflops): the fastest "
    "run of the fastest square product in the process (machine.gemm_peak: which framework and size; oneDNN's matmul "
    "where the extension is loaded), measured by the same run.",
    "neighbour: PyTorch's forward in a fresh process alone and in one that first ran this package's rnn() with each "
    "implementation; ratio = median after / median alone (target <= 1.15).",
)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's model name with its vendor, family and model numbers, which a VM's generic name ("Intel(R) Xeon(R)
    Processor") leaves out; "" where /proc/cpuinfo is missing."""
    info = cpu_info.fields()
    if not info:
        return ""
    return (
        f"{info.get('model name', '')} ({info.get('vendor_id', '?')} family {info.get('cpu family', '?')} "
        f"model {info.get('model', '?')})"
    )


def cpu_features() -> list[str]:
    """The CPU features that decide the GEMM kernels: AVX2, AVX-512, its bfloat16 and VNNI extensions, AMX."""
    return sorted(
        cpu_info.flags()
        & {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_bf16", "amx_tile"}
    )


def machine_facts(isolated: bool) -> dict[str, Any]:
    """Date, CPU (model, features, count, load), OS, library versions, JAX backend and device kind, this package's
    extensions and oneDNN's runtime, and how the contenders were isolated."""
    import jax

    import jax_cudnn_rnn as jcr
    from jax_cudnn_rnn import onednn

    device = jax.devices()[0]
    facts = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "processor": cpu_model() or platform.processor(),
        "cpu_features": cpu_features(),
        "uname": platform.uname()._asdict(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "loadavg_start": M.loadavg(),
        "python": platform.python_version(),
        "versions": {
            name: _version(name)
            for name in ("jax", "jaxlib", "flax", "torch", "numpy", "jax-cudnn-rnn", "onednn-cpu-tbb", "tbb")
        },
        "jax_backend": jax.default_backend(),
        "jax_device_kind": device.device_kind,
        "jax_device_count": jax.device_count(),
        "cudnn_extension_loaded": jcr.extension_loaded(),
        "onednn_extension_loaded": onednn.extension_loaded(),
        "onednn_version": list(onednn.library_version() or []) or None,
        "onednn_cpu_runtime": onednn.cpu_runtime(),
        "onednn_cpu_isa": onednn.effective_cpu_isa(),
        "isolation": "process per contender" if isolated else "one process",
        "xla_python_client_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
        "jax_default_matmul_precision": jax.config.jax_default_matmul_precision,
        "torch_cuda_device": None,
    }
    if not isolated:  # PyTorch is imported here anyway; in isolation its worker's records say what it saw
        try:
            import torch

            facts["torch_num_threads"] = torch.get_num_threads()
            if torch.cuda.is_available():
                facts["torch_cuda_device"] = torch.cuda.get_device_name(0)
        except ImportError:
            pass
    return facts


def peak_text(facts: dict[str, Any]) -> str:
    """The machine's GEMM peak per dtype and what reached it, e.g. "float32 213 GFLOP/s (onednn-matmul [4096]^3)"."""
    peaks = facts.get("gemm_peak") or {}
    return ", ".join(
        f"{dtype} {p['gflops']:.0f} GFLOP/s ({p['framework']} [{p['size']}]^3)" for dtype, p in peaks.items()
    )


def add_roofline(records: list[dict[str, Any]], gemm_gflops: dict[str, float]) -> None:
    """Sets ``gflops_per_s`` (the step's matrix products over its time) and ``roofline_fraction`` (that over the
    machine's GEMM peak for the dtype, where measured)."""
    for record in records:
        rate = record["gflop"] / (record["ms"] / 1e3) if record.get("gflop") else None
        peak = gemm_gflops.get(record["dtype"])
        record["gflops_per_s"] = rate
        record["roofline_fraction"] = rate / peak if rate and peak else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def ratio_text(value: float | None) -> str:
    """At most 5 characters, never in scientific notation: 0.42, 3.14, 12.3, 435."""
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 99.5 else f"{value:.1f}" if value >= 9.995 else f"{value:.2f}"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.3g}"


TABLE_COLUMNS = (
    "config",
    "dtype",
    "contender",
    "fwd ms",
    "fwd/pt",
    "fwd/flax",
    "train ms",
    "train/pt",
    "train/flax",
    "op MiB",
)
# One line per column, printed under the table and the Markdown.
LEGEND = (
    "config, dtype: the benchmark problem (listed above) and its dtype; contender: what ran (jcr-* are this library's "
    "implementations, pt is PyTorch).",
    "fwd ms: median milliseconds of the forward pass; train ms: of a training step (forward and the gradient of "
    "sum(y**2) with respect to the parameters and x).",
    "fwd/pt, train/pt: that time divided by PyTorch's for the same config, dtype and measurement; fwd/flax, "
    "train/flax: divided by Flax nn.RNN's. Below 1 is faster.",
    "op MiB: device memory the training step (the forward pass where there is none) needs beyond its inputs: "
    "outputs, temporaries and cuDNN's workspace or oneDNN's scratch; '-' where it is not measured (PyTorch off CUDA).",
)


def _by_row(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, dict[str, Any]]]:
    grouped: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for r in records:
        grouped.setdefault((r["config"], r["dtype"], r["contender"]), {})[r["measurement"]] = r
    return grouped


def table_rows(records: Sequence[dict[str, Any]]) -> list[list[str]]:
    """One row per (config, dtype, contender), in the order first measured; '-' where there is no value."""
    rows = []
    for (config, dtype, contender), by_measurement in _by_row(records).items():
        cells = [config, dtype, contender]
        for measurement in C.MEASUREMENTS:
            r = by_measurement.get(measurement, {})
            cells += [_fmt(r.get("ms"), ".2f")] + [ratio_text(r.get(f"ratio_to_{peer}")) for peer in (C.TORCH, C.FLAX)]
        last = by_measurement.get(C.TRAIN) or by_measurement[C.FWD]
        rows.append([*cells, _mib(last.get("op_bytes"))])
    return rows


def roofline_rows(records: Sequence[dict[str, Any]]) -> list[list[str]]:
    """(config, dtype, contender, what the default ran, fwd and train GFLOP/s with their fraction of the machine's
    GEMM throughput)."""
    rows = []
    for (config, dtype, contender), by_measurement in _by_row(records).items():
        cells = [
            config,
            dtype,
            contender,
            next((r["implementation"] for r in by_measurement.values() if r.get("implementation")), ""),
        ]
        for measurement in C.MEASUREMENTS:
            r = by_measurement.get(measurement, {})
            fraction = r.get("roofline_fraction")
            cells += [_fmt(r.get("gflops_per_s"), ".0f"), "-" if fraction is None else f"{100 * fraction:.0f}%"]
        rows.append(cells)
    return rows


ROOFLINE_COLUMNS = ("config", "dtype", "contender", "picked", "fwd GF/s", "fwd peak", "train GF/s", "train peak")


def print_table(
    console: Any,
    rows: Sequence[Sequence[str]],
    title: str,
    columns: Sequence[str] = TABLE_COLUMNS,
    legend: Sequence[str] = LEGEND,
) -> None:
    """The rows under ``columns`` (a table that fits 100 columns for the configs and contenders here), then the
    legend."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), title_justify="left", show_edge=False, pad_edge=False
    )
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i < 3 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for line in legend:
        console.print(line, highlight=False)


def markdown_table(
    rows: Sequence[Sequence[str]], columns: Sequence[str] = TABLE_COLUMNS, legend: Sequence[str] = LEGEND
) -> str:
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + ("\n\n" + "\n".join(f"* {line}" for line in legend) if legend else "") + "\n"


def neighbour_lines(neighbour: Sequence[dict[str, Any]]) -> list[str]:
    return [
        f"neighbour {n['config']} {n['dtype']}: PyTorch's forward "
        f"{'/'.join(f'{v:.2f}' for v in n['torch_fwd_ms_alone'])} ms alone, "
        f"{'/'.join(f'{v:.2f}' for v in n['torch_fwd_ms_after_package'])} ms after this package ran "
        f"{', '.join(n['package_ran'])}: ratio {n['ratio']:.2f}"
        for n in neighbour
        if "ratio" in n
    ]


def markdown_report(
    rows: Sequence[Sequence[str]],
    configs: Sequence[C.BenchConfig],
    facts: dict[str, Any],
    settings: dict[str, Any],
    results: M.Results,
) -> str:
    """A context paragraph, the results table, the roofline table, the neighbour ratios and the configurations'
    sizes, ready to paste into Markdown."""
    versions = ", ".join(f"{k} {v}" for k, v in facts["versions"].items() if v)
    load = facts.get("loadavg_start"), facts.get("loadavg_end")
    timing = M.Timing(settings["repeats"], settings["warmup"], settings["warmup_seconds"])
    context = (
        f"{facts['date_utc']}, {facts['processor']} ({facts['cpu_count']} CPUs; "
        f"{' '.join(facts['cpu_features'])}), {facts['jax_backend']} ({facts['jax_device_kind']}), "
        f"{versions}; oneDNN {facts['onednn_version']} on {facts['onednn_cpu_runtime']} ({facts['onednn_cpu_isa']}); "
        f"{facts['isolation']}; {M.describe_timing(timing)}; "
        f"load average {load[0]} at the start, {load[1]} at the end; ms; ratios < 1 are faster than the "
        f"peer.\n"
    )
    parts = [context, markdown_table(rows)]
    if facts.get("gemm_gflops"):
        parts.append(
            f"Roofline: the GEMM peak on {facts['processor']} ({facts['onednn_cpu_isa']}), {peak_text(facts)}\n\n"
            + markdown_table(roofline_rows(results.records), ROOFLINE_COLUMNS, ())
        )
    parts += [f"* {line}\n" for line in neighbour_lines(results.neighbour)]
    config_lines = ["| config | network |", "| --- | --- |"] + [f"| {c.name} | {c.describe()} |" for c in configs]
    return "\n".join(parts) + "\n" + "\n".join(config_lines) + "\n"


def _group(record: dict[str, Any]) -> str:
    return f"{record['config']}\n{record['dtype']}"


def plot_panel(ax: Any, rated: Sequence[dict[str, Any]], measurement: str) -> None:
    """One measurement's grouped bars on a linear axis from 0, the value on each bar, and PyTorch's time as the
    dashed line at 1."""
    groups = list(dict.fromkeys(_group(r) for r in rated))
    contenders = list(dict.fromkeys(r["contender"] for r in rated))
    width = 0.8 / max(1, len(contenders))
    highest = 1.0
    for i, contender in enumerate(contenders):
        ratios = {
            _group(r): r["ratio_to_torch"]
            for r in rated
            if r["contender"] == contender and r["measurement"] == measurement
        }
        xs = [g + (i - (len(contenders) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, [ratios.get(g, math.nan) for g in groups], width, label=contender)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
        highest = max([highest, *(v for v in ratios.values() if v is not None and math.isfinite(v))])
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="PyTorch = 1")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 1.15 * highest)  # from 0, so that bar heights compare; headroom for the labels
    ax.set_ylabel("time / PyTorch's time")
    ax.set_title(measurement)
    if rated:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no PyTorch results", ha="center", va="center", transform=ax.transAxes)


def write_plot(records: Sequence[dict[str, Any]], path: str) -> None:
    """A PNG of ratio-to-torch bars: one panel per measurement, one group per config/dtype, one bar per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rated = [r for r in records if r.get("ratio_to_torch") is not None and r["contender"] != C.TORCH]
    num_groups = len({_group(r) for r in rated})
    fig, axes = plt.subplots(
        1, len(C.MEASUREMENTS), figsize=(max(8.0, 1.2 * num_groups * len(C.MEASUREMENTS)), 4.5), squeeze=False
    )
    for ax, measurement in zip(axes[0], C.MEASUREMENTS, strict=True):
        plot_panel(ax, rated, measurement)
    fig.suptitle("time / PyTorch's time for the same config, dtype and measurement (< 1 is faster)")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def write_json(path: str, facts: dict[str, Any], settings: dict[str, Any], results: M.Results) -> None:
    payload = {
        "machine": facts,
        "settings": settings,
        "notes": list(NOTES),
        "records": results.records,
        "skipped": results.skipped,
        "errors": results.errors,
        "neighbour": results.neighbour,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2)
        f.write("\n")
