"""The demo: a character-level LSTM language model trained with this library, checkpointed in canonical form,
then run again in plain Flax (``nn.LSTMCell`` via ``FlaxCellStack``) from the checkpoint read by a plain
``ocp.StandardCheckpointer``, which must give the same logits.

Flow: train (jit + optax, rich progress bar with loss and characters/s) -> ``CheckpointManager`` saves
``CanonicalSave(state)`` every ``--save-every`` steps -> the last step's item is read back with
``ocp.StandardCheckpointer().restore`` (no jax_cudnn_rnn types involved) -> ``interop.canonical_to_flax`` ->
plain-Flax logits compared with the trained model's (max abs difference printed, error above ``--tolerance``) ->
sampled text.

The output folder (``--output-dir``, default ``./jax_cudnn_rnn_demo``) holds ``demo_config.json`` (the settings that
shape the model and its training) and the last two checkpoints as ``<step>/state``. A re-run into the same folder
resumes from the last checkpoint only when those settings match and ``--steps`` is higher than its step; otherwise it
removes the previous run's checkpoints and starts fresh. It says which it did, and refuses a folder that holds
anything else. Faults: a save cut off (the process killed) leaves Orbax's temporary directory, which a re-run names and
discards, resuming from the last complete step. Ctrl-C stops training after the step and the save in flight, says
which step to resume from and exits 130; a second Ctrl-C abandons that save.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.resources
import json
import os
import shutil
import signal
import threading
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from jax_cudnn_rnn import checkpoint, interop, onednn
from jax_cudnn_rnn.backends.cudnn import extension as _extension
from jax_cudnn_rnn.backends.onednn import extension as onednn_extension
from jax_cudnn_rnn.flax import LSTM
from jax_cudnn_rnn.interop.flax_cells import FlaxCellStack


def load_text() -> str:
    return importlib.resources.files("jax_cudnn_rnn").joinpath("data/alice.txt").read_text(encoding="utf-8")


class CharLM(nn.Module):
    """Embed -> LSTM -> Dense over the vocabulary. tokens: int [B, T] -> logits [B, T, vocab].

    ``plain=False`` uses this library's LSTM module; ``plain=True`` builds the same network from plain Flax cells only
    (no jax_cudnn_rnn op), which is what a user without this library would run.
    """

    vocab_size: int
    embed_size: int
    num_units: int
    num_layers: int
    plain: bool = False

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab_size, self.embed_size, name="embed")(tokens)
        rnn = (
            FlaxCellStack("lstm", self.num_units, num_layers=self.num_layers, name="lstm")
            if self.plain
            else LSTM(num_units=self.num_units, num_layers=self.num_layers, name="lstm")
        )
        return nn.Dense(self.vocab_size, name="head")(rnn(x))


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


CONFIG_FILE = "demo_config.json"
# The settings a checkpoint depends on; the others (--save-every, --sample-length, ...) may change between runs.
RUN_SETTINGS = ("batch_size", "seq_len", "num_units", "num_layers", "embed_size", "learning_rate", "seed")
# The parameters' form: 2 since the linen LSTM keeps Flax's named tensors (one bias per gate) instead of one buffer,
# so that a folder of an older run starts fresh instead of failing to restore.
PARAMS_FORMAT = 2


def run_settings(args: argparse.Namespace, text: str) -> dict[str, Any]:
    """What a checkpoint of this run depends on: the model/training flags and the text (by hash)."""
    return {
        **{name: getattr(args, name) for name in RUN_SETTINGS},
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "params_format": PARAMS_FORMAT,
    }


def prepare_output(directory: str, settings: dict[str, Any], steps: int) -> tuple[int | None, str]:
    """Decides between resuming and starting fresh in ``directory``: (step to resume from or None, what to tell the
    user). Starting fresh removes a previous run's checkpoints and settings; a folder holding anything else is refused
    (SystemExit) rather than emptied. Saves that were cut off (Orbax's temporary directories, as Orbax itself
    recognises them) are the demo's own: named in the message, and left to the CheckpointManager, which the run
    creates with ``cleanup_tmp_directories``, to remove."""
    if not os.path.isdir(directory):
        return None, f"starting a new run in {directory}"
    interrupted = sorted(path.get().name for path in ocp.path.step.all_temporary_paths(directory))
    found = f"; discarding the interrupted save {', '.join(interrupted)}" if interrupted else ""
    entries = os.listdir(directory)
    steps_found = sorted(int(name) for name in entries if name.isdigit())
    foreign = [name for name in entries if not name.isdigit() and name != CONFIG_FILE and name not in interrupted]
    if foreign:
        raise SystemExit(
            f"--output-dir {directory} holds files that are not this demo's ({', '.join(sorted(foreign))}"
            f"); pass another --output-dir or remove them"
        )
    if not steps_found:
        return None, f"starting a new run in {directory}{found}"
    try:
        with open(os.path.join(directory, CONFIG_FILE), encoding="utf-8") as f:
            previous = json.load(f)
    except (OSError, ValueError):
        previous = None
    last = steps_found[-1]
    if previous == settings and last < steps:
        return last, f"resuming the run in {directory} from its checkpoint at step {last} (same settings){found}"
    if previous is None:
        reason = f"it has no readable {CONFIG_FILE}"
    elif previous != settings:
        changed = [f"{k} {previous.get(k)} -> {settings[k]}" for k in settings if previous.get(k) != settings[k]]
        reason = f"its settings differ ({', '.join(changed)})"
    else:
        reason = f"it already reached step {last} >= --steps {steps}"
    for step in steps_found:
        shutil.rmtree(os.path.join(directory, str(step)))
    return None, (
        f"starting fresh in {directory}: removed the previous run's checkpoints {steps_found}, as {reason}{found}"
    )


def trained_by(compiled_text: str) -> str:
    """Which implementation the compiled training step runs, read from its HLO (the cuDNN and oneDNN paths are custom
    calls to their extensions' FFI targets), with the reason when it is the pure-JAX one."""
    if _extension.FORWARD_TARGET in compiled_text:
        return "cuDNN (implementation 'cudnn': the step calls cuDNN's fused RNN kernels)"
    if onednn_extension.GEMM_FORWARD_TARGET in compiled_text:
        return "oneDNN (implementation 'onednn:gemm': the step runs oneDNN's matmuls in a recurrence on the CPU)"
    if onednn_extension.FORWARD_TARGET in compiled_text:
        return "oneDNN (implementation 'onednn': the step calls oneDNN's fused RNN kernels on the CPU)"
    if jax.default_backend() == "gpu":
        why = f"the cuDNN extension is not loaded: {_extension.extension_error()}"
    elif not onednn.extension_loaded():
        why = f"the oneDNN extension is not loaded: {onednn.extension_error()}"
    else:
        why = f"JAX's backend is {jax.default_backend()!r} and oneDNN is not the faster choice for this shape"
    return f"pure JAX (implementation 'xla'), since {why}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=_positive, default=600, help="training steps (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="sequences per step (default: %(default)s)")
    parser.add_argument("--seq-len", type=int, default=64, help="characters per sequence (default: %(default)s)")
    parser.add_argument("--num-units", type=int, default=128, help="LSTM hidden size (default: %(default)s)")
    parser.add_argument("--num-layers", type=int, default=1, help="stacked LSTM layers (default: %(default)s)")
    parser.add_argument("--embed-size", type=int, default=32, help="character embedding size (default: %(default)s)")
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="Adam learning rate (default: %(default)s)")
    parser.add_argument(
        "--save-every",
        type=int,
        default=100,
        help="checkpoint every N steps; the last step is always saved (default: %(default)s)",
    )
    parser.add_argument(
        "--output-dir", default="jax_cudnn_rnn_demo", help="where the Orbax checkpoints go (default: ./%(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="PRNG seed for init, batches and sampling")
    parser.add_argument("--sample-length", type=int, default=200, help="characters to generate (default: %(default)s)")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=1e-4,
        help="max allowed |logits(library) - logits(plain Flax)| (default: %(default)s)",
    )
    parser.add_argument("--no-progress", action="store_true", help="plain log lines instead of a progress bar")


