"""``jax-cudnn-rnn`` command line: one subcommand per registered module.

Adding a subcommand is one ``register(name, help, module)`` call below; the module provides ``add_arguments(parser)``
(its flags) and ``run(args) -> int`` (the work). Building the parser imports every registered module; one whose
import, or whose run, needs a package that is not installed (the demo's Flax, the bench's rich on a plain ``pip install
jax-cudnn-rnn``) says which package is missing and which extra brings it, and the other subcommands run as usual.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys

_COMMANDS: dict[str, tuple[str, str, str, str]] = {}


def register(name: str, help: str, module: str, description: str = "", extra: str = "") -> None:
    """Registers subcommand ``name``, implemented by ``module``'s ``add_arguments(parser)`` and ``run(args) -> int``;
    ``extra`` is the package's optional extra that installs what ``module`` imports."""
    _COMMANDS[name] = (help, description or help, module, extra)


register(
    "demo",
    "train a character-level LSTM, checkpoint it canonically, rerun it in plain Flax",
    "jax_cudnn_rnn.tools.demo",
    description="Trains a character-level LSTM language model on a short public-domain text (Lewis Carroll) "
    "with this library's LSTM, run by the implementation rnn() picks: cuDNN's kernels on a GPU with "
    "the cuDNN extension loaded; on a CPU, oneDNN's kernels where the oneDNN extension is loaded and "
    "faster for the shape (the demo's LSTM is), else the pure-JAX 'xla' implementation (it prints "
    "which, and why when it is the xla one). Saves Orbax checkpoints in the canonical format into "
    "--output-dir, reads the last one back with a plain ocp.StandardCheckpointer into a plain Flax "
    "model (nn.LSTMCell), checks that both give the same logits, and prints generated text. A re-run "
    "into the same folder resumes only with the same settings and a higher --steps, else starts "
    "fresh. Defaults finish in a few minutes on a laptop CPU.",
    extra="demo",
)
register(
    "info",
    "versions, the cuDNN and oneDNN extensions' status, which implementation rnn() picks on each device",
    "jax_cudnn_rnn.tools.info",
    description="Prints, in lines of at most 100 characters, this package's, Python's, JAX's, the peers' (Flax, "
    "Keras, Equinox, PyTorch, Orbax, optax), cuDNN's and oneDNN's versions, whether the cuDNN and oneDNN "
    "extensions are loaded and why not, JAX's devices, the implementation rnn(implementation=None) picks "
    "for arrays on each device, and advice that fits this machine. --verbose adds build records, paths, "
    "FFI targets and the CPU table's provenance; --json prints everything. Paste it into bug reports.",
)
register(
    "bench",
    "time this library's LSTM/GRU against Flax, jax.experimental.rnn and PyTorch",
    "jax_cudnn_rnn.tools.bench",
    description="Times the forward pass and a training step (gradient of sum(y**2) with respect to the "
    "parameters and x) of this library's rnn() (its default choice and the cuDNN, oneDNN and "
    "pure-JAX xla implementations), Flax's nn.RNN, jax.experimental.rnn.lstm and PyTorch's "
    "nn.LSTM/nn.GRU on named configurations (A-F on a GPU, cpu-lstm and cpu-gru otherwise); reports "
    "the median milliseconds and the ratios to PyTorch and Flax as a table, and optionally as JSON, "
    "Markdown and a PNG plot. Contenders that cannot run here are skipped with the reason. --quick "
    "is a CI-sized smoke run.",
    extra="bench",
)

register(
    "tune",
    "measure on this machine what rnn() chooses between on the CPU and the GPU, and choose from that from now on",
    "jax_cudnn_rnn.tools.tune",
    description="On the CPU: times the xla implementation, oneDNN and its variants at a grid of shapes (LSTM and "
    "GRU, float32 and bfloat16; the forward and a training step), each in a process of its own, for a few minutes, "
    "and writes the ratios to this machine's table in the user's cache directory ($XDG_CACHE_HOME or ~/.cache, "
    "jax-cudnn-rnn/), keyed by the CPU, oneDNN's instruction set, the cores and the versions. On a GPU cuDNN runs "
    "on: times cuDNN's algorithms and the xla implementation on the bench's GPU configs (A-G, float32 and "
    "bfloat16), each in a process of its own, within 5 minutes (--budget-seconds), into a table keyed by the GPU's "
    "kind, cuDNN's and the versions. From then on rnn(implementation=None) estimates from these tables instead of "
    "the shipped measurements, wherever they measured the call (on the GPU: its shape class); `jax-cudnn-rnn info` "
    "says which decided. --platform cpu or gpu tunes one.",
)


def _version() -> str:
    """The installed distribution's version, else the package's own (a source checkout on the path)."""
    try:
        return importlib.metadata.version("jax-cudnn-rnn")
    except importlib.metadata.PackageNotFoundError:
        return importlib.import_module("jax_cudnn_rnn").__version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jax-cudnn-rnn", description="cuDNN's fused LSTM/GRU/RNN kernels for JAX: tools and demos."
    )
    parser.add_argument("--version", action="version", version=f"jax-cudnn-rnn {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, description, module, extra) in _COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=description)
        try:
            implementation = importlib.import_module(module)
        except ModuleNotFoundError as error:
            sub.set_defaults(_run=_missing(name, _package(error), extra), _any_arguments=True)
            continue
        implementation.add_arguments(sub)
        sub.set_defaults(_run=implementation.run)
    return parser


def _package(error: ModuleNotFoundError) -> str:
    """The package whose absence raised ``error``; ``error`` itself where it is this package's own module (a broken
    install, not a missing extra)."""
    if error.name is None or error.name.partition(".")[0] == "jax_cudnn_rnn":
        raise error
    return error.name


def _missing(command: str, package: str, extra: str):
    """The run of a subcommand whose module could not be imported: what is missing and how to install it."""
    install = f"pip install 'jax-cudnn-rnn[{extra}]'" if extra else f"pip install {package}"

    def run(args: argparse.Namespace) -> int:
        print(
            f"jax-cudnn-rnn {command}: needs the package {package!r}, which is not installed; {install} installs it",
            file=sys.stderr,
        )
        return 2

    return run


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if unknown and not getattr(args, "_any_arguments", False):  # as parse_args, but for a subcommand that cannot run
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except ModuleNotFoundError as error:  # one the subcommand imports as it runs (bench's rich)
        return _missing(args.command, _package(error), _COMMANDS[args.command][3])(args)


if __name__ == "__main__":
    sys.exit(main())
