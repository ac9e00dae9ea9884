#include "recurrence_operands.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "threading.h"

namespace jax_cudnn_rnn::onednn {

namespace ffi = ::xla::ffi;

ffi::Error DecodeRecurrence(const RecurrenceAttrs& attrs, const ffi::AnyBuffer& x, Recurrence* recurrence) {
  RnnConfig config;
  JCR_RETURN_IF_ERROR(DecodeRnnConfig(attrs.config, &config));
  if (config.num_layers != 1 || config.num_directions != 1 || config.proj_size != 0 || config.cell_clip != 0) {
    return ffi::Error::InvalidArgument("the recurrence runs one layer and direction without projection or clipping");
  }
  Recurrence r;
  r.mode = config.mode;
  r.units = config.num_units;
  r.gates = config.num_gates();
  r.inputs = config.input_size;
  r.skip_input = config.skip_input;
  r.reverse = attrs.reverse;
  r.training = attrs.training;
  r.rows = attrs.rows;
  r.in_place = attrs.in_place;
  r.w_in_offset = attrs.w_in_offset;
  r.w_rec_offset = attrs.w_rec_offset;
  r.params_gradient = attrs.params_gradient;
  r.b_in_offset = attrs.b_in_offset;
  r.b_rec_offset = attrs.b_rec_offset;
  if (r.params_gradient && !r.in_place) {
    return ffi::Error::InvalidArgument("params_gradient is true; expected it only with in_place");
  }
  if (attrs.weights_dtype == "bfloat16") r.weights_type = ffi::DataType::BF16;
  else if (attrs.weights_dtype != "float32") {
    return ffi::Error::InvalidArgument("weights_dtype is '" + std::string(attrs.weights_dtype) +
                                       "'; expected float32 or bfloat16");
  }
  const auto dims = x.dimensions();
  if (dims.size() != 3 || dims[2] != r.inputs ||
      (x.element_type() != ffi::DataType::F32 && x.element_type() != r.weights_type)) {
    return ffi::Error::InvalidArgument("x has shape " + ShapeString(dims) + "; expected [T, B, " +
                                       std::to_string(r.inputs) + "] of float32 or the weights' element type");
  }
  r.steps = dims[0];
  r.batch = dims[1];
  *recurrence = r;
  return ffi::Error::Success();
}

ffi::Error CheckPacked(const ffi::AnyBuffer& packed, const MatmulPlan& plan) {
  return CheckBuffer("packed", packed, ffi::DataType::U8, {static_cast<int64_t>(plan.b.get_size())});
}

ffi::Error CheckInPlace(const ffi::AnyBuffer& params, const Recurrence& r) {
  const auto dims = params.dimensions();
  if (params.element_type() != r.weights_type || dims.size() != 1) {
    return ffi::Error::InvalidArgument("params has dtype " + DataTypeName(params.element_type()) + " and shape " +
                                       ShapeString(dims) + "; expected a 1-D buffer of " +
                                       DataTypeName(r.weights_type));
  }
  std::vector<Slot> slots = ParamsSlots(r);
  for (const Slot& slot : slots) {
    if (slot.offset < 0 || slot.offset + slot.size > dims[0]) {
      return ffi::Error::InvalidArgument(std::string(slot.name) + " is " + std::to_string(slot.offset) + "; expected " +
                                         std::to_string(slot.size) + " elements from it within params' " +
                                         std::to_string(dims[0]));
    }
  }
  if (r.params_gradient) {  // the gradient's slots: one value each
    std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.offset < b.offset; });
    for (size_t i = 1; i < slots.size(); ++i) {
      const Slot &slot = slots[i], &before = slots[i - 1];
      if (before.offset + before.size > slot.offset) {
        return ffi::Error::InvalidArgument(std::string(slot.name) + " is " + std::to_string(slot.offset) +
                                           "; expected it at " + std::to_string(before.offset + before.size) +
                                           " or later, past " + before.name + "'s " + std::to_string(before.size) +
                                           " elements from " + std::to_string(before.offset));
      }
    }
  }
  return ffi::Error::Success();
}

std::vector<Slot> ParamsSlots(const Recurrence& r) {
  const int64_t W = r.width();
  std::vector<Slot> slots = {{r.w_rec_offset, W * r.units, "w_rec_offset"}};
  if (!r.skip_input) slots.push_back({r.w_in_offset, W * r.inputs, "w_in_offset"});
  if (r.params_gradient && r.b_in_offset != -1) slots.push_back({r.b_in_offset, W, "b_in_offset"});
  if (r.params_gradient && r.b_rec_offset != -1) slots.push_back({r.b_rec_offset, W, "b_rec_offset"});
  return slots;
}

ffi::Error TakeLengths(OptionalBuffers<ffi::RemainingArgs>& args, bool has_lengths, Recurrence* r) {
  std::optional<ffi::AnyBuffer> lengths;
  JCR_RETURN_IF_ERROR(args.Take(has_lengths, "lengths", &lengths));
  if (lengths) {
    JCR_RETURN_IF_ERROR(CheckBuffer("lengths", *lengths, ffi::DataType::S32, {r->batch}));
    r->lengths = static_cast<const int32_t*>(lengths->untyped_data());
  }
  return ffi::Error::Success();
}

ffi::Error CheckOutputType(const char* name, const ffi::AnyBuffer& buffer, const Recurrence& r) {
  if (buffer.element_type() != ffi::DataType::F32 && buffer.element_type() != r.weights_type) {
    return ffi::Error::InvalidArgument(std::string(name) + " has dtype " + DataTypeName(buffer.element_type()) +
                                       "; expected float32 or the weights' (" + DataTypeName(r.weights_type) + ")");
  }
  return CheckBuffer(name, buffer, buffer.element_type(), {r.steps, r.batch, r.units});
}

int64_t Chunks(int64_t batch) { return std::max<int64_t>(1, std::min(batch, ParallelThreads())); }

}  // namespace jax_cudnn_rnn::onednn
