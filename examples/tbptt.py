"""Truncated backpropagation through time: a character-level LSTM language model trained over consecutive windows of
a text, the state carried from each window to the next and gradients stopped at the window boundaries.

``batch`` cursors walk through ``batch`` equal stripes of the text. Every step takes the next ``window`` characters
of each stripe, starts from the state the previous window ended with (``jax.lax.stop_gradient``: backpropagation
stays inside the window) and passes its final state on, through the Flax module's ``initial_carry`` and
``return_carry``; ``initialize_carry`` makes the first state, and each new pass over the text starts from zero with
``resets`` on the first step. Because streaming is exact, the trained model run window by window gives the same
logits as one call over the whole stripe: the script checks that at the end.

    python examples/tbptt.py [--steps 300] [--window 32] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import importlib.resources

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jax_cudnn_rnn.flax import LSTM


class CharLM(nn.Module):
    """Embed -> LSTM -> Dense. tokens int [B, T], carry (Flax's (c, h), each [num_layers, B, num_units]), resets bool
    [B, T] or None -> (carry, logits [B, T, vocab])."""

    vocab_size: int
    embed_size: int = 32
    num_units: int = 128
    num_layers: int = 1

    @nn.compact
    def __call__(self, tokens, carry, resets=None):
        x = nn.Embed(self.vocab_size, self.embed_size, name="embed")(tokens)
        carry, y = LSTM(num_units=self.num_units, num_layers=self.num_layers, name="lstm")(
            x, initial_carry=carry, return_carry=True, resets=resets
        )
        return carry, nn.Dense(self.vocab_size, name="head")(y)

    @nn.nowrap
    def initialize_carry(self, batch):
        lstm = LSTM(num_units=self.num_units, num_layers=self.num_layers, parent=None)
        return lstm.initialize_carry(None, (batch, self.embed_size))


def stripes(batch: int, window: int) -> tuple[np.ndarray, list[str]]:
    """The text as ``batch`` equal stripes of token ids [batch, length + 1] (length a multiple of ``window``), and
    the vocabulary."""
    text = importlib.resources.files("jax_cudnn_rnn").joinpath("data/alice.txt").read_text(encoding="utf-8")
    vocabulary = sorted(set(text))
    ids = np.array([vocabulary.index(c) for c in text], np.int32)
    length = (len(ids) - 1) // batch // window * window
    if length == 0:
        raise SystemExit(f"the {len(ids)}-character text is too short for {batch} stripes of windows of {window}")
    stride = (len(ids) - 1) // batch
    return np.stack([ids[b * stride : b * stride + length + 1] for b in range(batch)]), vocabulary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="training windows (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=16, help="parallel stripes (default: %(default)s)")
    parser.add_argument("--window", type=int, default=32, help="characters per window (default: %(default)s)")
    parser.add_argument("--num-units", type=int, default=128, help="LSTM hidden size (default: %(default)s)")
    parser.add_argument("--num-layers", type=int, default=1, help="stacked LSTM layers (default: %(default)s)")
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="Adam learning rate (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="PRNG seed for the parameters")
    args = parser.parse_args(argv)

    data, vocabulary = stripes(args.batch_size, args.window)
    windows_per_pass = (data.shape[1] - 1) // args.window
    print(
        f"{data.shape[0]} stripes of {data.shape[1] - 1} characters, {windows_per_pass} windows of {args.window} "
        f"per pass, vocabulary {len(vocabulary)}"
    )
    model = CharLM(len(vocabulary), num_units=args.num_units, num_layers=args.num_layers)
    carry = model.initialize_carry(args.batch_size)
    params = model.init(jax.random.key(args.seed), jnp.asarray(data[:, : args.window]), carry)["params"]
    optimizer = optax.adam(args.learning_rate)
    opt_state = optimizer.init(params)
    new_pass = np.zeros((args.batch_size, args.window), bool)
    new_pass[:, 0] = True  # the state entering a pass's first step is zero, whatever the carry holds

    @jax.jit
    def train_step(params, opt_state, carry, inputs, targets, resets):
        carry = jax.lax.stop_gradient(carry)  # truncate: no gradient into earlier windows

        def loss_fn(params):
            final, logits = model.apply({"params": params}, inputs, carry, resets)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean(), final

        (loss, final), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, final, loss

    losses = []
    for step in range(args.steps):
        index = step % windows_per_pass
        start = index * args.window
        inputs = jnp.asarray(data[:, start : start + args.window])
        targets = jnp.asarray(data[:, start + 1 : start + args.window + 1])
        resets = jnp.asarray(new_pass if index == 0 else np.zeros_like(new_pass))
        params, opt_state, carry, loss = train_step(params, opt_state, carry, inputs, targets, resets)
        losses.append(float(loss))
        if (step + 1) % max(args.steps // 6, 1) == 0 or step + 1 == args.steps:
            print(f"window {step + 1}/{args.steps}: loss {np.mean(losses[-5:]):.3f} nats/char")
    print(f"loss: first {losses[0]:.3f}, last {np.mean(losses[-5:]):.3f}")

    # Window by window with the carry passed on equals one call over the whole stripe.
    tokens = jnp.asarray(data[:, :-1])
    apply = jax.jit(lambda tokens, carry: model.apply({"params": params}, tokens, carry))
    zero = model.initialize_carry(args.batch_size)
    carry, streamed, restarted = zero, [], []
    for start in range(0, tokens.shape[1], args.window):
        carry, logits = apply(tokens[:, start : start + args.window], carry)
        streamed.append(logits)
        restarted.append(apply(tokens[:, start : start + args.window], zero)[1])
    _, whole = apply(tokens, zero)
    difference = float(jnp.max(jnp.abs(jnp.concatenate(streamed, axis=1) - whole)))
    without_carry = float(jnp.max(jnp.abs(jnp.concatenate(restarted, axis=1) - whole)))
    print(
        f"streamed windows vs one call over {tokens.shape[1]} steps: max |logits difference| {difference:.2e} "
        f"(each window from a zero state instead: {without_carry:.2e})"
    )
    return 0 if difference < 1e-4 and without_carry > 1e-2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
