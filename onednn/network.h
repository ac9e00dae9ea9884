// One oneDNN RNN call's network and shape, decoded from the FFI attributes that jax_cudnn_rnn/onednn.py passes, and
// where each layer's weights and biases live in the opaque buffer (offsets computed by jax_cudnn_rnn/layout.py, the
// one module that knows the layout).
#ifndef JAX_CUDNN_RNN_ONEDNN_NETWORK_H_
#define JAX_CUDNN_RNN_ONEDNN_NETWORK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

enum class Cell { kLstm, kGru, kRnnTanh, kRnnRelu };

// Everything the primitives depend on: the key of the plan cache.
struct Network {
  Cell cell = Cell::kLstm;
  int64_t num_layers = 0, num_units = 0, input_size = 0, proj_size = 0, num_directions = 1;
  bool skip_input = false;
  dnnl::memory::data_type data_type = dnnl::memory::data_type::f32;
  int64_t max_time = 0, batch = 0;
  bool training = false;

  // Gate blocks of the weight matrices (G) and of oneDNN's bias: lbr_gru keeps the new gate's recurrent bias apart.
  int64_t gates() const { return cell == Cell::kLstm ? 4 : cell == Cell::kGru ? 3 : 1; }
  int64_t bias_gates() const { return cell == Cell::kLstm || cell == Cell::kGru ? 4 : 1; }
  int64_t hidden_size() const { return proj_size > 0 ? proj_size : num_units; }
  int64_t output_size() const { return num_directions * hidden_size(); }
  int64_t layer_input_size(int64_t layer) const { return layer == 0 ? input_size : output_size(); }
  bool has_cell_state() const { return cell == Cell::kLstm; }
  size_t element_bytes() const { return data_type == dnnl::memory::data_type::bf16 ? 2 : 4; }

  bool operator==(const Network& other) const;
  std::string ToString() const;
};

struct NetworkHash {
  size_t operator()(const Network& network) const;
};

// Where one pseudo-layer's (layer * D + direction) groups start in the opaque buffer, in elements; -1 where absent
// (skip input's layer-0 input matrices, the projection of an unprojected LSTM, the biases bias_mode drops). Gates of
// one group are consecutive blocks, in cuDNN's (canonical) gate order.
struct SlotOffsets {
  int64_t w_input, w_recurrent, w_projection, b_input, b_recurrent;
};
constexpr int64_t kOffsetsPerPseudoLayer = 5;

// The FFI attributes shared by both handlers (jax_cudnn_rnn/onednn.py `_attributes`), decoded and checked.
xla::ffi::Error DecodeNetwork(std::string_view mode, int64_t num_layers, int64_t num_units, int64_t input_size,
                              int64_t proj_size, std::string_view direction, bool skip_input,
                              xla::ffi::DataType dtype, int64_t max_time, int64_t batch, bool training,
                              Network* network);

// Checks the slot offsets against the network and the buffer's element count; fills one entry per pseudo-layer.
xla::ffi::Error DecodeSlotOffsets(const Network& network, xla::ffi::Span<const int64_t> offsets,
                                  size_t params_elements, std::vector<SlotOffsets>* slots);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_NETWORK_H_
