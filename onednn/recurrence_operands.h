// The recurrence handlers' call (gemm_recurrence.h): their attributes, the recurrence they describe, and the checks of
// the operands that are not simply [T, B, ·] or [B, H] arrays of a known dtype (x, the packed weights, the lengths, y
// and dy), all before either handler reads a byte: a disagreement is an ffi::Error naming the operand, what was
// expected and what came.
#ifndef JAX_CUDNN_RNN_ONEDNN_RECURRENCE_OPERANDS_H_
#define JAX_CUDNN_RNN_ONEDNN_RECURRENCE_OPERANDS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ffi_args.h"
#include "matmul.h"
#include "rnn_config.h"
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

// The handlers' attributes (jax_cudnn_rnn/backends/onednn/kernels.py `gemm_forward`, `gemm_backward`).
struct RecurrenceAttrs {
  RnnConfigAttrs config;
  bool reverse;
  bool training;
  int64_t rows;
  std::string_view weights_dtype;
  bool has_lengths;
  bool in_place;  // the weights operand is the parameter buffer: w_in and w_rec read where they lie in it
  int64_t w_in_offset, w_rec_offset;  // in elements, where in_place
  // The backward's weights gradient is the whole buffer's (one layer and direction in place): the biases' go to
  // b_in_offset and b_rec_offset (-1: the buffer has none), zeros wherever the layer has nothing.
  bool params_gradient;
  int64_t b_in_offset, b_rec_offset;
};

// One call's recurrence: the cell, the sizes and the weights' element type.
struct Recurrence {
  Mode mode = Mode::kLstm;
  int64_t steps = 0, batch = 0, units = 0, gates = 0, rows = 0, inputs = 0;  // inputs: the width of x (I)
  bool reverse = false, training = false, skip_input = false;
  ::xla::ffi::DataType weights_type = ::xla::ffi::DataType::F32;
  const int32_t* lengths = nullptr;  // per row, where the call has lengths (TakeLengths)
  bool in_place = false;
  int64_t w_in_offset = 0, w_rec_offset = 0;
  bool params_gradient = false;
  int64_t b_in_offset = -1, b_rec_offset = -1;

  int64_t width() const { return gates * units; }  // G*H
  bool bf16() const { return weights_type == ::xla::ffi::DataType::BF16; }
  size_t weights_bytes() const { return bf16() ? 2 : 4; }
  // The time of the `s`-th step in processing order, and whether it is the first one.
  int64_t time(int64_t s) const { return reverse ? steps - 1 - s : s; }
  // Whether row `b` is past its length at time `t` (its state passes unchanged, its output is zero).
  bool padding(int64_t t, int64_t b) const { return lengths != nullptr && t >= lengths[b]; }
};

// The recurrence of a call from its attributes and its input x [T, B, I] (float32 or the weights' type).
::xla::ffi::Error DecodeRecurrence(const RecurrenceAttrs& attrs, const ::xla::ffi::AnyBuffer& x,
                                   Recurrence* recurrence);

// The packed recurrent weights: a uint8 buffer of exactly the plan's packed size.
::xla::ffi::Error CheckPacked(const ::xla::ffi::AnyBuffer& packed, const MatmulPlan& plan);

// The parameter buffer a call `in_place` reads its weights from: 1-D of the weights' element type, holding w_rec
// [G*H, H] at w_rec_offset and (linear input) w_in [G*H, I] at w_in_offset, and, where `params_gradient`, the biases
// [G*H] at b_in_offset and b_rec_offset where they are not -1.
::xla::ffi::Error CheckInPlace(const ::xla::ffi::AnyBuffer& params, const Recurrence& r);

// One of the layer's tensors in the parameter buffer of a call `in_place`: where it starts and its size (elements).
struct Slot {
  int64_t offset, size;
  const char* name;  // its offset's attribute
};

// The layer's tensors in the buffer, in this order: w_rec, w_in (linear input), and, where `params_gradient`, b_in and
// b_rec where the buffer has them (their offsets not -1). What CheckInPlace checks and the backward's whole gradient
// covers.
std::vector<Slot> ParamsSlots(const Recurrence& r);

// The element at `offset` of the parameter buffer of a call `in_place`.
inline const void* At(const ::xla::ffi::AnyBuffer& params, const Recurrence& r, int64_t offset) {
  return static_cast<const char*>(params.untyped_data()) + offset * r.weights_bytes();
}

// The optional `lengths` argument (int32 [B], where `has_lengths`) into `r`.
::xla::ffi::Error TakeLengths(OptionalBuffers<::xla::ffi::RemainingArgs>& args, bool has_lengths, Recurrence* r);

// y (or dy) [T, B, H] of float32 or the weights' element type (a network's last layer in bfloat16).
::xla::ffi::Error CheckOutputType(const char* name, const ::xla::ffi::AnyBuffer& buffer, const Recurrence& r);

// Row `b` of step `t` of a [T, B, width] array of `bytes`-byte elements.
template <typename T>
T* Row(void* base, const Recurrence& r, int64_t t, int64_t b, int64_t width, size_t bytes) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + ((t * r.batch + b) * width) * bytes);
}

// Pieces of the batch for ParallelFor: at most one per thread of the extension's arena, the same for every call of a
// given size.
int64_t Chunks(int64_t batch);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_RECURRENCE_OPERANDS_H_
