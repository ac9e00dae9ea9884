"""Data-parallel training on every device of every process, with checkpoints that resume on any topology.

A Flax LSTM tagger is trained with Adam: the batch is split over a 1-D ``("batch",)`` mesh of all devices of all
processes, the parameters (one opaque cuDNN buffer per RNN) are replicated, Adam's moments are split ZeRO-style where
the device count divides them, and the whole state goes to an Orbax ``CheckpointManager`` through the canonical
handler each step. Started again with the same ``--checkpoint-dir`` it resumes from the latest step, also with another
number of processes or devices. docs/scaling.md explains each choice.

One process, all its devices (on a CPU, ``--cpu-devices 8`` makes 8 of them)::

    python examples/data_parallel.py --cpu-devices 8 --steps 4 --checkpoint-dir /tmp/run

Several processes, one per host (here two on one machine, 4 CPU devices each)::

    python examples/data_parallel.py --cpu-devices 4 --coordinator 127.0.0.1:12345 --num-processes 2 \\
        --process-id 0 --steps 4 --checkpoint-dir /tmp/run &
    python examples/data_parallel.py --cpu-devices 4 --coordinator 127.0.0.1:12345 --num-processes 2 \\
        --process-id 1 --steps 4 --checkpoint-dir /tmp/run

On a GPU cluster leave out ``--cpu-devices``; under SLURM and other schedulers ``jax.distributed.initialize()``
finds the coordinator, process count and id by itself (``--coordinator auto``).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

TIME, FEATURES, ROWS_PER_DEVICE = 12, 8, 4


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="train until this step")
    parser.add_argument("--checkpoint-dir", required=True, help="shared by every process; resumed from if it exists")
    parser.add_argument("--cpu-devices", type=int, default=0, help="CPU devices per process (0: leave JAX's default)")
    parser.add_argument("--coordinator", default=None, help="host:port of process 0, or 'auto'; omit for one process")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    return parser.parse_args()


def start_jax(args: argparse.Namespace) -> None:
    """Must run before anything touches JAX's devices."""
    if args.cpu_devices:
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", args.cpu_devices)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives between processes
    if args.coordinator == "auto":
        jax.distributed.initialize()
    elif args.coordinator:
        jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)


def global_batch(step: int, batch: int):
    """The step's whole batch (batch-major x [B, T, F], labels [B, T], seq_lengths [B]): every process computes it
    and keeps its own rows, so any number of processes trains on the same data."""
    rng = np.random.default_rng(step)
    x = rng.normal(size=(batch, TIME, FEATURES)).astype(np.float32)
    labels = (np.cumsum(x[..., 0], axis=1) > 0).astype(np.int32)  # needs memory of the sequence so far
    lengths = rng.integers(TIME // 2, TIME + 1, size=batch).astype(np.int32)
    return x, labels, lengths


def main() -> None:
    args = parse_args()
    start_jax(args)
    import flax.linen as nn
    import optax
    import orbax.checkpoint as ocp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jax_cudnn_rnn.checkpoint import CanonicalRestore, CanonicalSave
    from jax_cudnn_rnn.flax import LSTM

    class Tagger(nn.Module):
        @nn.compact
        def __call__(self, x, seq_lengths):
            y = LSTM(num_units=32, num_layers=2, direction="bidirectional")(x, seq_lengths)
            return nn.Dense(2)(y)

    # Auto axes: XLA propagates the shardings (jax.make_mesh's default, explicit axes, is not supported yet)
    mesh = jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    model, optimizer = Tagger(), optax.adam(1e-2)

    def init():
        params = model.init(jax.random.key(0), jnp.zeros((1, TIME, FEATURES)), jnp.full((1,), TIME, jnp.int32))
        return {"params": params, "opt_state": optimizer.init(params), "step": jnp.int32(0)}

    # Params replicated (every device runs the whole network on its rows); Adam's moments split along their first
    # axis where the device count divides it (ZeRO-1: each device updates its part, XLA all-gathers the update).
    def split_if_even(leaf):
        return rows if leaf.ndim and leaf.shape[0] % jax.device_count() == 0 else replicated

    abstract = jax.eval_shape(init)
    shardings = {
        "params": jax.tree.map(lambda _: replicated, abstract["params"]),
        "opt_state": jax.tree.map(split_if_even, abstract["opt_state"]),
        "step": replicated,
    }
    abstract = jax.tree.map(
        lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding), abstract, shardings
    )

    @jax.jit
    def train_step(state, x, labels, lengths):
        def loss_fn(params):
            logits = model.apply(params, x, lengths)
            mask = jnp.arange(x.shape[1])[None, :] < lengths[:, None]
            losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            return jnp.sum(losses * mask) / jnp.sum(mask)

        loss, grads = jax.value_and_grad(loss_fn)(state["params"])
        updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
        state = {
            "params": optax.apply_updates(state["params"], updates),
            "opt_state": opt_state,
            "step": state["step"] + 1,
        }
        return jax.lax.with_sharding_constraint(state, shardings), loss

    options = ocp.CheckpointManagerOptions(max_to_keep=2)
    with ocp.CheckpointManager(args.checkpoint_dir, options=options) as manager:
        if manager.latest_step() is None:
            state = jax.jit(init, out_shardings=shardings)()
        else:
            state = manager.restore(manager.latest_step(), args=ocp.args.Composite(state=CanonicalRestore(abstract)))[
                "state"
            ]
            print(f"process {jax.process_index()}: resumed from step {manager.latest_step()}", flush=True)
        batch = ROWS_PER_DEVICE * jax.device_count()
        local = slice(
            jax.process_index() * batch // jax.process_count(), (jax.process_index() + 1) * batch // jax.process_count()
        )
        while (step := int(state["step"].addressable_data(0))) < args.steps:
            x, labels, lengths = (
                jax.make_array_from_process_local_data(rows, a[local]) for a in global_batch(step, batch)
            )
            state, loss = train_step(state, x, labels, lengths)
            manager.save(step + 1, args=ocp.args.Composite(state=CanonicalSave(state)))
            print(
                f"process {jax.process_index()}: step {step + 1} loss {float(loss.addressable_data(0)):.6f}", flush=True
            )
        manager.wait_until_finished()
    if args.coordinator:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
