"""``jax-cudnn-rnn info``: what this installation is and what ``rnn()`` will do here, like
``jax.print_environment_info()``, in lines of at most 100 characters.

Reports the versions (this package, Python, jax, jaxlib and their XLA FFI API, the peers Flax, Keras, Equinox,
PyTorch, Orbax and optax where installed, cuDNN at run time and at build time, oneDNN), whether the cuDNN and oneDNN
extensions are loaded and why not, JAX's devices, for each device the implementation that ``rnn(...,
implementation=None)`` picks for a float32 call of each mode on arrays placed there, on each side of jax.grad
("onednn+xla": oneDNN undifferentiated, xla in training), and what decided it (the CPU rule, this machine's tuned
table, the GPU's measurements of its kind, cuDNN's place on CUDA), for each GPU which measurements its costs come
from (``gpu_table``), asked of the package's own chooser (``backends.registry``) so that this report never
disagrees with ``rnn()``, and advice that fits the machine: nothing about cuDNN where there is no NVIDIA GPU.
``--verbose`` adds the build records, paths, FFI targets, the CPUs the rule was measured on and each backend's
reasons for what only the xla implementation runs; ``--json`` prints everything.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
import textwrap
from typing import Any

import jax

from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.backends import native_extension, registry
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.cudnn import extension as _extension
from jax_cudnn_rnn.backends.cudnn import gpu_rule
from jax_cudnn_rnn.backends.cudnn import tuned as gpu_tuned
from jax_cudnn_rnn.backends.onednn import cpu_rule
from jax_cudnn_rnn.backends.onednn import extension as onednn_extension
from jax_cudnn_rnn.config import MODES, RNNConfig
from jax_cudnn_rnn.sharding import placement

DISTRIBUTIONS = (
    "jax-cudnn-rnn",
    "jax",
    "jaxlib",
    "jax-cuda13-plugin",
    "jax-cuda13-pjrt",
    "nvidia-cudnn-cu13",
    "onednn-cpu-tbb",
    "tbb",
    "intel-cmplr-lib-rt",
    "numpy",
)
# The libraries the frontends, converters and checkpoints work with, reported where installed.
PEERS = ("flax", "keras", "equinox", "torch", "orbax-checkpoint", "optax")
WIDTH = 100
# The call each device's pick is asked for: one float32 layer of each mode, a typical training shape.
_PROBE_UNITS, _PROBE_STEPS, _PROBE_BATCH = 128, 100, 32


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _devices() -> list[jax.Device]:
    """Every device of every backend JAX can start here (CPU first), each once."""
    devices: dict[int, jax.Device] = {}
    for backend in ("cpu", "gpu"):
        try:
            found = jax.devices(backend)
        except RuntimeError:  # backend not present
            continue
        for device in found:
            devices.setdefault(id(device), device)
    return list(devices.values())


def _probe(mode: str) -> Call:
    return Call(RNNConfig(mode, 1, _PROBE_UNITS, _PROBE_UNITS), _PROBE_STEPS, _PROBE_BATCH)


def implementation_on(device: jax.Device, mode: str = "lstm") -> str:
    """What ``rnn(..., implementation=None)`` picks for a float32 call of ``mode`` on arrays committed to ``device``
    (the pair's name: ``implementation=`` runs it), or why asking failed."""
    try:
        return registry.implementation_for(device, _probe(mode))
    except Exception as e:  # noqa: BLE001 - a report must not crash on the device it reports on
        return f"unknown ({type(e).__name__}: {e})"


def decided_by(device: jax.Device, mode: str = "lstm") -> list[str]:
    """What decided ``implementation_on(device, mode)``: each side's source, once each."""
    try:
        choice = registry.decide(placement.lowering_platform(device), _probe(mode))
    except Exception as e:  # noqa: BLE001 - a report must not crash on the device it reports on
        return [f"unknown ({type(e).__name__}: {e})"]
    return list(dict.fromkeys(choice.sources))


def pure_jax_only() -> dict[str, dict[str, str]]:
    """{configuration: {backend: why it declines}} for what only the pure-JAX implementations run (another
    activation than the cell's own, the reset-before GRU, recurrent dropout in training): the registry's reasons,
    whether or not the backend is available here."""
    units = _PROBE_UNITS
    probes = {
        "recurrent_activation='hard_sigmoid' (any activation but the cell's own)": Call(
            RNNConfig("lstm", 1, units, units, recurrent_activation="hard_sigmoid")
        ),
        "mode 'gru_reset_before'": Call(RNNConfig("gru_reset_before", 1, units, units)),
        "recurrent_dropout in training": Call(
            RNNConfig("lstm", 1, units, units, recurrent_dropout=0.5), is_training=True, recurrent_dropout=True
        ),
    }
    report = {}
    for label, call in probes.items():
        declined = {name: registry.backend(name).supports.why_not(call) for name in registry.names()}
        report[label] = {name: why for name, why in declined.items() if why is not None}
    return report


def _picks(picked: dict[str, str]) -> str:
    """{mode: shown choice} as "onednn (lstm, gru); xla (rnn_tanh, rnn_relu)", or one choice when all agree."""
    by_name: dict[str, list[str]] = {}
    for mode, name in picked.items():
        by_name.setdefault(name, []).append(mode)
    if len(by_name) == 1:
        return next(iter(by_name))
    return "; ".join(f"{name} ({', '.join(modes)})" for name, modes in by_name.items())


def gpu_table(kind: str) -> dict[str, str | None]:
    """Which measurements the default's cuDNN costs and algorithms come from on a GPU of kind ``kind``
    (jax_cudnn_rnn/backends/cudnn/gpu_rule.py): this machine's tuned table (its path) and the shipped measurements
    of that kind (their description), each None where there is none."""
    path = gpu_tuned.path_of(kind)
    entry = gpu_rule.shipped(kind)
    return {"tuned_table": None if path is None else str(path), "shipped": None if entry is None else entry.describe()}


def _gpu_table_text(kind: str, table: dict[str, str | None]) -> str:
    if table["tuned_table"]:
        return f"this machine's tuned table {table['tuned_table']}, then the shipped measurements where it has no cell"
    if table["shipped"]:
        return f"the shipped measurements of {table['shipped']}"
    return f"none measured on the {kind}: cuDNN runs every call it supports, with its heuristic's algorithm"


def nvidia_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU: JAX sees a CUDA device, or the NVIDIA driver is loaded (a GPU that a
    jax without its CUDA plugin does not see)."""
    if any("cuda" in device.client.platform_version.lower() for device in _devices() if device.platform == "gpu"):
        return True
    return os.path.exists("/proc/driver/nvidia/version")


def _measured_class() -> bool:
    """Whether the shipped measurements cover this CPU's class for float32 (``cpu_rule.kernel_class``), or the class
    it falls back to (``cpu_rule.FALLBACK``): else the CPU default has no estimate and runs xla."""
    mine = cpu_rule.kernel_class(onednn.effective_cpu_isa(), "float32")
    while mine is not None and not cpu_rule.measured_at(mine):
        mine = cpu_rule.FALLBACK.get(mine)
    return mine is not None


def _onednn_build() -> dict[str, Any] | None:
    """The jaxlib and XLA FFI API version the loaded oneDNN extension was compiled against, or None."""
    if not onednn.extension_loaded():
        return None
    native = onednn_extension.module()
    return {"jaxlib": native.JAXLIB_BUILD_VERSION, "xla_ffi_api": tuple(native.XLA_FFI_API_BUILD_VERSION)}


def collect() -> dict[str, Any]:
    """The report as a JSON-serialisable dict."""
    native = _extension.module() if _extension.extension_loaded() else None
    extension: dict[str, Any] = {
        "loaded": native is not None,
        "error": _extension.extension_error(),
        "targets": list(_extension.registered_targets()),
        "cudnn_library": _extension.cudnn_library_path(),
    }
    if native is not None:
        build = _extension.build_versions(native)
        runtime = _extension.runtime_versions(native)
        extension.update(
            path=native.__file__,
            built_against={**build, "cudnn": _extension.format_cudnn_version(build["cudnn"])},
            cudnn_runtime=_extension.format_cudnn_version(runtime["cudnn"]),
        )
    one_loaded = onednn.extension_loaded()
    report = {
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "machine": platform.machine(),
        "versions": {name: _version(name) for name in DISTRIBUTIONS + PEERS},
        "peers": {name: _version(name) for name in PEERS},
        "xla_ffi_api": ".".join(map(str, native_extension.running_xla_ffi_api_version() or ())) or None,
        "jax_default_backend": jax.default_backend(),
        "nvidia_gpu": nvidia_gpu(),
        "extension": extension,
        "onednn_extension": {
            "loaded": one_loaded,
            "error": onednn.extension_error(),
            "onednn": ".".join(map(str, onednn_extension.module().onednn_version())) if one_loaded else None,
            "cpu_runtime": onednn.cpu_runtime(),
            "cpu_isa": onednn.effective_cpu_isa(),
            "tuned_table": onednn.tuned_table() if one_loaded else None,
            "measured_cpus": [m.describe() for m in onednn.MEASUREMENTS],
            "measured_class": _measured_class(),
            "outside_fit": cpu_rule.outside_fit(onednn.effective_cpu_isa()) if one_loaded else None,
            "built_against": _onednn_build(),
        },
        "devices": [
            {
                "device": str(device),
                "platform": device.platform,
                "kind": device.device_kind,
                "rnn_implementation": {mode: implementation_on(device, mode) for mode in MODES},
                "decided_by": sorted({source for mode in MODES for source in decided_by(device, mode)}),
                **({"gpu_table": gpu_table(device.device_kind)} if device.platform == "gpu" else {}),
            }
            for device in _devices()
        ],
        "pure_jax_only": pure_jax_only(),
    }
    report["advice"] = advice(report)
    return report


def _fix(error: str) -> str:
    """The part of an extension's error that says what to do (from its "Fix:", else the whole)."""
    return error.split("Fix: ", 1)[1] if "Fix: " in error else error


def advice(report: dict[str, Any]) -> list[str]:
    """What to do to run faster or at all here, as fits this machine: cuDNN only where there is an NVIDIA GPU,
    oneDNN only where its wheels exist (Linux x86_64); [] when nothing is missing."""
    tips = []
    ext, one = report["extension"], report["onednn_extension"]
    gpus = [d for d in report["devices"] if d["platform"] == "gpu"]
    if report["nvidia_gpu"]:
        if not gpus:
            tips.append('an NVIDIA GPU is here but JAX sees none: `pip install "jax[cuda13]"` (it brings cuDNN too)')
        elif not ext["loaded"]:
            tips.append(
                f"rnn() runs the xla implementation on the GPU, the cuDNN extension is not loaded: {_fix(ext['error'])}"
            )
        else:
            unmeasured = {d["kind"] for d in gpus if not any(d.get("gpu_table", {}).values())}
            tips += [
                f"nothing was measured on the {kind}: the GPU default runs cuDNN for every call it supports; "
                "`jax-cudnn-rnn tune` measures this GPU, so that the default runs the xla implementation or another "
                "of cuDNN's algorithms where they are faster"
                for kind in sorted(unmeasured)
            ]
    if not one["loaded"] and report["machine"] == "x86_64" and sys.platform == "linux":
        why = one["error"] or ""
        tips.append(
            f"the oneDNN extension is not loaded: {_fix(why)}"
            if "XLA FFI API" in why or "lacks" in why
            else 'the CPU default could run oneDNN\'s kernels where faster: `pip install "jax-cudnn-rnn[onednn]"`'
        )
    elif one["loaded"] and not one["measured_class"] and not one["tuned_table"]:
        tips.append(
            f"nothing was measured on a CPU of this one's class ({one['cpu_isa']}): the CPU default runs xla; "
            "`jax-cudnn-rnn tune` measures this machine, so that the default runs oneDNN where faster"
        )
    elif one["loaded"] and one.get("outside_fit") and not one["tuned_table"]:
        tips.append(one["outside_fit"])
    return tips


def _lines(text: str, indent: str = "") -> list[str]:
    """``text`` wrapped to ``WIDTH`` columns, continuation lines indented two more spaces than ``indent``; a word longer
    than a line (a path in pytest's or a user's deep temporary folder) is kept whole on a line of its own, so that it
    can be copied."""
    wrapped = textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
        break_long_words=False,
    )
    return [line.replace(_KEEP, " ") for line in wrapped] or [indent]


