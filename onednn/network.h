// One oneDNN RNN call's network and shape, decoded from the FFI attributes that jax_cudnn_rnn/backends/onednn/ passes,
// and where each layer's weights and biases live in the opaque buffer (offsets computed by jax_cudnn_rnn/layout.py, the
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
#include "rnn_config.h"
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

// Everything the primitives depend on: the network (common/rnn_config.h) and the call's shape; the key of the plan
// cache.
struct Network : RnnConfig {
  dnnl::memory::data_type data_type = dnnl::memory::data_type::f32;
  int64_t max_time = 0, batch = 0;
  bool training = false;
  // Whether the backward reads the weights in the plain ldgoi layout rather than the one its primitive picks (plan.cc
  // says when that is faster; the CPU chooser's table says where).
  bool plain_backward_weights = false;

  // Blocks of oneDNN's bias: lbr_gru keeps the new gate's recurrent bias apart.
  int64_t bias_gates() const { return mode == Mode::kLstm || mode == Mode::kGru ? 4 : 1; }
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

// Layer 0's input columns past the params' own (jax_cudnn_rnn/backends/fused/lengths.py: the padding channel of a
// one-layer, one-direction network): `columns` of them, the last with input weight `weights[g]` in cuDNN gate g's
// rows, the others zero; `skip_input`: the params' own columns are skip input's (identity matrices, none stored).
// No columns: the params' input matrices are the network's.
struct InputChannel {
  int64_t columns = 0;
  std::vector<float> weights;
  bool skip_input = false;
  // The params' layer-0 input width: the network's less the channel's columns.
  int64_t params_input_size(const Network& network) const { return network.input_size - columns; }
};

// The input channel from its attributes (columns, weights, skip_input: see InputChannel), checked against the
// network: no columns and nothing else, or fewer columns than the network's input, one weight per gate, and skip input
// only where the params' input width is num_units and the network's layer 0 is not itself skip input.
xla::ffi::Error DecodeInputChannel(const Network& network, int64_t columns, xla::ffi::Span<const float> weights,
                                   bool skip_input, InputChannel* channel);

// The network of a call of `config` on buffers of XLA element type `dtype`, checked for what oneDNN can run.
xla::ffi::Error DecodeNetwork(const RnnConfig& config, xla::ffi::DataType dtype, int64_t max_time, int64_t batch,
                              bool training, bool plain_backward_weights, Network* network);

// Checks the slot offsets against the network (the params' layer-0 input matrices are the network's less `channel`'s
// columns) and the buffer's element count; fills one entry per pseudo-layer.
xla::ffi::Error DecodeSlotOffsets(const Network& network, const InputChannel& channel,
                                  xla::ffi::Span<const int64_t> offsets, size_t params_elements,
                                  std::vector<SlotOffsets>* slots);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_NETWORK_H_
