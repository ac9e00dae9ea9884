// The recurrence of "onednn:gemm" (jax_cudnn_rnn/backends/onednn/gemm.py) as two XLA FFI handlers (platform "cpu"):
// one layer and direction, every step one product on oneDNN's matmul with the recurrent weights packed once
// (matmul.h) and the cell's arithmetic around it (gemm_cells.h), all in one call, so that no step pays XLA's per-step
// overhead (a thunk per elementwise fusion, a whole pass per stacked output). The input product of every step and the
// weight gradients are single products that Python runs on jax_cudnn_rnn_onednn_matmul. G gates of H units, B rows,
// T steps, P = H (no projection); float32 unless said; "wdtype" is the weights' element type (`weights_dtype`).
//
//   jax_cudnn_rnn_onednn_gemm_forward(xp [T, B, G*H], packed, b_in [G*H], b_rec [G*H], h0 [B, H], [c0 [B, H]: lstm])
//       -> (y [T, B, H] float32 or wdtype, h_n [B, H], [c_n: lstm],
//           [training: gates [T, B, G*H], [aux [T, B, H]: lstm, gru], [h_prev [T, B, H]: gru], h_gemm [T, B, H]
//           wdtype])
//   jax_cudnn_rnn_onednn_gemm_backward(packed, dy [T, B, H] (y's type), dh_n [B, H], gates, [aux: lstm, gru],
//                                      [h_prev: gru], [c0, dc_n: lstm])
//       -> (d_xp [T, B, G*H] wdtype, d_bias [G*H], dh0 [B, H], [d_hp [T, B, G*H] wdtype, d_bias_rec [G*H]: gru],
//           [dc0: lstm])
//
// xp is the input product without biases; `packed` the recurrent weights w_rec [G*H, H] packed for products of
// `rows` rows by jax_cudnn_rnn_onednn_matmul_pack, transposed for the forward (h w_rec^T), as they are for the
// backward (d_hp w_rec). The step at time t reads the state of step t - 1 (t + 1 where `reverse`). gates, aux (LSTM: c
// after the step; GRU: R_n h + b_Rn), h_prev (GRU: the state each step read) and h_gemm (the state each step's product
// read, rounded to wdtype: the recurrent weights' gradient is d_hp^T h_gemm) are what the backward reads. d_xp is the
// gradient w.r.t. the pre-activations (and a GRU's d_hp w.r.t. the recurrent product), rounded to wdtype for the
// products that follow; d_bias and d_bias_rec are their sums over steps and rows in float32 (an LSTM's and a vanilla
// RNN's recurrent bias gradient is d_bias). Attributes: the network (RnnConfigAttrs: one layer and direction),
// `reverse`, `training`, `rows`, `weights_dtype` ("float32" or "bfloat16").
#ifndef JAX_CUDNN_RNN_ONEDNN_GEMM_RECURRENCE_H_
#define JAX_CUDNN_RNN_ONEDNN_GEMM_RECURRENCE_H_

#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

XLA_FFI_DECLARE_HANDLER_SYMBOL(GemmForward);
XLA_FFI_DECLARE_HANDLER_SYMBOL(GemmBackward);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_GEMM_RECURRENCE_H_