_KEEP = "\N{NO-BREAK SPACE}"  # joins what a wrap must not split ("optax 0.2.8"); a space again once wrapped


def _named(versions: dict[str, str | None], names: tuple[str, ...]) -> str:
    """ "flax 0.12.8, keras 3.15.1" for those of ``names`` that are installed, each kept on one line."""
    return ", ".join(f"{name}{_KEEP}{versions[name]}" for name in names if versions.get(name))


def _ffi(version: Any) -> str:
    return ".".join(map(str, version or ())) or "unknown"


def _cudnn_lines(report: dict[str, Any], verbose: bool) -> list[str]:
    ext = report["extension"]
    if ext["loaded"]:
        build = ext["built_against"]
        state = f"loaded, cuDNN {ext['cudnn_runtime']} (built against {build['cudnn']})"
        if not report["nvidia_gpu"]:
            state += "; unused here: no NVIDIA GPU"
    else:
        state = "not loaded" + ("" if report["nvidia_gpu"] else " (not needed here: no NVIDIA GPU)")
    lines = _lines(f"cuDNN extension: {state}")
    if ext["loaded"] and verbose:
        lines += _lines(f"module: {ext['path']}", "  ")
        lines += _lines(f"libcudnn: {ext['cudnn_library'] or 'found through RPATH'}", "  ")
        lines += _lines(f"built against: jaxlib {build['jaxlib']}'s XLA FFI API {_ffi(build['xla_ffi_api'])}", "  ")
        lines += _lines(f"FFI targets for CUDA: {', '.join(ext['targets'])}", "  ")
    if ext["error"] and (verbose or report["nvidia_gpu"] or ext["loaded"]):
        lines += _lines(f"{'note' if ext['loaded'] else 'why'}: {ext['error']}", "  ")
    return lines


