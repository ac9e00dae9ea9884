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
  // Where the weights are read in place: kBlockFields numbers per WeightBlock (below), none where w_rec comes packed
  // and w_in as its own argument.
  ::xla::ffi::Span<const int64_t> blocks;
  // The backward's weights gradient is that of every weights operand whole (a layer read in place): the biases' go to
  // b_in_offset and b_rec_offset of the first operand (-1: it has none), zeros wherever no block or bias lies.
  bool params_gradient;
  int64_t b_in_offset, b_rec_offset;
};

// Gates [gate0, gate0 + gates) of one of the layer's matrices (w_in [G*H, I], w_rec [G*H, H]) read where they lie in
// a weights operand (0: the handlers' `packed` argument, i > 0: the i-th of their trailing `pieces`): row `row` (of
// gates * H) and column `k` of the block are the operand's element offset + row * row_stride + k * col_stride. Two
// forms: rows (col_stride 1, row_stride K: the gates' rows as the buffer holds them) and columns (row_stride 1:
// columns [offset, offset + gates * H) of an operand [K, col_stride] that holds the matrix transposed, a Flax or Keras
// kernel); an operand's blocks have one form, and a columns operand is its blocks' whole.
struct WeightBlock {
  int64_t matrix;  // 0: w_in, 1: w_rec
  int64_t operand, offset, gate0, gates, row_stride, col_stride;
  bool columns() const { return row_stride == 1 && col_stride != 1; }
};
constexpr size_t kBlockFields = 7;

// One call's recurrence: the cell, the sizes and the weights' element type.
struct Recurrence {
  Mode mode = Mode::kLstm;
  int64_t steps = 0, batch = 0, units = 0, gates = 0, rows = 0, inputs = 0;  // inputs: the width of x (I)
  bool reverse = false, training = false, skip_input = false;
  ::xla::ffi::DataType weights_type = ::xla::ffi::DataType::F32;
  const int32_t* lengths = nullptr;  // per row, where the call has lengths (TakeLengths)
  bool in_place = false;             // the weights are read where `blocks` say
  std::vector<WeightBlock> blocks;   // w_in's (linear input) then w_rec's, each in gate order
  int64_t operands = 0;              // how many weights operands the blocks read (packed, then the pieces)
  bool params_gradient = false;
  int64_t b_in_offset = -1, b_rec_offset = -1;

  int64_t width() const { return gates * units; }  // G*H
  // The contracted size of `block`'s matrix: I for w_in, H for w_rec.
  int64_t depth(const WeightBlock& block) const { return block.matrix == 0 ? inputs : units; }
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

// The weights operands of a call `in_place` (`packed`, then the pieces): each of the weights' element type, each
// block within its operand, and, where `params_gradient`, no element in two blocks (or a block and a bias of the
// first operand) and a columns operand covered whole.
::xla::ffi::Error CheckInPlace(const std::vector<const ::xla::ffi::AnyBuffer*>& operands, const Recurrence& r);

// One of the layer's tensors in a rows operand of a call `in_place`: where it starts and its size (elements).
struct Slot {
  int64_t offset, size;
  const char* name;
};

// The tensors in rows operand `operand` of a call `in_place`, in the blocks' order and, for the first operand where
// `params_gradient`, its biases where it has them (their offsets not -1). What the backward's whole gradient covers.
std::vector<Slot> OperandSlots(const Recurrence& r, int64_t operand);

// The first element of `block` in its operand.
inline const void* At(const ::xla::ffi::AnyBuffer& operand, const Recurrence& r, const WeightBlock& block) {
  return static_cast<const char*>(operand.untyped_data()) + block.offset * r.weights_bytes();
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
