"""``jax-cudnn-rnn bench``: times this library's RNN against Flax, ``jax.experimental.rnn`` and PyTorch.

For each named configuration and dtype every available contender is timed on the forward pass and on a training
step (gradient of ``sum(y**2)`` with respect to the parameters and ``x``): warm-up runs, then the median of
``--repeats`` runs, each blocked on its result, each contender in a process of its own unless ``--same-process``.
Every time is also given as a ratio to PyTorch's and to Flax's time for the same configuration, dtype and
measurement (< 1 means faster), and as a fraction of the machine's GEMM throughput (the roofline). On the CPU it also
measures the neighbour ratio: PyTorch's LSTM forward in a process that ran this package, over the same alone.
Results go to a ``rich`` table and optionally to JSON (with the machine's facts), Markdown and a PNG plot.

A contender that cannot run (no GPU, no extension, PyTorch not installed, an LSTM-only peer on a GRU) is skipped
with its reason; a peer that fails while running is skipped too, while a failure of this library's own
implementations is an error (exit code 1).

contenders.py: what is timed; measure.py: how (timing, worker processes, the GEMM throughput, the neighbour ratio);
report.py: what is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from jax_cudnn_rnn.tools.bench import contenders, measure, report
from jax_cudnn_rnn.tools.bench.contenders import CONFIGS, CONTENDERS, CPU_CONFIGS, DTYPES, GPU_CONFIGS, QUICK_SIZES
from jax_cudnn_rnn.tools.bench.measure import DEFAULT_TIMING, QUICK_TIMING, Timing

# The roofline's GEMMs: square products large enough for the GEMMs' peak rate (oneDNN's matmul gains 0-10 % from 2048
# to 4096 on a 2-core Zen 4), and what --quick measures.
GEMM_SIZES, QUICK_GEMM_SIZES = (2048, 4096), (256,)
GEMM_TIMING = Timing(repeats=5, warmup=1)  # the fastest of 5 runs is the peak (measure.gemm_peak)


def _names(kind: str, known: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse ``type`` for a comma-separated list of names from ``known``."""

    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {', '.join(map(repr, unknown)) or '(none given)'}; known {kind}s: {', '.join(known)}"
            )
        return names

    return parse


