"""GPU probe: how far are half-precision cuDNN gradients from the float32 reference, for this library and for
PyTorch's cuDNN RNN given the same weights, inputs and loss?

Run on the device machine once the extension is installed (the wheel or build stage of scripts/gpu_check.sh, or
its --wheel). Prints one line per case: the relative error in norm of y, dx and dh0 (and dparams for ours) against the
float32 xla implementation, for ours, for torch, and ours against torch. If ours and torch agree with each other and
both miss the reference, the gap is cuDNN's half arithmetic, not this library's wiring.
"""

import argparse
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_cudnn_gpu as t  # the GPU tests' problem, loss and float32 reference

import jax_cudnn_rnn as jcr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="rnn_relu,rnn_tanh", help="comma-separated, no lstm (the probe has no c0)")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = False  # float32 cases: strict, like the reference
    print(
        f"{'case':58s} {'ours y':>7s} {'dx':>7s} {'dh0':>7s} {'dpar':>7s} | {'torch y':>7s} {'dx':>7s} {'dh0':>7s} |"
        f" {'o-t dx':>7s} {'dh0':>7s}"
    )
    for mode, dtype_name, direction, input_size, layers, algo in itertools.product(
        args.modes.split(","),
        args.dtypes.split(","),
        ["unidirectional", "bidirectional"],
        [5, 8],
        [1, 2],
        ["standard", "heuristic"],
    ):
        cfg = jcr.RNNConfig(
            mode=mode,
            num_layers=layers,
            num_units=6,
            input_size=input_size,
            direction=direction,
            dtype=t.DTYPES[dtype_name],
        )
        params, x, h0, _, _ = t._problem(cfg)
        (y, _, _), grads = t._forward_and_grads("cudnn", cfg, params, x, h0, None, None, algorithm=algo)
        ref = t._upcast(cfg, params, x, h0, None)
        (y_ref, _, _), grads_ref = t._forward_and_grads("xla", *ref, None)
        dpar = t.relative_error(t.canonical_float32(grads[0], cfg), t.canonical_float32(grads_ref[0], ref[0]))
        (ty, _, _), (tdx, tdh0), _ = t.torch_forward_and_grads(cfg, params, x, h0, None)
        case = f"{mode} {dtype_name} {direction} I={input_size} L={layers} {algo}"
        pairs = [(y, y_ref), (grads[1], grads_ref[1]), (grads[2], grads_ref[2])]  # ours vs the reference
        pairs += [(ty, y_ref), (tdx, grads_ref[1]), (tdh0, grads_ref[2]), (grads[1], tdx), (grads[2], tdh0)]
        errors = [t.relative_error(*pair) for pair in pairs]
        errors.insert(3, dpar)
        print(
            f"{case:58s} " + " ".join(f"{e:7.2g}" + (" |" if i in (3, 6) else "") for i, e in enumerate(errors)),
            flush=True,
        )


if __name__ == "__main__":
    main()
