#include "network.h"

#include <sstream>
#include <string>

namespace jax_cudnn_rnn::onednn {

namespace ffi = ::xla::ffi;

bool Network::operator==(const Network& other) const {
  return cell == other.cell && num_layers == other.num_layers && num_units == other.num_units &&
         input_size == other.input_size && proj_size == other.proj_size &&
         num_directions == other.num_directions && skip_input == other.skip_input &&
         data_type == other.data_type && max_time == other.max_time && batch == other.batch &&
         training == other.training;
}

size_t NetworkHash::operator()(const Network& network) const {
  size_t seed = 0;
  auto mix = [&seed](int64_t value) {
    seed ^= std::hash<int64_t>{}(value) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
  };
  for (int64_t value : {static_cast<int64_t>(network.cell), network.num_layers, network.num_units,
                        network.input_size, network.proj_size, network.num_directions,
                        static_cast<int64_t>(network.skip_input), static_cast<int64_t>(network.data_type),
                        network.max_time, network.batch, static_cast<int64_t>(network.training)}) {
    mix(value);
  }
  return seed;
}

std::string Network::ToString() const {
  static const char* kCells[] = {"lstm", "gru", "rnn_tanh", "rnn_relu"};
  std::ostringstream out;
  out << kCells[static_cast<int>(cell)] << " num_layers=" << num_layers << " num_units=" << num_units
      << " input_size=" << input_size << " proj_size=" << proj_size << " directions=" << num_directions
      << " skip_input=" << skip_input << " dtype=" << (data_type == dnnl::memory::data_type::bf16 ? "bf16" : "f32")
      << " T=" << max_time << " B=" << batch << (training ? " training" : " inference");
  return out.str();
}

ffi::Error DecodeNetwork(std::string_view mode, int64_t num_layers, int64_t num_units, int64_t input_size,
                         int64_t proj_size, std::string_view direction, bool skip_input, ffi::DataType dtype,
                         int64_t max_time, int64_t batch, bool training, Network* network) {
  Network result;
  if (mode == "lstm") result.cell = Cell::kLstm;
  else if (mode == "gru") result.cell = Cell::kGru;
  else if (mode == "rnn_tanh") result.cell = Cell::kRnnTanh;
  else if (mode == "rnn_relu") result.cell = Cell::kRnnRelu;
  else return ffi::Error::InvalidArgument("mode is '" + std::string(mode) +
                                          "'; expected lstm, gru, rnn_tanh or rnn_relu");
  if (direction == "unidirectional") result.num_directions = 1;
  else if (direction == "bidirectional") result.num_directions = 2;
  else return ffi::Error::InvalidArgument("direction is '" + std::string(direction) +
                                          "'; expected unidirectional or bidirectional");
  if (dtype == ffi::DataType::F32) result.data_type = dnnl::memory::data_type::f32;
  else if (dtype == ffi::DataType::BF16) result.data_type = dnnl::memory::data_type::bf16;
  else return ffi::Error::InvalidArgument("the oneDNN RNN runs float32 and bfloat16 only");
  if (num_layers < 1 || num_units < 1 || input_size < 1 || max_time < 1 || batch < 1) {
    return ffi::Error::InvalidArgument("num_layers, num_units, input_size, max_time and batch must be >= 1");
  }
  if (proj_size < 0 || proj_size >= num_units || (proj_size > 0 && result.cell != Cell::kLstm)) {
    return ffi::Error::InvalidArgument("proj_size must be 0, or in [1, num_units) for an LSTM");
  }
  if (skip_input && input_size != num_units) {
    return ffi::Error::InvalidArgument("skip_input needs input_size == num_units");
  }
  result.num_layers = num_layers;
  result.num_units = num_units;
  result.input_size = input_size;
  result.proj_size = proj_size;
  result.skip_input = skip_input;
  result.max_time = max_time;
  result.batch = batch;
  result.training = training;
  *network = result;
  return ffi::Error::Success();
}

ffi::Error DecodeSlotOffsets(const Network& network, ffi::Span<const int64_t> offsets, size_t params_elements,
                             std::vector<SlotOffsets>* slots) {
  const int64_t pseudo_layers = network.num_layers * network.num_directions;
  if (static_cast<int64_t>(offsets.size()) != pseudo_layers * kOffsetsPerPseudoLayer) {
    return ffi::Error::InvalidArgument("slot_offsets has " + std::to_string(offsets.size()) + " entries; expected " +
                                       std::to_string(pseudo_layers * kOffsetsPerPseudoLayer));
  }
  const int64_t gates = network.gates(), units = network.num_units, hidden = network.hidden_size();
  const auto limit = static_cast<int64_t>(params_elements);
  slots->clear();
  for (int64_t p = 0; p < pseudo_layers; ++p) {
    const int64_t* o = offsets.begin() + p * kOffsetsPerPseudoLayer;
    SlotOffsets slot{o[0], o[1], o[2], o[3], o[4]};
    const int64_t layer = p / network.num_directions;
    const bool skip = network.skip_input && layer == 0;
    const int64_t sizes[] = {gates * units * network.layer_input_size(layer), gates * units * hidden,
                             network.proj_size * units, gates * units, gates * units};
    const int64_t values[] = {slot.w_input, slot.w_recurrent, slot.w_projection, slot.b_input, slot.b_recurrent};
    const bool required[] = {!skip, true, network.proj_size > 0, false, false};
    for (int i = 0; i < 5; ++i) {
      if (values[i] < 0 ? required[i] : values[i] + sizes[i] > limit) {
        return ffi::Error::InvalidArgument("slot_offsets of pseudo-layer " + std::to_string(p) + " entry " +
                                           std::to_string(i) + " is " + std::to_string(values[i]) +
                                           ", outside the " + std::to_string(limit) + "-element params buffer");
      }
    }
    slots->push_back(slot);
  }
  return ffi::Error::Success();
}

}  // namespace jax_cudnn_rnn::onednn
