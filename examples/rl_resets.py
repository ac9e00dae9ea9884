"""A recurrent policy over a batch of rollouts whose episodes end inside the window: ``rnn(..., resets=...)``.

Recurrent reinforcement learning (PPO-style) collects windows of T steps from B environments. An episode may end
anywhere inside a window, and the policy's state must start again from zero on the next step. The usual JAX code
scans a cell step by step and zeroes the state with ``jnp.where``, which rules out a fused kernel; here the whole
window is one call (cuDNN on a GPU, the xla implementation elsewhere) with ``resets[t, b] = done[t - 1, b]``, and the
state at a window's start is the state the previous window ended with.

The toy task needs both the memory and the resets: at an episode's first step the observation shows a cue (+1 or -1)
and a start flag, later steps show noise only, and every step rewards the action that names the current episode's
cue. The script

1. checks the fused policy against a step-by-step ``lax.scan`` of the same LSTM written out with ``jnp.where``
   resets: logits, final state and the gradients of a REINFORCE loss with respect to every parameter;
2. trains with REINFORCE window after window, carrying the state (gradients stop at window boundaries), and prints
   the average reward, which starts at 0.5 (chance).

    python examples/rl_resets.py [--steps 60] [--envs 32] [--window 32]
"""

from __future__ import annotations

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jax_cudnn_rnn.flax import LSTM

OBSERVATION_SIZE = 4  # cue, start flag, two noise features
NUM_ACTIONS = 2


class Policy(nn.Module):
    """A time-major LSTM policy: observations [T, B, OBSERVATION_SIZE] -> (carry, logits [T, B, NUM_ACTIONS])."""

    num_units: int
    num_layers: int = 1

    def setup(self):
        self.lstm = LSTM(num_units=self.num_units, num_layers=self.num_layers, time_major=True)
        self.head = nn.Dense(NUM_ACTIONS)

    def __call__(self, observations, resets, carry):
        carry, features = self.lstm(observations, initial_carry=carry, return_carry=True, resets=resets)
        return carry, self.head(features)

    @nn.nowrap
    def initialize_carry(self, batch):
        """The zero carry, Flax's (c, h), for ``batch`` environments: the state at the very first step."""
        lstm = LSTM(num_units=self.num_units, num_layers=self.num_layers, time_major=True, parent=None)
        return lstm.initialize_carry(None, (batch, OBSERVATION_SIZE))


def scan_policy(params, observations, resets, carry):
    """The same policy as a step-by-step scan, the state zeroed with ``jnp.where`` where a new episode starts (what
    recurrent RL code writes by hand). Reads the LSTM's named weights (Flax's LSTM cell's: one bias per gate, on the
    recurrent side), so gradients reach the same parameters."""
    tree = params["lstm"]["rnn_params"]

    def cell(weights, x, h, c):
        def gate(name):
            return x @ weights["w_input"][name].T + h @ weights["w_recurrent"][name].T + weights["b_recurrent"][name]

        c = jax.nn.sigmoid(gate("f")) * c + jax.nn.sigmoid(gate("i")) * jnp.tanh(gate("g"))
        return jax.nn.sigmoid(gate("o")) * jnp.tanh(c), c

    def step(state, inputs):
        x, reset = inputs
        c, h = (jnp.where(reset[None, :, None], 0.0, s) for s in state)
        hs, cs = [], []
        for layer in range(len(tree)):
            x, c_new = cell(tree[f"layer_{layer}"]["forward"], x, h[layer], c[layer])
            hs.append(x)
            cs.append(c_new)
        logits = x @ params["head"]["kernel"] + params["head"]["bias"]
        return (jnp.stack(cs), jnp.stack(hs)), logits

    return jax.lax.scan(step, carry, (observations, resets))


def rollout_window(
    rng: np.random.Generator, episode_end: float, previous_done: np.ndarray, cues: np.ndarray, window: int
):
    """Observations [T, B, OBSERVATION_SIZE], resets [T, B], the rewarded action [T, B], and the last step's done
    flags and cues to continue from. Episodes end after a step with probability ``episode_end``."""
    envs = cues.shape[0]
    observations = np.zeros((window, envs, OBSERVATION_SIZE), np.float32)
    resets = np.zeros((window, envs), bool)
    targets = np.zeros((window, envs), np.int32)
    done = previous_done
    for t in range(window):
        resets[t] = done
        cues = np.where(done, rng.integers(0, NUM_ACTIONS, envs), cues)
        observations[t, :, 0] = np.where(done, 2.0 * cues - 1.0, 0.0)
        observations[t, :, 1] = done
        observations[t, :, 2:] = rng.normal(size=(envs, OBSERVATION_SIZE - 2))
        targets[t] = cues
        done = rng.random(envs) < episode_end
    return observations, resets, targets, done, cues


