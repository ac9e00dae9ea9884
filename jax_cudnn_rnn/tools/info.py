"""``jax-cudnn-rnn info``: what this installation is and what ``rnn()`` will do here, like
``jax.print_environment_info()``.

Reports the versions (this package, Python, jax, jaxlib, JAX's GPU plugins, cuDNN at run time and at build time,
oneDNN), whether the cuDNN and oneDNN extensions are loaded and why not, a build/run-time version mismatch, JAX's
devices, and for each device the implementation that ``rnn(..., implementation=None)`` picks for a float32 call of
each mode on arrays placed there, on each side of jax.grad ("onednn+xla": oneDNN undifferentiated, xla in training)
and what decided it (the CPU rule, this machine's tuned table, cuDNN's place on CUDA), asked of the package's own
chooser (``backends.registry.decide``) so that this report never disagrees with ``rnn()``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
from typing import Any

import jax

from jax_cudnn_rnn import onednn
from jax_cudnn_rnn.backends import native_extension, registry
from jax_cudnn_rnn.backends.call import Call
from jax_cudnn_rnn.backends.cudnn import extension as _extension
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
    "flax",
    "optax",
    "orbax-checkpoint",
    "torch",
)
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
    """{mode: implementation} as "onednn (lstm, gru), xla (rnn_tanh, rnn_relu)", or one name when all agree."""
    by_name: dict[str, list[str]] = {}
    for mode, name in picked.items():
        by_name.setdefault(name, []).append(mode)
    if len(by_name) == 1:
        return next(iter(by_name))
    return ", ".join(f"{name} ({', '.join(modes)})" for name, modes in by_name.items())


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
    return {
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "versions": {name: _version(name) for name in DISTRIBUTIONS},
        "xla_ffi_api": ".".join(map(str, native_extension.running_xla_ffi_api_version() or ())) or None,
        "jax_default_backend": jax.default_backend(),
        "extension": extension,
        "onednn_extension": {
            "loaded": onednn.extension_loaded(),
            "error": onednn.extension_error(),
            "cpu_runtime": onednn.cpu_runtime(),
            "cpu_isa": onednn.effective_cpu_isa(),
            "tuned_table": onednn.tuned_table() if onednn.extension_loaded() else None,
            "measured_cpus": [m.describe() for m in onednn.MEASUREMENTS],
            "built_against": _onednn_build(),
        },
        "devices": [
            {
                "device": str(device),
                "platform": device.platform,
                "kind": device.device_kind,
                "rnn_implementation": {mode: implementation_on(device, mode) for mode in MODES},
                "decided_by": sorted({source for mode in MODES for source in decided_by(device, mode)}),
            }
            for device in _devices()
        ],
        "pure_jax_only": pure_jax_only(),
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as aligned ``name: value`` lines."""
    lines = [f"python: {report['python']}", f"platform: {report['platform']}"]
    lines += [f"{name}: {version}" for name, version in report["versions"].items() if version]
    lines.append(f"XLA FFI API (running jaxlib): {report['xla_ffi_api'] or 'unknown'}")
    ext = report["extension"]
    lines.append(f"cuDNN extension: {'loaded' if ext['loaded'] else 'not loaded'}")
    if ext["loaded"]:
        build = ext["built_against"]
        lines += [
            f"  module: {ext['path']}",
            f"  cuDNN: {ext['cudnn_runtime']} at run time ({ext['cudnn_library'] or 'found through RPATH'}), "
            f"{build['cudnn']} at build time",
            f"  built against: the XLA FFI headers of jaxlib {build['jaxlib']}, XLA FFI API "
            f"{'.'.join(map(str, build['xla_ffi_api'] or ())) or 'unknown'}",
            f"  FFI targets for CUDA: {', '.join(ext['targets'])}",
        ]
    if ext["error"]:
        lines.append(f"  {'why' if not ext['loaded'] else 'note'}: {ext['error']}")
    one = report["onednn_extension"]
    lines.append(f"oneDNN extension: {'loaded' if one['loaded'] else 'not loaded'}")
    if one["error"]:
        lines.append(f"  {'why' if not one['loaded'] else 'note'}: {one['error']}")
    if one["loaded"]:
        lines.append(f"  CPU threading runtime: {one['cpu_runtime']} (onednn/threading.h: no process-wide setting)")
        lines.append(f"  instruction set: {one['cpu_isa']}")
        tuned = one["tuned_table"]
        lines.append(
            f"  the default's estimates: this machine's tuned table {tuned} where it measured the call"
            if tuned
            else "  the default's estimates: the rule fitted to the shipped measurements (`jax-cudnn-rnn tune` "
            "measures this machine's own)"
        )
        lines += [f"    measured: {cpu}" for cpu in one["measured_cpus"]]
        build = one["built_against"]
        lines.append(
            f"  built against: the XLA FFI headers of jaxlib {build['jaxlib']}, XLA FFI API "
            f"{'.'.join(map(str, build['xla_ffi_api']))}"
        )
    lines.append(f"JAX default backend: {report['jax_default_backend']}")
    lines.append(
        "devices (what rnn(implementation=None) picks for a float32 call; 'a+b': a undifferentiated, b under jax.grad):"
    )
    for d in report["devices"]:
        lines.append(f"  {d['device']} [{d['kind']}]: {_picks(d['rnn_implementation'])}")
        lines += [f"    decided by {source}" for source in d["decided_by"]]
    lines.append("run by the xla implementation only (the fused backends decline them):")
    for label, declined in report["pure_jax_only"].items():
        lines.append(f"  {label}:")
        lines += [f"    {name}: needs {why}" for name, why in declined.items()]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
