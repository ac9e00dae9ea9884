#include "weights.h"

#include <cmath>
#include <cstring>

namespace jax_cudnn_rnn::onednn {

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

// Copies `count` elements between two element offsets of (possibly different) buffers of the network's type.
void CopyElements(const Network& network, const void* from, int64_t from_offset, void* to, int64_t to_offset,
                  int64_t count) {
  const size_t eb = network.element_bytes();
  std::memcpy(static_cast<char*>(to) + to_offset * eb, static_cast<const char*>(from) + from_offset * eb, count * eb);
}

// The gate blocks of one group of one layer: `group(slot)` is the group's offset in the buffer, `block` the elements
// of one gate. `to_plain` copies buffer -> plain tensor, else plain -> buffer.
template <typename Group>
void CopyGateBlocks(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, Group group,
                    int64_t block, const void* from, void* to, bool to_plain) {
  const int64_t gates = network.num_gates();
  for (int64_t d = 0; d < network.num_directions; ++d) {
    const int64_t buffer_offset = group(slots[layer * network.num_directions + d]);
    for (int64_t k = 0; k < gates; ++k) {
      const int64_t plain = (d * gates + k) * block;
      const int64_t buffer = buffer_offset + SwappedGate(network.mode, k) * block;
      if (to_plain) CopyElements(network, from, buffer, to, plain, block);
      else CopyElements(network, from, plain, to, buffer, block);
    }
  }
}

}  // namespace

void GatherWeights(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, const void* params,
                   void* w_layer, void* w_iter, void* w_projection) {
  const int64_t units = network.num_units, hidden = network.hidden_size();
  const int64_t input = network.layer_input_size(layer);
  if (w_layer == nullptr) {
  } else if (network.skip_input && layer == 0) {
    const bool bf16 = network.data_type == dnnl::memory::data_type::bf16;
    const int64_t blocks = network.num_directions * network.num_gates();
    std::memset(w_layer, 0, blocks * units * input * network.element_bytes());
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t i = 0; i < units; ++i) Store(w_layer, bf16, (b * units + i) * input + i, 1.0f);
    }
  } else {
    CopyGateBlocks(
        network, layer, slots, [](const SlotOffsets& s) { return s.w_input; }, units * input, params, w_layer, true);
  }
  if (w_iter != nullptr) {
    CopyGateBlocks(
        network, layer, slots, [](const SlotOffsets& s) { return s.w_recurrent; }, units * hidden, params, w_iter,
        true);
  }
  if (w_projection != nullptr) {
    for (int64_t d = 0; d < network.num_directions; ++d) {
      CopyElements(network, params, slots[layer * network.num_directions + d].w_projection, w_projection,
                   d * hidden * units, hidden * units);
    }
  }
}

const void* PlainInBuffer(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots,
                          const void* params, int which) {
  if (network.num_directions != 1) return nullptr;
  const SlotOffsets& slot = slots[layer];
  int64_t offset = -1;
  if (which == 0 && network.mode != Mode::kGru && !(network.skip_input && layer == 0)) offset = slot.w_input;
  if (which == 1 && network.mode != Mode::kGru) offset = slot.w_recurrent;
  if (which == 2 && network.proj_size > 0) offset = slot.w_projection;
  if (offset < 0) return nullptr;
  return static_cast<const char*>(params) + offset * network.element_bytes();
}

void ScatterWeights(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, const void* w_layer,
                    const void* w_iter, const void* w_projection, void* dparams) {
  const int64_t units = network.num_units, hidden = network.hidden_size();
  if (!(network.skip_input && layer == 0)) {
    CopyGateBlocks(
        network, layer, slots, [](const SlotOffsets& s) { return s.w_input; }, units * network.layer_input_size(layer),
        w_layer, dparams, false);
  }
  CopyGateBlocks(
      network, layer, slots, [](const SlotOffsets& s) { return s.w_recurrent; }, units * hidden, w_iter, dparams,
      false);
  if (network.proj_size > 0) {
    for (int64_t d = 0; d < network.num_directions; ++d) {
      CopyElements(network, w_projection, d * hidden * units, dparams,
                   slots[layer * network.num_directions + d].w_projection, hidden * units);
    }
  }
}

void GatherBias(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, const void* params,
                float* bias) {
  const bool bf16 = network.data_type == dnnl::memory::data_type::bf16;
  const int64_t units = network.num_units, blocks = network.bias_gates();
  std::memset(bias, 0, network.num_directions * blocks * units * sizeof(float));
  for (int64_t d = 0; d < network.num_directions; ++d) {
    const SlotOffsets& slot = slots[layer * network.num_directions + d];
    float* out = bias + d * blocks * units;
    for (int64_t g = 0; g < network.num_gates(); ++g) {
      for (int64_t i = 0; i < units; ++i) {
        if (slot.b_input >= 0)
          out[SwappedGate(network.mode, g) * units + i] += Load(params, bf16, slot.b_input + g * units + i);
        if (slot.b_recurrent >= 0)
          out[RecurrentBiasBlock(network.mode, g) * units + i] += Load(params, bf16, slot.b_recurrent + g * units + i);
      }
    }
  }
}

void ScatterBias(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, const float* diff_bias,
                 void* dparams) {
  const bool bf16 = network.data_type == dnnl::memory::data_type::bf16;
  const int64_t units = network.num_units, blocks = network.bias_gates();
  for (int64_t d = 0; d < network.num_directions; ++d) {
    const SlotOffsets& slot = slots[layer * network.num_directions + d];
    const float* in = diff_bias + d * blocks * units;
    for (int64_t g = 0; g < network.num_gates(); ++g) {
      for (int64_t i = 0; i < units; ++i) {
        if (slot.b_input >= 0) {
          Store(dparams, bf16, slot.b_input + g * units + i, in[SwappedGate(network.mode, g) * units + i]);
        }
        if (slot.b_recurrent >= 0) {
          Store(dparams, bf16, slot.b_recurrent + g * units + i, in[RecurrentBiasBlock(network.mode, g) * units + i]);
        }
      }
    }
  }
}

}  // namespace jax_cudnn_rnn::onednn
