#include "recurrence_operands.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "threading.h"

namespace jax_cudnn_rnn::onednn {

namespace ffi = ::xla::ffi;

namespace {

// `r.blocks` from the attribute: w_in's blocks (none for skip input), then w_rec's, each matrix's gates in order
// without gap or overlap, each block of the rows or the columns form (WeightBlock).
ffi::Error DecodeBlocks(ffi::Span<const int64_t> fields, Recurrence* r) {
  if (fields.size() % kBlockFields != 0) {
    return ffi::Error::InvalidArgument("blocks has " + std::to_string(fields.size()) + " numbers; expected " +
                                       std::to_string(kBlockFields) + " per block");
  }
  int64_t next_gate[2] = {0, 0};
  for (size_t i = 0; i < fields.size(); i += kBlockFields) {
    const WeightBlock block{fields[i],     fields[i + 1], fields[i + 2], fields[i + 3],
                            fields[i + 4], fields[i + 5], fields[i + 6]};
    const std::string which = "blocks[" + std::to_string(i / kBlockFields) + "]";
    const bool matrix_ok = block.matrix == 1 || (block.matrix == 0 && !r->skip_input);
    if (!matrix_ok || (block.matrix == 0 && next_gate[1] > 0)) {
      return ffi::Error::InvalidArgument(which + " is of matrix " + std::to_string(block.matrix) +
                                         "; expected w_in's blocks (0; none for skip input), then w_rec's (1)");
    }
    const int64_t K = r->depth(block), rows = block.gates * r->units;
    const bool rows_form = block.col_stride == 1 && block.row_stride == K;
    const bool columns_form = block.row_stride == 1 && block.col_stride >= rows && block.col_stride > 1;
    if (block.operand < 0 || block.offset < 0 || block.gate0 != next_gate[block.matrix] || block.gates < 1 ||
        block.gate0 + block.gates > r->gates || !(rows_form || columns_form)) {
      return ffi::Error::InvalidArgument(
          which + " reads gates from " + std::to_string(block.gate0) + " (" + std::to_string(block.gates) +
          ") of operand " + std::to_string(block.operand) + " at " + std::to_string(block.offset) + " with strides " +
          std::to_string(block.row_stride) + ", " + std::to_string(block.col_stride) + "; expected gates from " +
          std::to_string(next_gate[block.matrix]) + " of " + std::to_string(r->gates) +
          ", as rows (strides K, 1) or columns (strides 1, at least gates * H)");
    }
    next_gate[block.matrix] += block.gates;
    r->operands = std::max(r->operands, block.operand + 1);
    r->blocks.push_back(block);
  }
  if (r->in_place && (next_gate[1] != r->gates || (!r->skip_input && next_gate[0] != r->gates))) {
    return ffi::Error::InvalidArgument("blocks cover " + std::to_string(next_gate[0]) + " gates of w_in and " +
                                       std::to_string(next_gate[1]) + " of w_rec; expected " +
                                       std::to_string(r->gates) + " of each (w_in: none for skip input)");
  }
  return ffi::Error::Success();
}

}  // namespace

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
  r.in_place = attrs.blocks.size() > 0;
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
  JCR_RETURN_IF_ERROR(DecodeBlocks(attrs.blocks, &r));
  *recurrence = std::move(r);
  return ffi::Error::Success();
}

ffi::Error CheckPacked(const ffi::AnyBuffer& packed, const MatmulPlan& plan) {
  return CheckBuffer("packed", packed, ffi::DataType::U8, {static_cast<int64_t>(plan.b.get_size())});
}

