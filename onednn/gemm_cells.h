// The cells' arithmetic around the recurrent product of "onednn:gemm" (gemm_recurrence.cc), one row (one sequence of
// the batch) at a time: each cell's step and its gradient, the equations of jax_cudnn_rnn/cells/lstm.py, gru.py and
// elman.py (docs/architecture.md, "Cell equations") with their default activations. All arrays are float32.
//
// Per row, with G gates of `units` (H) each, in canonical gate order (LSTM i, f, g, o; GRU r, z, n):
//   xp, hp [G*H]   the input and the recurrent product of the step, without biases;
//   b_in, b_rec    [G*H] the input and recurrent biases (zeros where the network has none);
//   gates [G*H]    the activated gates (the vanilla RNN's output), what the step's gradient reads;
//   aux [H]        LSTM: c after the step; GRU: R_n h + b_Rn (n's recurrent part); unused otherwise.
#ifndef JAX_CUDNN_RNN_ONEDNN_GEMM_CELLS_H_
#define JAX_CUDNN_RNN_ONEDNN_GEMM_CELLS_H_

#include <cstdint>

#include "rnn_config.h"

namespace jax_cudnn_rnn::onednn {

// One step of one row: h [H] (and, LSTM, c [H]) the state it reads -> h_out [H] (and c_out [H]), gates, aux.
void ForwardRow(Mode mode, int64_t units, const float* xp, const float* hp, const float* b_in, const float* b_rec,
                const float* h, const float* c, float* h_out, float* c_out, float* gates, float* aux);

// Whether a cell's gradient w.r.t. its recurrent product differs from the one w.r.t. its input product (BackwardRow).
inline bool SeparateRecurrentGradient(Mode mode) { return mode == Mode::kGru; }

// The gradient of one step of one row from `gates` and `aux` as ForwardRow saved them, h [H] the state the step read
// (GRU) and c [H] the cell state it read (LSTM), dh [H] w.r.t. the step's h output (the carried gradient plus its
// output's own) and dc [H] w.r.t. its c output (LSTM; replaced by the gradient w.r.t. c) -> d_xp [G*H] w.r.t. the
// pre-activations. A GRU's recurrent side differs (``SeparateRecurrentGradient``): it also writes d_hp [G*H] w.r.t.
// the recurrent product plus its bias (n's is r * d_n) and dh_direct [H], the part of the gradient w.r.t. h that
// bypasses the product (dh * z); the other cells leave both untouched (their d_hp is d_xp, their dh_direct zero).
void BackwardRow(Mode mode, int64_t units, const float* gates, const float* aux, const float* h, const float* c,
                 const float* dh, float* dc, float* d_xp, float* d_hp, float* dh_direct);

// n values from float32 into float32 or (`bf16`) bfloat16, rounded to nearest even; and back.
void StoreRow(bool bf16, const float* src, void* dst, int64_t n);
void LoadRow(bool bf16, const void* src, float* dst, int64_t n);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_GEMM_CELLS_H_