def _onednn_lines(report: dict[str, Any], verbose: bool) -> list[str]:
    one = report["onednn_extension"]
    if not one["loaded"]:
        lines = _lines("oneDNN extension: not loaded")
        return lines + (_lines(f"why: {one['error']}", "  ") if one["error"] else [])
    estimates = (
        f"this machine's tuned table {one['tuned_table']} where it measured the call"
        if one["tuned_table"]
        else "the rule fitted to the shipped measurements"
    )
    lines = _lines(
        f"oneDNN extension: loaded, oneDNN {one['onednn']} on {one['cpu_runtime']}, {one['cpu_isa']} kernels; "
        f"the CPU default's estimates: {estimates}"
    )
    if verbose:
        build = one["built_against"]
        lines += _lines(f"built against: jaxlib {build['jaxlib']}'s XLA FFI API {_ffi(build['xla_ffi_api'])}", "  ")
        lines += _lines("the rule's measurements:", "  ") + [
            line for cpu in one["measured_cpus"] for line in _lines(f"- {cpu}", "    ")
        ]
        lines += _lines("threading: its own oneTBB arena (onednn/threading.h: no process-wide setting)", "  ")
    if one["error"]:
        lines += _lines(f"note: {one['error']}", "  ")
    return lines


def _device_lines(report: dict[str, Any]) -> list[str]:
    """One line per kind of device and choice: "cpu:0 [cpu]: onednn (lstm, gru); xla (rnn_tanh, ...)"."""
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    for d in report["devices"]:
        table = _gpu_table_text(d["kind"], d["gpu_table"]) if "gpu_table" in d else ""
        key = (d["kind"], _picks(d["rnn_implementation"]), "; ".join(d["decided_by"]), table)
        groups.setdefault(key, []).append(d["device"])
    lines = ["rnn(implementation=None) picks, for a float32 call ('a+b': a undifferentiated, b under jax.grad):"]
    for (kind, picks, decided, table), names in groups.items():
        where = names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more"
        lines += _lines(f"{where} [{kind}]: {picks}", "  ") + _lines(f"decided by: {decided}", "    ")
        if table:
            lines += _lines(f"cuDNN's costs and algorithms: {table}", "    ")
    return lines


