#include "weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "threading.h"

namespace jax_cudnn_rnn::onednn {

ParamsView::ParamsView(std::vector<Piece> pieces, size_t element_bytes, InputChannel channel)
    : pieces_(std::move(pieces)), element_bytes_(element_bytes), channel_(std::move(channel)) {
  std::sort(pieces_.begin(), pieces_.end(), [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < pieces_.size(); ++i) {
    if (pieces_[i - 1].offset + pieces_[i - 1].count > pieces_[i].offset) {
      throw std::invalid_argument("the params pieces at elements " + std::to_string(pieces_[i - 1].offset) + " and " +
                                  std::to_string(pieces_[i].offset) + " overlap");
    }
  }
}

void* ParamsView::Whole(int64_t offset, int64_t count) const {
  // The last piece starting at or before `offset`.
  auto after = std::upper_bound(pieces_.begin(), pieces_.end(), offset,
                                [](int64_t value, const Piece& piece) { return value < piece.offset; });
  if (after == pieces_.begin()) return nullptr;
  const Piece& piece = *std::prev(after);
  if (offset + count > piece.offset + piece.count) return nullptr;
  return static_cast<char*>(piece.data) + (offset - piece.offset) * element_bytes_;
}

void* ParamsView::Block(int64_t offset, int64_t count) const {
  if (void* data = Whole(offset, count)) return data;
  for (const Piece& piece : pieces_) {
    if (piece.offset < offset + count && offset < piece.offset + piece.count) {
      throw std::invalid_argument("the params piece at element " + std::to_string(piece.offset) + " (" +
                                  std::to_string(piece.count) + " elements) holds part of the tensor at element " +
                                  std::to_string(offset) + " (" + std::to_string(count) + " elements)");
    }
  }
  return nullptr;
}

namespace {

// oneDNN gate k holds cuDNN gate SwappedGate(k), and cuDNN gate g is oneDNN gate SwappedGate(g): lbr_gru swaps the
// first two gates, a swap is its own inverse.
int64_t SwappedGate(Mode mode, int64_t gate) {
  static constexpr int64_t kGru[] = {1, 0, 2};
  return mode == Mode::kGru ? kGru[gate] : gate;
}

// The oneDNN bias block that cuDNN gate g's recurrent bias belongs to (its input bias: SwappedGate).
int64_t RecurrentBiasBlock(Mode mode, int64_t gate) {
  static constexpr int64_t kGru[] = {1, 0, 3};
  return mode == Mode::kGru ? kGru[gate] : gate;
}

float Load(const void* data, bool bf16, int64_t index) {
  if (!bf16) return static_cast<const float*>(data)[index];
  const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(data)[index]) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

void Store(void* data, bool bf16, int64_t index, float value) {
  if (!bf16) {
    static_cast<float*>(data)[index] = value;
    return;
  }
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  uint16_t result;
  if (std::isnan(value)) {
    result = static_cast<uint16_t>((bits >> 16) | 0x40);  // stays a (quiet) NaN
  } else {
    bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest, ties to even
    result = static_cast<uint16_t>(bits >> 16);
  }
  static_cast<uint16_t*>(data)[index] = result;
}

// The blocks of one group of one layer, between the buffer's pieces and a plain tensor: `group(slot)` is the group's
// offset in the buffer, `block` the elements of one gate, `gated` whether the group has one block per gate (in
// cuDNN's order in the buffer, oneDNN's in the tensor) or one per direction (the projection). `to_plain`: params ->
// `plain` (zeros where no piece holds a block), else `plain` -> params (a block no piece holds takes nothing).
template <typename Group>
void CopyBlocks(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, Group group,
                int64_t block, bool gated, const ParamsView& params, void* plain, bool to_plain) {
  const int64_t gates = gated ? network.num_gates() : 1;
  const size_t bytes = block * network.element_bytes();
  for (int64_t d = 0; d < network.num_directions; ++d) {
    const int64_t buffer_offset = group(slots[layer * network.num_directions + d]);
    for (int64_t k = 0; k < gates; ++k) {
      char* tensor = static_cast<char*>(plain) + (d * gates + k) * bytes;
      void* piece = params.Block(buffer_offset + (gated ? SwappedGate(network.mode, k) : 0) * block, block);
      if (to_plain && piece == nullptr) std::memset(tensor, 0, bytes);
      else if (to_plain) std::memcpy(tensor, piece, bytes);
      else if (piece != nullptr) std::memcpy(piece, tensor, bytes);
    }
  }
}

int64_t InputOffset(const SlotOffsets& s) { return s.w_input; }
int64_t RecurrentOffset(const SlotOffsets& s) { return s.w_recurrent; }
int64_t ProjectionOffset(const SlotOffsets& s) { return s.w_projection; }

// Layer 0's input matrices of a network wider than the params by `channel` (ldgoi, oneDNN's gate order): each row
// the params' row (skip input's identity row where channel.skip_input; zeros where no piece holds the block), then
// zeros, then the channel's weight for the row's gate. Row by row, straight from the pieces: no widened buffer.
void GatherWidened(const Network& network, const std::vector<SlotOffsets>& slots, const ParamsView& params,
                   void* w_layer) {
  const InputChannel& channel = params.channel();
  const bool bf16 = network.data_type == dnnl::memory::data_type::bf16;
  const int64_t units = network.num_units, width = network.input_size, own = channel.params_input_size(network);
  const int64_t gates = network.num_gates(), blocks = network.num_directions * gates;
  const size_t eb = network.element_bytes();
  std::vector<const char*> sources(blocks, nullptr);  // oneDNN block d * gates + k's rows in the params
  std::vector<float> weights(blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t gate = SwappedGate(network.mode, b % gates);
    weights[b] = channel.weights[gate];
    if (!channel.skip_input) {
      sources[b] = static_cast<const char*>(params.Block(slots[b / gates].w_input + gate * units * own, units * own));
    }
  }
  // Each row written once (a memset of the whole tensor first cost a second pass over it), the rows on the arena's
  // threads: done on one, the copy cost a B=1 float32 LSTM forward of 256 units 0.15 ms more than a widened buffer.
  ParallelFor(blocks * units, ParallelThreads(), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / units, o = r % units;
      char* row = static_cast<char*>(w_layer) + r * width * eb;
      if (sources[b] != nullptr) {
        std::memcpy(row, sources[b] + o * own * eb, own * eb);
        std::memset(row + own * eb, 0, (width - 1 - own) * eb);
      } else {
        std::memset(row, 0, (width - 1) * eb);
        if (channel.skip_input) Store(row, bf16, o, 1.0f);
      }
      Store(row, bf16, width - 1, weights[b]);
    }
  });
}

// The inverse for gradients: the params' columns of each row into `dparams` (the channel's take nothing), the rows on
// the arena's threads as GatherWidened's.
void ScatterWidened(const Network& network, const std::vector<SlotOffsets>& slots, const void* w_layer,
                    const ParamsView& dparams) {
  const InputChannel& channel = dparams.channel();
  if (channel.skip_input) return;
  const int64_t units = network.num_units, width = network.input_size, own = channel.params_input_size(network);
  const int64_t gates = network.num_gates(), blocks = network.num_directions * gates;
  const size_t eb = network.element_bytes();
  std::vector<char*> targets(blocks);  // oneDNN block d * gates + k's rows in dparams (nullptr: held, no gradient)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t gate = SwappedGate(network.mode, b % gates);
    targets[b] = static_cast<char*>(dparams.Block(slots[b / gates].w_input + gate * units * own, units * own));
  }
  ParallelFor(blocks * units, ParallelThreads(), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      char* target = targets[r / units];
      if (target != nullptr) {
        std::memcpy(target + (r % units) * own * eb, static_cast<const char*>(w_layer) + r * width * eb, own * eb);
      }
    }
  });
}

}  // namespace