def reinforce_loss(logits, actions, rewards):
    """-mean(log pi(a) * (r - 0.5)): REINFORCE with the chance reward as baseline."""
    log_probs = jax.nn.log_softmax(logits)
    taken = jnp.take_along_axis(log_probs, actions[..., None], axis=-1)[..., 0]
    return -jnp.mean(taken * (rewards - 0.5))


def check_against_scan(model, params, window, envs, seed):
    """Fused resets vs the step-by-step scan: the largest differences in values and in gradients, and in values when
    the fused call ignores the resets (which must be large: the check would be vacuous otherwise)."""
    rng = np.random.default_rng(seed)
    observations, resets, _, _, _ = rollout_window(rng, 0.2, np.ones(envs, bool), np.zeros(envs, np.int64), window)
    resets[0, : envs // 2] = False  # half the rows continue an episode from the window before ...
    carry = jax.tree_util.tree_map(lambda a: a + 0.5, model.initialize_carry(envs))  # ... with this state
    actions = jnp.asarray(rng.integers(0, NUM_ACTIONS, (window, envs)), jnp.int32)
    rewards = jnp.asarray(rng.random((window, envs)), jnp.float32)
    observations, resets = jnp.asarray(observations), jnp.asarray(resets)

    def fused(params):
        final, logits = model.apply({"params": params}, observations, resets, carry)
        return reinforce_loss(logits, actions, rewards), (final, logits)

    def scanned(params):
        final, logits = scan_policy(params, observations, resets, carry)
        return reinforce_loss(logits, actions, rewards), (final, logits)

    def largest_difference(a, b):
        return max(
            float(jnp.max(jnp.abs(x - y)))
            for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True)
        )

    (_, fused_out), fused_grads = jax.jit(jax.value_and_grad(fused, has_aux=True))(params)
    (_, scan_out), scan_grads = jax.jit(jax.value_and_grad(scanned, has_aux=True))(params)
    without_resets = model.apply({"params": params}, observations, None, carry)
    return (
        largest_difference(fused_out, scan_out),
        largest_difference(fused_grads, scan_grads),
        largest_difference(without_resets, scan_out),
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="training windows (default: %(default)s)")
    parser.add_argument("--envs", type=int, default=32, help="environments run in parallel (default: %(default)s)")
    parser.add_argument("--window", type=int, default=32, help="steps per window (default: %(default)s)")
    parser.add_argument("--num-units", type=int, default=32, help="LSTM hidden size (default: %(default)s)")
    parser.add_argument("--num-layers", type=int, default=1, help="stacked LSTM layers (default: %(default)s)")
    parser.add_argument(
        "--episode-end",
        type=float,
        default=0.1,
        help="probability that an episode ends after a step (default: %(default)s)",
    )
    parser.add_argument("--learning-rate", type=float, default=1e-2, help="Adam learning rate (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the parameters and the environments")
    args = parser.parse_args(argv)

    model = Policy(args.num_units, args.num_layers)
    observations = jnp.zeros((args.window, args.envs, OBSERVATION_SIZE))
    resets = jnp.zeros((args.window, args.envs), bool)
    params = model.init(jax.random.key(args.seed), observations, resets, model.initialize_carry(args.envs))["params"]

    values, grads, ignored = check_against_scan(model, params, args.window, args.envs, args.seed)
    print(
        f"fused resets vs step-by-step scan: max |difference| values {values:.2e}, gradients {grads:.2e} "
        f"(without the resets: {ignored:.2e})"
    )
    if not (values < 1e-4 and grads < 1e-4 and ignored > 1e-2):
        print("FAILED: the fused policy differs from the scan")
        return 1

    optimizer = optax.adam(args.learning_rate)
    opt_state = optimizer.init(params)

    @jax.jit
    def train_step(params, opt_state, carry, observations, resets, targets, key):
        carry = jax.lax.stop_gradient(carry)  # truncate backpropagation at the window's start

        def loss_fn(params):
            final, logits = model.apply({"params": params}, observations, resets, carry)
            actions = jax.random.categorical(key, jax.lax.stop_gradient(logits))
            rewards = (actions == targets).astype(jnp.float32)
            return reinforce_loss(logits, actions, rewards), (final, jnp.mean(rewards))

        (_, (final, reward)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, final, reward

    rng = np.random.default_rng(args.seed)
    done, cues = np.ones(args.envs, bool), np.zeros(args.envs, np.int64)
    carry = model.initialize_carry(args.envs)
    key = jax.random.key(args.seed + 1)
    rewards = []
    for step in range(1, args.steps + 1):
        observations, resets, targets, done, cues = rollout_window(rng, args.episode_end, done, cues, args.window)
        key, sample_key = jax.random.split(key)
        params, opt_state, carry, reward = train_step(
            params, opt_state, carry, jnp.asarray(observations), jnp.asarray(resets), jnp.asarray(targets), sample_key
        )
        rewards.append(float(reward))
        if step % max(args.steps // 6, 1) == 0 or step == args.steps:
            print(f"window {step}/{args.steps}: average reward {np.mean(rewards[-5:]):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