def format_report(report: dict[str, Any], verbose: bool = False) -> str:
    """The report as lines of at most ``WIDTH`` characters; ``verbose`` adds the build records, paths, targets, the
    CPU table's provenance and every backend's reasons for what only the xla implementation runs."""
    versions = report["versions"]
    lines = _lines(f"jax-cudnn-rnn {versions['jax-cudnn-rnn']} on Python {report['python'].split()[0]}")
    if verbose:
        lines += _lines(f"python: {report['python']}", "  ") + _lines(f"platform: {report['platform']}", "  ")
    lines += _lines(
        f"jax {versions['jax']}, jaxlib {versions['jaxlib']} (XLA FFI API {report['xla_ffi_api'] or 'unknown'}), "
        f"numpy {versions['numpy']}; default backend: {report['jax_default_backend']}"
    )
    plugins = _named(versions, ("jax-cuda13-plugin", "jax-cuda13-pjrt"))
    if plugins:
        lines += _lines(f"JAX's CUDA plugin: {plugins}")
    lines += _lines(f"peers: {_named(report['peers'], PEERS) or 'none installed'}")
    if verbose:
        libraries = ("nvidia-cudnn-cu13", "onednn-cpu-tbb", "tbb", "intel-cmplr-lib-rt")
        lines += _lines(f"libraries: {_named(versions, libraries) or 'none'}")
    lines += _cudnn_lines(report, verbose) + _onednn_lines(report, verbose) + _device_lines(report)
    if verbose:
        lines.append("run by the xla implementation only (the fused backends decline them):")
        for label, declined in report["pure_jax_only"].items():
            lines += _lines(f"{label}:", "  ")
            for name, why in declined.items():
                lines += _lines(f"{name}: needs {why}", "    ")
    else:
        lines += _lines(
            "xla only: other activations than the cell's own, mode 'gru_reset_before', recurrent dropout in "
            "training (why: --verbose)"
        )
    lines += ["advice:"] + [line for tip in report["advice"] for line in _lines(f"- {tip}", "  ")] or []
    if not report["advice"]:
        lines[-1] = "advice: none (what this machine can use is loaded)"
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="add build records, paths, FFI targets, the CPU table's provenance"
    )


def run(args: argparse.Namespace) -> int:
    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_report(report, verbose=args.verbose))
    return 0