void GatherWeights(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots,
                   const ParamsView& params, void* w_layer, void* w_iter, void* w_projection) {
  const int64_t units = network.num_units, hidden = network.hidden_size();
  const int64_t input = network.layer_input_size(layer);
  if (w_layer == nullptr) {
  } else if (params.widens(layer)) {
    GatherWidened(network, slots, params, w_layer);
  } else if (network.skip_input && layer == 0) {
    const bool bf16 = network.data_type == dnnl::memory::data_type::bf16;
    const int64_t blocks = network.num_directions * network.num_gates();
    std::memset(w_layer, 0, blocks * units * input * network.element_bytes());
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t i = 0; i < units; ++i) Store(w_layer, bf16, (b * units + i) * input + i, 1.0f);
    }
  } else {
    CopyBlocks(network, layer, slots, InputOffset, units * input, true, params, w_layer, true);
  }
  if (w_iter != nullptr) CopyBlocks(network, layer, slots, RecurrentOffset, units * hidden, true, params, w_iter, true);
  if (w_projection != nullptr) {
    CopyBlocks(network, layer, slots, ProjectionOffset, hidden * units, false, params, w_projection, true);
  }
}

const void* PlainInBuffer(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots,
                          const ParamsView& params, int which) {
  if (network.num_directions != 1) return nullptr;
  const SlotOffsets& slot = slots[layer];
  const int64_t units = network.num_units, gates = network.num_gates();
  // The group's element offset and count where it is one plain tensor in the buffer, else offset -1.
  int64_t offset = -1, count = 0;
  if (which == 0 && network.mode != Mode::kGru && !(network.skip_input && layer == 0) && !params.widens(layer)) {
    offset = slot.w_input;
    count = gates * units * network.layer_input_size(layer);
  } else if (which == 1 && network.mode != Mode::kGru) {
    offset = slot.w_recurrent;
    count = gates * units * network.hidden_size();
  } else if (which == 2 && network.proj_size > 0) {
    offset = slot.w_projection;
    count = network.hidden_size() * units;
  }
  return offset < 0 ? nullptr : params.Whole(offset, count);
}