class StopRequest:
    """Ctrl-C (SIGINT) as a request to stop, between ``install()`` and ``restore()``: the first sets ``requested``
    (the training loop ends after its step, and the save in flight completes); a second raises KeyboardInterrupt at
    once, abandoning that save (Orbax leaves its temporary directory, which the next run discards). ``restore`` puts
    back the handler that was there; outside the main thread, where Python allows no signal handler, neither does
    anything."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def install(self) -> None:
        if not self._installed and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True

    def restore(self) -> None:
        if self._installed:
            # None: a handler installed from outside Python, which Python cannot reinstall
            signal.signal(signal.SIGINT, signal.SIG_DFL if self._previous is None else self._previous)
            self._installed = False


def run(args: argparse.Namespace) -> int:
    """The demo; 0 when the restored plain-Flax model matches, 1 when not, 130 when stopped by Ctrl-C (after saying
    which step a re-run resumes from; never a traceback)."""
    stop = StopRequest()
    try:
        return _run(args, stop)
    except KeyboardInterrupt:  # a Ctrl-C outside the training loop, or a second one inside it
        directory = os.path.abspath(args.output_dir)
        steps = ocp.path.step.checkpoint_steps(directory) if os.path.isdir(directory) else []
        saved = f"step {max(steps)} is saved in {directory}" if steps else "no step is saved"
        print(f"interrupted by Ctrl-C; {saved} (a save it cut off is discarded by the next run)", flush=True)
        return 130
    finally:
        stop.restore()


def _run(args: argparse.Namespace, stop: StopRequest) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console()
    text = load_text()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = np.array([index[c] for c in text], np.int32)
    if len(data) <= args.seq_len + 1:
        raise SystemExit(f"--seq-len {args.seq_len} is too long for the {len(data)}-character text")
    vocab = len(chars)
    console.print(
        f"text: {len(text)} characters, vocabulary {vocab}; backend {jax.default_backend()}; "
        f"LSTM {args.num_layers}x{args.num_units}"
    )

    model = CharLM(vocab, args.embed_size, args.num_units, args.num_layers)

    def batch(step):
        """Step ``step``'s (inputs, targets), int32 [batch, seq_len]; a function of (seed, step) alone, so a resumed
        run sees the batches an uninterrupted one would."""
        rng = np.random.default_rng([args.seed, step])
        starts = rng.integers(0, len(data) - args.seq_len - 1, args.batch_size)
        seqs = np.stack([data[s : s + args.seq_len + 1] for s in starts])
        return jnp.asarray(seqs[:, :-1]), jnp.asarray(seqs[:, 1:])

    params = model.init(jax.random.key(args.seed), batch(0)[0])["params"]
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(args.learning_rate))
    state = {"params": params, "opt_state": opt.init(params), "step": jnp.int32(0)}

    @jax.jit
    def train_step(state, inputs, targets):
        def loss_fn(p):
            logits = model.apply({"params": p}, inputs)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state["params"])
        updates, opt_state = opt.update(grads, state["opt_state"], state["params"])
        return {
            "params": optax.apply_updates(state["params"], updates),
            "opt_state": opt_state,
            "step": state["step"] + 1,
        }, loss

    directory = os.path.abspath(args.output_dir)
    settings = run_settings(args, text)
    resume_from, decision = prepare_output(directory, settings, args.steps)
    console.print(decision)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(settings, f, indent=2)
    stop.install()  # from here until the last save is complete, Ctrl-C stops after the step and the save in flight
    manager = ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(max_to_keep=2, cleanup_tmp_directories=True)
    )
    if resume_from is not None:
        state = manager.restore(resume_from, args=ocp.args.Composite(state=checkpoint.CanonicalRestore(state)))["state"]
    first = (resume_from or 0) + 1
    compiled_step = train_step.lower(state, *batch(first)).compile()
    console.print(f"training with {trained_by(compiled_step.as_text())}")
    loss, done = float("nan"), first - 1
    chars_done, started = 0, time.perf_counter()
    columns = [
        TextColumn("[bold]training"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("loss {task.fields[loss]:.3f}"),
        TextColumn("{task.fields[rate]:,.0f} chars/s"),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=console, disable=args.no_progress) as progress:
        task = progress.add_task("train", total=args.steps, completed=first - 1, loss=float("nan"), rate=0.0)
        for step in range(first, args.steps + 1):
            if stop.requested:
                break
            inputs, targets = batch(step)
            state, loss_value = compiled_step(state, inputs, targets)
            if step == first:
                started, chars_done = time.perf_counter(), 0  # leave the first step's start-up out of the rate
            chars_done += inputs.size
            loss = float(loss_value)
            rate = chars_done / max(time.perf_counter() - started, 1e-9)
            progress.update(task, advance=1, loss=loss, rate=rate)
            if args.no_progress and (step % max(args.steps // 10, 1) == 0 or step == args.steps):
                console.print(f"step {step}/{args.steps} loss {loss:.4f} {rate:,.0f} chars/s")
            if step % args.save_every == 0 or step == args.steps:
                manager.save(step, args=ocp.args.Composite(state=checkpoint.CanonicalSave(state)))
            done = step
    manager.wait_until_finished()
    stop.restore()
    last = manager.latest_step()
    if stop.requested:
        manager.close()
        if last is None:
            resume = "no step is saved yet: the next run starts anew"
        elif done < args.steps:
            resume = f"step {last} is saved: run the same command to resume from it"
        else:
            resume = f"step {last} is saved: pass a higher --steps to continue from it"
        console.print(f"stopped by Ctrl-C at step {done}; {resume}")
        return 130
    console.print(f"final loss {loss:.4f}; checkpoints {manager.all_steps()} in {directory}")
    manager.close()

    # Read the last checkpoint as someone without this library would: a plain StandardCheckpointer.
    item_dir = os.path.join(directory, str(last), "state")
    with ocp.StandardCheckpointer() as reader:
        raw = reader.restore(item_dir)
    lstm = LSTM(num_units=args.num_units, num_layers=args.num_layers).packed(raw["params"]["lstm"])
    plain_params = {
        "embed": raw["params"]["embed"],
        "head": raw["params"]["head"],
        "lstm": interop.canonical_to_flax(*lstm.to_canonical(), lstm.config),
    }
    plain = CharLM(vocab, args.embed_size, args.num_units, args.num_layers, plain=True)

    probe = jnp.asarray(data[None, : min(len(data), 4 * args.seq_len)])
    ours = model.apply({"params": state["params"]}, probe)
    theirs = plain.apply({"params": plain_params}, probe)
    difference = float(jnp.max(jnp.abs(ours - theirs)))
    console.print(f"restored step {last} into plain Flax (nn.LSTMCell): max |logits difference| = {difference:.3e}")
    if not difference <= args.tolerance:
        console.print(f"[bold red]FAILED[/]: difference {difference:.3e} exceeds --tolerance {args.tolerance}")
        return 1

    # Generate with the plain-Flax model (feeds the whole prefix each time: simple, and fine for a demo).
    key = jax.random.key(args.seed + 1)
    prompt = "Alice "
    tokens = [index[c] for c in prompt if c in index]
    window = 4 * args.seq_len

    @jax.jit
    def next_logits(tokens):
        return plain.apply({"params": plain_params}, tokens[None])[0, -1]

    buffer = np.zeros((window,), np.int32)
    for _ in range(args.sample_length):
        context = tokens[-window:]
        buffer[:] = context[0]
        buffer[window - len(context) :] = context
        key, sub = jax.random.split(key)
        tokens.append(int(jax.random.categorical(sub, next_logits(jnp.asarray(buffer)) / 0.8)))
    console.print("[bold]sample:[/]")
    console.print("".join(chars[t] for t in tokens), markup=False, highlight=False)
    return 0