ffi::Error CheckInPlace(const std::vector<const ffi::AnyBuffer*>& operands, const Recurrence& r) {
  if (static_cast<int64_t>(operands.size()) != r.operands) {
    return ffi::Error::InvalidArgument("got " + std::to_string(operands.size()) + " weights operands; expected " +
                                       std::to_string(r.operands) + ", as the blocks read");
  }
  for (int64_t o = 0; o < r.operands; ++o) {
    const ffi::AnyBuffer& operand = *operands[o];
    const std::string name = o == 0 ? "params" : "pieces[" + std::to_string(o - 1) + "]";
    const int64_t count = static_cast<int64_t>(operand.element_count());
    if (operand.element_type() != r.weights_type) {
      return ffi::Error::InvalidArgument(name + " has dtype " + DataTypeName(operand.element_type()) + "; expected " +
                                         DataTypeName(r.weights_type) + ", the weights'");
    }
    bool rows = false, columns = false;
    int64_t width = 0;  // a columns operand's columns (its blocks' col_stride)
    std::vector<std::pair<int64_t, int64_t>> columns_taken;
    for (const WeightBlock& block : r.blocks) {
      if (block.operand != o) continue;
      const int64_t K = r.depth(block), n = block.gates * r.units;
      const int64_t last = block.offset + (n - 1) * block.row_stride + (K - 1) * block.col_stride;
      const bool fits =
          block.columns() ? block.offset + n <= block.col_stride && K * block.col_stride == count : last < count;
      if (!fits) {
        return ffi::Error::InvalidArgument(name + " has " + std::to_string(count) + " elements; expected gates " +
                                           std::to_string(block.gate0) + "-" +
                                           std::to_string(block.gate0 + block.gates - 1) +
                                           (block.matrix == 0 ? " of w_in" : " of w_rec") + " within it");
      }
      (block.columns() ? columns : rows) = true;
      if (block.columns()) {
        if (width != 0 && width != block.col_stride) {
          return ffi::Error::InvalidArgument(name + "'s blocks read it as " + std::to_string(width) + " and " +
                                             std::to_string(block.col_stride) + " columns; expected one width");
        }
        width = block.col_stride;
        columns_taken.emplace_back(block.offset, block.offset + n);
      }
    }
    if (rows && columns) {
      return ffi::Error::InvalidArgument(name + " holds blocks as rows and as columns; expected one form");
    }
    if (!r.params_gradient) continue;
    if (columns) {  // its gradient is its blocks': they must take every column once
      std::sort(columns_taken.begin(), columns_taken.end());
      int64_t done = 0;
      for (const auto& [begin, end] : columns_taken) done = begin == done ? end : -1;
      if (done != width) {
        return ffi::Error::InvalidArgument(name +
                                           "'s blocks take its columns other than once each; expected each "
                                           "column in one block");
      }
      continue;
    }
    std::vector<Slot> slots = OperandSlots(r, o);  // the gradient's slots: one value each
    std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.offset < b.offset; });
    for (size_t i = 0; i < slots.size(); ++i) {
      const Slot& slot = slots[i];
      if (slot.offset < 0 || slot.offset + slot.size > count) {
        return ffi::Error::InvalidArgument(std::string(slot.name) + " is " + std::to_string(slot.offset) +
                                           "; expected " + std::to_string(slot.size) + " elements from it within " +
                                           name + "'s " + std::to_string(count));
      }
      if (i > 0 && slots[i - 1].offset + slots[i - 1].size > slot.offset) {
        const Slot& before = slots[i - 1];
        return ffi::Error::InvalidArgument(std::string(slot.name) + " is " + std::to_string(slot.offset) +
                                           "; expected it at " + std::to_string(before.offset + before.size) +
                                           " or later, past " + before.name + "'s " + std::to_string(before.size) +
                                           " elements from " + std::to_string(before.offset));
      }
    }
  }
  return ffi::Error::Success();
}

std::vector<Slot> OperandSlots(const Recurrence& r, int64_t operand) {
  std::vector<Slot> slots;
  for (const WeightBlock& block : r.blocks) {
    if (block.operand == operand) {
      slots.push_back({block.offset, block.gates * r.units * r.depth(block), block.matrix == 0 ? "w_in" : "w_rec"});
    }
  }
  if (operand == 0 && r.params_gradient && r.b_in_offset != -1)
    slots.push_back({r.b_in_offset, r.width(), "b_in_offset"});
  if (operand == 0 && r.params_gradient && r.b_rec_offset != -1) {
    slots.push_back({r.b_rec_offset, r.width(), "b_rec_offset"});
  }
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