void ScatterWeights(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, const void* w_layer,
                    const void* w_iter, const void* w_projection, const ParamsView& dparams) {
  const int64_t units = network.num_units, hidden = network.hidden_size();
  // CopyBlocks reads `plain` when writing the params (to_plain false).
  auto from = [](const void* tensor) { return const_cast<void*>(tensor); };
  if (dparams.widens(layer)) {
    ScatterWidened(network, slots, w_layer, dparams);
  } else if (!(network.skip_input && layer == 0)) {
    CopyBlocks(network, layer, slots, InputOffset, units * network.layer_input_size(layer), true, dparams,
               from(w_layer), false);
  }
  CopyBlocks(network, layer, slots, RecurrentOffset, units * hidden, true, dparams, from(w_iter), false);
  if (network.proj_size > 0) {
    CopyBlocks(network, layer, slots, ProjectionOffset, hidden * units, false, dparams, from(w_projection), false);
  }
}

void GatherBias(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, const ParamsView& params,
                float* bias) {
  const bool bf16 = network.data_type == dnnl::memory::data_type::bf16;
  const int64_t units = network.num_units, blocks = network.bias_gates();
  std::memset(bias, 0, network.num_directions * blocks * units * sizeof(float));
  for (int64_t d = 0; d < network.num_directions; ++d) {
    const SlotOffsets& slot = slots[layer * network.num_directions + d];
    float* out = bias + d * blocks * units;
    for (int64_t g = 0; g < network.num_gates(); ++g) {
      // Each gate's input and recurrent bias, where the buffer has them and a piece holds them (else zero).
      const std::pair<int64_t, int64_t> terms[] = {{slot.b_input, SwappedGate(network.mode, g)},
                                                   {slot.b_recurrent, RecurrentBiasBlock(network.mode, g)}};
      for (const auto& [offset, block] : terms) {
        const void* b = offset < 0 ? nullptr : params.Block(offset + g * units, units);
        if (b == nullptr) continue;
        for (int64_t i = 0; i < units; ++i) out[block * units + i] += Load(b, bf16, i);
      }
    }
  }
}

void ScatterBias(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, const float* diff_bias,
                 const ParamsView& dparams) {
  const bool bf16 = network.data_type == dnnl::memory::data_type::bf16;
  const int64_t units = network.num_units, blocks = network.bias_gates();
  for (int64_t d = 0; d < network.num_directions; ++d) {
    const SlotOffsets& slot = slots[layer * network.num_directions + d];
    const float* in = diff_bias + d * blocks * units;
    for (int64_t g = 0; g < network.num_gates(); ++g) {
      const std::pair<int64_t, int64_t> terms[] = {{slot.b_input, SwappedGate(network.mode, g)},
                                                   {slot.b_recurrent, RecurrentBiasBlock(network.mode, g)}};
      for (const auto& [offset, block] : terms) {
        void* b = offset < 0 ? nullptr : dparams.Block(offset + g * units, units);
        if (b == nullptr) continue;  // no such bias, or one held at zero: no gradient
        for (int64_t i = 0; i < units; ++i) Store(b, bf16, i, in[block * units + i]);
      }
    }
  }
}

}  // namespace jax_cudnn_rnn::onednn
