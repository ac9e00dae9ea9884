"""The typical use case of tf.contrib.cudnn_rnn, in JAX.

Create a model, query the parameter buffer size, initialise the buffer or load canonical weights into it, call the model
for inference or training, and convert back to the canonical format to save or port the weights.

    python examples/seed_use_case.py
"""

import jax
import jax.numpy as jnp
import numpy as np

import jax_cudnn_rnn as jcr


def main() -> None:
    # 1. Create the model: 2 layers, 32 units, bidirectional, inputs of 16 features.
    lstm = jcr.CudnnLSTM(num_layers=2, num_units=32, input_size=16, direction="bidirectional")
    print(lstm)

    # 2. Query the parameter buffer size (elements of lstm.dtype).
    print("params_size:", lstm.params_size())

    # 3. Initialise the opaque buffer ...
    params = lstm.init_params(jax.random.key(0))
    # ... or load canonical weights and biases into it (here: the same ones, round-tripped).
    weights, biases = lstm.params_to_canonical(params)
    print(f"canonical: {len(weights)} weights, e.g. {weights[0].shape}; {len(biases)} biases, e.g. {biases[0].shape}")
    params = lstm.canonical_to_params(weights, biases)

    # 4. Call it: time-major input [T, B, input_size], states [num_layers * num_directions, B, num_units].
    time_steps, batch = 20, 4
    x = jax.random.normal(jax.random.key(1), (time_steps, batch, lstm.input_size))
    h = jnp.zeros((lstm.num_layers * 2, batch, lstm.num_units))
    output, output_h, output_c = lstm(x, h, h, params, is_training=False)
    print("output", output.shape, "output_h", output_h.shape, "output_c", output_c.shape)

    # 5. Train: the buffer is an ordinary array, so jax.grad and any optimiser work on it directly.
    @jax.jit
    def sgd_step(params, x):
        def loss(params):
            output, _, _ = lstm(x, h, h, params, is_training=True)
            return jnp.mean((output - 0.5) ** 2)

        value, grad = jax.value_and_grad(loss)(params)
        return params - 0.5 * grad, value

    for step in range(5):
        params, value = sgd_step(params, x)
        print(f"step {step}: loss {float(value):.5f}")

    # 6. Convert back to the canonical format, e.g. to save it or load it elsewhere; the named view is easier to read.
    weights, biases = lstm.params_to_canonical(params)
    tree = jcr.params_to_tree(params, lstm.config)
    print("layer_1/backward/w_input/f:", tree["layer_1"]["backward"]["w_input"]["f"].shape)
    np.testing.assert_array_equal(lstm.canonical_to_params(weights, biases), params)
    print("canonical round trip: exact")


if __name__ == "__main__":
    main()
