// One layer and direction of "onednn:gemm" (jax_cudnn_rnn/backends/onednn/gemm.py) as two XLA FFI handlers (platform
// "cpu"), each one call: the forward's input product of every step, then per step one product with the recurrent
// weights packed once (matmul.h) and the cell's arithmetic around it (gemm_cells.h); the backward's steps in reverse,
// then the weights' and the input's gradients, one product each over every step. As an XLA scan the per-step
// arithmetic and its stacked outputs cost about 40 % of the forward, and every array between two calls is a buffer
// XLA allocates anew (pages faulted in and zeroed at every call); here the step arrays and the products' operands
// come from the extension's pool (scratch.h). G gates of H units, B rows, T steps, I inputs, P = H (no projection);
// float32 unless said; "wdtype" is the weights' element type (`weights_dtype`), x's is float32 or wdtype.
//
//   jax_cudnn_rnn_onednn_gemm_forward(x [T, B, I], packed, b_in [G*H], b_rec [G*H], h0 [B, H],
//                                     [w_in [G*H, I] wdtype: linear input, not in place], [c0 [B, H]: lstm],
//                                     [lengths [B] int32: has_lengths], [pieces...: in place])
//       -> (y [T, B, H] float32 or wdtype, h_n [B, H], [c_n: lstm], [training: gates [T, B, G*H],
//           [aux [T, B, H]: lstm, gru], [h_prev [T, B, H]: gru], h_gemm [T, B, H] wdtype])
//   jax_cudnn_rnn_onednn_gemm_backward(x, packed, dy [T, B, H] (y's type), dh_n [B, H], gates, h_gemm,
//                                      [w_in: linear input, not in place], [aux: lstm, gru], [h_prev: gru],
//                                      [c0, dc_n: lstm], [lengths: has_lengths], [pieces...: in place])
//       -> (dx [T, B, I] (x's type), dw_rec [G*H * H] wdtype, d_b_in [G*H], d_b_rec [G*H], dh0 [B, H],
//           [dw_in [G*H * I] wdtype: linear input], [dc0: lstm], [d_pieces...: params_gradient])
// The weights' gradients are flat (row-major [G*H, H] and [G*H, I]): the buffer's gradient is their concatenation
// with the biases', which XLA copies as they are; shaped, it fused the reshapes into a loop of 2.5 ms for 6 MB.
// Over T * B <= 2 rows they are written as outer products (oneDNN's matmul took 0.6 ms for one [1, 1536]^T [1, 512]).
//
// `packed` is the recurrent weights w_rec [G*H, H] packed for products of `rows` rows by
// jax_cudnn_rnn_onednn_matmul_pack, transposed for the forward (h w_rec^T), as they are for the backward (d_hp w_rec).
// Where the `blocks` attribute is not empty (in place) the weights are instead read where they lie: `blocks` says, per
// run of gates of w_in and of w_rec, which weights operand holds it (0: `packed`, then the trailing `pieces`), where,
// and with which strides (recurrence_operands.h's WeightBlock): the network's flat parameter buffer as `packed` (each
// matrix one block of rows), or a frontend's own tensors (a Flax cell's kernel per gate, held [in, H]: a block of
// columns; a Keras layer's kernel [in, G*H]: its gates' columns), each block's product where it lies; w_in not
// passed apart. No packing and no copy of the weights: what a call of one or a few steps wants (its weights would be
// copied and packed for a few products), and, for a frontend's tensors, no concatenation of them into a buffer.
// With skip input (the network's input_mode) x itself enters every gate. The step at time t reads the state of step
// t - 1 (t + 1 where `reverse`). gates, aux (LSTM: c after the step; GRU: R_n h + b_Rn), h_prev (GRU: the state each
// step read) and h_gemm (that state rounded to wdtype, as its product read it) are what the backward reads. The
// gradients of the gates are rounded to wdtype for the products that follow; the biases' are their sums in float32
// (an LSTM's and a vanilla RNN's d_b_rec is their d_b_in). With `lengths` (cuDNN's packed sequences): a step at a time
// t >= lengths[b] leaves row b's state as it is and outputs zeros, so that h_n and c_n are the state after the row's
// last valid step and the reverse direction starts at lengths[b] - 1; its backward passes the state's gradients
// through unchanged and gives the gates none (x's values there must be finite, as gemm.py makes them: dw_in reads
// them). Attributes: the network (RnnConfigAttrs: one layer and direction, its input size and mode), `reverse`,
// `training`, `rows`, `weights_dtype` ("float32" or "bfloat16"), `has_lengths`, `blocks`, `params_gradient`,
// `b_in_offset`, `b_rec_offset`.
//
// `params_gradient` (in place, the backward): the gradients of the weights operands whole, each block's written where
// it lies: `dw_rec` is instead packed's (d_params: the buffer's gradient, with the biases' rounded to wdtype at
// `b_in_offset` and `b_rec_offset`, -1: none in it, and zeros wherever no block or bias lies), each piece's follows
// dc0, and there is no dw_in: the buffer's gradient without XLA's concatenation of the parts (0.68 ms of a 1.72 ms
// LSTM step gradient at B=4, H=512, for 8 MB; Intel AMX, float32), a frontend's tensors' gradients as they lie.
#ifndef JAX_CUDNN_RNN_ONEDNN_GEMM_RECURRENCE_H_
#define JAX_CUDNN_RNN_ONEDNN_GEMM_RECURRENCE_H_

#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

XLA_FFI_DECLARE_HANDLER_SYMBOL(GemmForward);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GemmBackward);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_GEMM_RECURRENCE_H_