def _at_least(minimum: float, kind: Callable[[str], float] = int) -> Callable[[str], Any]:
    """An argparse ``type`` for a ``kind`` (int or float) >= ``minimum``."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not value >= minimum:  # also rejects nan
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--configs",
        type=_names("config", list(CONFIGS)),
        default=None,
        help=f"comma-separated configs from {', '.join(CONFIGS)} (default: A-G on a GPU, the CPU "
        f"ones otherwise: {', '.join(c.name for c in CPU_CONFIGS)})",
    )
    parser.add_argument(
        "--dtypes",
        type=_names("dtype", DTYPES),
        default=None,
        help="comma-separated dtypes (default: float32,bfloat16)",
    )
    parser.add_argument(
        "--contenders",
        type=_names("contender", list(CONTENDERS)),
        default=None,
        help=f"comma-separated contenders from {', '.join(CONTENDERS)} (default: all but "
        f"{', '.join(name for name, c in CONTENDERS.items() if not c.by_default)})",
    )
    parser.add_argument(
        "--repeats",
        type=_at_least(1),
        default=None,
        help=f"timed runs per measurement; the median is kept (default: {DEFAULT_TIMING.repeats}, "
        f"{QUICK_TIMING.repeats} with --quick)",
    )
    parser.add_argument(
        "--warmup",
        type=_at_least(0),
        default=None,
        help=f"untimed runs before timing (default: {DEFAULT_TIMING.warmup}, {QUICK_TIMING.warmup} with --quick)",
    )
    parser.add_argument(
        "--warmup-seconds",
        type=_at_least(0.0, float),
        default=None,
        help="keep warming up until this many seconds have passed since the first untimed run "
        f"returned (default: {DEFAULT_TIMING.warmup_seconds}, {QUICK_TIMING.warmup_seconds} with "
        "--quick): a GPU that idled while the step compiled clocks up again before timing",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"CI smoke run: the configs shrunk to at most T={QUICK_SIZES['time']} "
        f"B={QUICK_SIZES['batch']} I=H={QUICK_SIZES['hidden']} (default selection: cpu-lstm and "
        f"cpu-gru, float32), {QUICK_TIMING.repeats} repeats, {QUICK_TIMING.warmup} warm-up",
    )
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="time every contender in this one process (the default gives each contender, config "
        "and dtype a fresh process, so that none slows or speeds another: threads, settings, "
        "caches) and skip the neighbour ratio",
    )
    parser.add_argument(
        "--rounds",
        type=_at_least(1),
        default=1,
        help="run the whole grid this many times (each contender in fresh processes each time) and "
        "keep each measurement's middle round: a process that ran slow or fast for reasons of "
        "its own moves no result (default 1)",
    )
    parser.add_argument(
        "--budget-seconds",
        type=_at_least(1.0, float),
        default=None,
        help="start no contender after this many seconds and stop one still running then; what did not run is "
        "skipped with the reason and the rest written as usual (default: no bound)",
    )
    parser.add_argument(
        "--neighbour-rounds",
        type=_at_least(0),
        default=None,
        help="on the CPU, rounds of PyTorch's LSTM forward in a fresh process alone and after this "
        "package ran (alternating; the ratio of the medians is reported; 0 skips it; default 2, "
        "1 with --quick)",
    )
    parser.add_argument(
        "--precision",
        choices=("float32", "tensorfloat32"),
        default="float32",
        help="float32 matmul precision for every contender: strict float32 (default) or TF32 tensor "
        "cores (GPU only; PyTorch's own default for cuDNN RNNs is TF32)",
    )
    parser.add_argument("--json", metavar="PATH", help="write machine facts and one record per measurement here")
    parser.add_argument("--markdown", metavar="PATH", help="write the table as Markdown here")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG bar plot of the ratios to PyTorch here")


def select_configs(names: Sequence[str] | None, quick: bool) -> list[contenders.BenchConfig]:
    if names:
        configs = [CONFIGS[name] for name in dict.fromkeys(names)]
    elif contenders.on_gpu() and not quick:
        configs = list(GPU_CONFIGS)
    else:
        configs = list(CPU_CONFIGS[:2] if quick else CPU_CONFIGS)
    return [c.shrunk() for c in configs] if quick else configs


def _console() -> Any:
    from rich.console import Console

    console = Console()
    # Piped output gets rich's default of 80 columns, which would fold the table; it is made to fit 100.
    return console if console.is_terminal else Console(width=100)


def _logger(console: Any) -> Callable[[str, str], None]:
    from rich.markup import escape

    def log(kind: str, text: str) -> None:
        prefix = {"skip": "[yellow]skip[/] ", "error": "[red]error[/] "}.get(kind, "")
        console.print(prefix + escape(text))

    return log


def _neighbour(
    args: argparse.Namespace,
    configs: Sequence[contenders.BenchConfig],
    timing: Timing,
    log: Callable[[str, str], None],
    results: measure.Results,
) -> None:
    """The neighbour ratio on every LSTM config in float32, on the CPU, where PyTorch is installed."""
    rounds = args.neighbour_rounds if args.neighbour_rounds is not None else (1 if args.quick else 2)
    torch_missing = contenders.CONTENDERS[contenders.TORCH].unavailable()
    if args.same_process or rounds == 0 or contenders.on_gpu() or torch_missing:
        return
    for bc in configs:
        if bc.mode == "lstm":
            results.neighbour.append(measure.neighbour(bc, "float32", timing, rounds, log))


def run(args: argparse.Namespace) -> int:
    """The ``bench`` subcommand: 0 on success, 1 if one of this library's implementations failed."""
    # Otherwise JAX reserves 75 % of the GPU up front and PyTorch gets the rest (in one process, and when workers
    # share a GPU); only effective before JAX's backend starts, which importing this module does not do.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    console = _console()
    log = _logger(console)
    isolated = not args.same_process
    configs = select_configs(args.configs, args.quick)
    dtypes = list(dict.fromkeys(args.dtypes or (["float32"] if args.quick else ["float32", "bfloat16"])))
    named = args.contenders or [name for name, contender in CONTENDERS.items() if contender.by_default]
    chosen = [CONTENDERS[name] for name in dict.fromkeys(named)]
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(Timing) if getattr(args, f.name) is not None}
    timing = dataclasses.replace(QUICK_TIMING if args.quick else DEFAULT_TIMING, **overrides)
    facts = report.machine_facts(isolated)
    log(
        "info",
        f"{facts['processor']}, {facts['cpu_count']} CPUs, load average {facts['loadavg_start']}; jax "
        f"{facts['versions']['jax']} on {facts['jax_backend']} ({facts['jax_device_kind']}); "
        f"{facts['isolation']}; {measure.describe_timing(timing)}",
    )
    for c in configs:
        log("info", f"  {c.name}: {c.describe()}")
    if isolated and not contenders.on_gpu():  # the CPU's roofline; its worker processes keep it from the timings
        from jax_cudnn_rnn import onednn

        frameworks = (
            (["onednn-matmul"] if onednn.extension_loaded() else [])
            + ["jax"]
            + ([] if contenders.CONTENDERS[contenders.TORCH].unavailable() else ["torch"])
        )
        sizes, gemm_timing = (QUICK_GEMM_SIZES, QUICK_TIMING) if args.quick else (GEMM_SIZES, GEMM_TIMING)
        facts["gemm_peak"] = measure.gemm_peak(dtypes, sizes, gemm_timing, frameworks, log)
        facts["gemm_gflops"] = {dtype: peak["gflops"] for dtype, peak in facts["gemm_peak"].items()}
    results = measure.run_all(
        configs, dtypes, chosen, timing, log, isolated, args.precision, args.rounds, args.budget_seconds
    )
    _neighbour(args, configs, timing, log, results)
    report.add_roofline(results.records, facts.get("gemm_gflops") or {})
    facts["loadavg_end"] = measure.loadavg()
    rows = report.table_rows(results.records)
    report.print_table(console, rows, f"milliseconds, {measure.describe_timing(timing)}, {facts['isolation']}")
    if facts.get("gemm_gflops"):
        report.print_table(
            console,
            report.roofline_rows(results.records),
            f"roofline: GEMM peak {report.peak_text(facts)}",
            report.ROOFLINE_COLUMNS,
            (),
        )
    for line in report.neighbour_lines(results.neighbour):
        log("info", line)
    log("info", f"load average {facts['loadavg_start']} at the start, {facts['loadavg_end']} at the end")
    settings = {
        "configs": [dataclasses.asdict(c) for c in configs],
        "dtypes": dtypes,
        "contenders": [c.name for c in chosen],
        **dataclasses.asdict(timing),
        "quick": args.quick,
        "precision": args.precision,
        "isolation": facts["isolation"],
        "rounds": args.rounds,
        "budget_seconds": args.budget_seconds,
    }
    if args.json:
        report.write_json(args.json, facts, settings, results)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(report.markdown_report(rows, configs, facts, settings, results))
    if args.plot:
        report.write_plot(results.records, args.plot)
    return 1 if results.errors else 0
