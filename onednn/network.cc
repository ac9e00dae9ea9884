#include "network.h"

#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>

namespace jax_cudnn_rnn::onednn {

namespace ffi = ::xla::ffi;

namespace {

// Every field of a network, to compare and hash.
auto Fields(const Network& network) {
  return std::tuple_cat(network.fields(), std::tie(network.data_type, network.max_time, network.batch, network.training,
                                                   network.plain_backward_weights));
}

}  // namespace

bool Network::operator==(const Network& other) const { return Fields(*this) == Fields(other); }

size_t NetworkHash::operator()(const Network& network) const {
  size_t seed = 0;
  std::apply(
      [&seed](const auto&... value) {
        ((seed ^=
          std::hash<std::decay_t<decltype(value)>>{}(value) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2)),
         ...);
      },
      Fields(network));
  return seed;
}

std::string Network::ToString() const {
  static const char* kModes[] = {"lstm", "gru", "rnn_tanh", "rnn_relu"};
  std::ostringstream out;
  out << kModes[static_cast<int>(mode)] << " num_layers=" << num_layers << " num_units=" << num_units
      << " input_size=" << input_size << " proj_size=" << proj_size << " directions=" << num_directions
      << " skip_input=" << skip_input << " bias_mode=" << static_cast<int>(bias_mode) << " cell_clip=" << cell_clip
      << " dtype=" << (data_type == dnnl::memory::data_type::bf16 ? "bf16" : "f32") << " T=" << max_time
      << " B=" << batch << (training ? " training" : " inference")
      << (plain_backward_weights ? " plain_backward_weights" : "");
  return out.str();
}

ffi::Error DecodeNetwork(const RnnConfig& config, ffi::DataType dtype, int64_t max_time, int64_t batch, bool training,
                         bool plain_backward_weights, Network* network) {
  Network result;
  static_cast<RnnConfig&>(result) = config;
  if (dtype == ffi::DataType::F32) result.data_type = dnnl::memory::data_type::f32;
  else if (dtype == ffi::DataType::BF16) result.data_type = dnnl::memory::data_type::bf16;
  else return ffi::Error::InvalidArgument("the oneDNN RNN runs float32 and bfloat16 only");
  if (config.cell_clip > 0) {
    return ffi::Error::InvalidArgument("cell_clip is " + std::to_string(config.cell_clip) +
                                       "; oneDNN's LSTM has no cell clipping");
  }
  if (max_time < 1 || batch < 1) {
    return ffi::Error::InvalidArgument("max_time is " + std::to_string(max_time) + " and batch " +
                                       std::to_string(batch) + "; expected both >= 1");
  }
  result.max_time = max_time;
  result.batch = batch;
  result.training = training;
  result.plain_backward_weights = training && plain_backward_weights;
  *network = result;
  return ffi::Error::Success();
}

ffi::Error DecodeInputChannel(const Network& network, int64_t columns, ffi::Span<const float> weights, bool skip_input,
                              InputChannel* channel) {
  if (columns == 0 && weights.size() == 0 && !skip_input) {
    *channel = InputChannel{};
    return ffi::Error::Success();
  }
  const int64_t own = network.input_size - columns;
  std::string problem;
  if (columns < 1 || own < 1) {
    problem = "channel_columns is " + std::to_string(columns) + "; expected 0 (no channel) or 1 to " +
              std::to_string(network.input_size - 1) + " (fewer than the network's " +
              std::to_string(network.input_size) + " inputs)";
  } else if (static_cast<int64_t>(weights.size()) != network.num_gates()) {
    problem = "channel_weights has " + std::to_string(weights.size()) + " entries; expected one per gate (" +
              std::to_string(network.num_gates()) + ")";
  } else if (network.skip_input) {
    problem = "the network's input_mode is skip_input; a channel widens a linear_input network";
  } else if (skip_input && own != network.num_units) {
    problem = "channel_skip_input needs the params' input width (" + std::to_string(own) + ") to be num_units (" +
              std::to_string(network.num_units) + ")";
  }
  if (!problem.empty()) return ffi::Error::InvalidArgument(problem);
  *channel = InputChannel{columns, std::vector<float>(weights.begin(), weights.end()), skip_input};
  return ffi::Error::Success();
}

ffi::Error DecodeSlotOffsets(const Network& network, const InputChannel& channel, ffi::Span<const int64_t> offsets,
                             size_t params_elements, std::vector<SlotOffsets>* slots) {
  const int64_t pseudo_layers = network.num_layers * network.num_directions;
  if (static_cast<int64_t>(offsets.size()) != pseudo_layers * kOffsetsPerPseudoLayer) {
    return ffi::Error::InvalidArgument("slot_offsets has " + std::to_string(offsets.size()) + " entries; expected " +
                                       std::to_string(pseudo_layers * kOffsetsPerPseudoLayer));
  }
  const int64_t gates = network.num_gates(), units = network.num_units, hidden = network.hidden_size();
  const auto limit = static_cast<int64_t>(params_elements);
  slots->clear();
  for (int64_t p = 0; p < pseudo_layers; ++p) {
    const int64_t* o = offsets.begin() + p * kOffsetsPerPseudoLayer;
    SlotOffsets slot{o[0], o[1], o[2], o[3], o[4]};
    const int64_t layer = p / network.num_directions;
    const bool skip = (network.skip_input || channel.skip_input) && layer == 0;
    const int64_t input = layer == 0 ? channel.params_input_size(network) : network.layer_input_size(layer);
    const int64_t sizes[] = {gates * units * input, gates * units * hidden, network.proj_size * units, gates * units,
                             gates * units};
    const int64_t values[] = {slot.w_input, slot.w_recurrent, slot.w_projection, slot.b_input, slot.b_recurrent};
    const bool required[] = {!skip, true, network.proj_size > 0, network.has_input_bias(),
                             network.has_recurrent_bias()};
    for (int i = 0; i < 5; ++i) {
      if (values[i] < 0 ? required[i] : values[i] + sizes[i] > limit) {
        return ffi::Error::InvalidArgument("slot_offsets of pseudo-layer " + std::to_string(p) + " entry " +
                                           std::to_string(i) + " is " + std::to_string(values[i]) + ", outside the " +
                                           std::to_string(limit) + "-element params buffer");
      }
    }
    slots->push_back(slot);
  }
  return ffi::Error::Success();
}

}  // namespace jax_cudnn_rnn::onednn
