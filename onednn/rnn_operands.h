// The attributes and operands of the three RNN primitive handlers (rnn_kernels.h), decoded and checked in one place
// before any of them reads a byte: the network from the attributes, each operand's dtype and exact shape against it,
// the params' pieces against the buffer they are pieces of. A disagreement is an ffi::Error naming the operand, what
// was expected and what came, never a read of memory nobody wrote.
#ifndef JAX_CUDNN_RNN_ONEDNN_RNN_OPERANDS_H_
#define JAX_CUDNN_RNN_ONEDNN_RNN_OPERANDS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "network.h"
#include "rnn_config.h"
#include "weights.h"
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

// Every handler's attributes (jax_cudnn_rnn/backends/onednn/kernels.py): the network, where its tensors are in the
// buffer, whether the call trains (always true for the backward) and the backward's weights layout (Network).
struct CallAttrs {
  RnnConfigAttrs config;
  xla::ffi::Span<const int64_t> slot_offsets;
  bool training;
  bool plain_backward_weights;
};
// The params' pieces: where each starts in the buffer, and the buffer's elements; the input channel (InputChannel).
struct PiecesAttrs {
  xla::ffi::Span<const int64_t> piece_offsets;
  int64_t params_elements;
  int64_t channel_columns;
  xla::ffi::Span<const float> channel_weights;
  bool channel_skip_input;
};
// The weights handler's: the call's, the dtype and shape of the forward it prepares for (its primitive's formats; the
// params must be of that dtype), the pieces.
struct WeightsAttrs {
  CallAttrs call;
  std::string_view dtype;
  int64_t max_time, batch;
  PiecesAttrs pieces;
};
// The backward's: the call's and the pieces.
struct BackwardAttrs {
  CallAttrs call;
  PiecesAttrs pieces;
};

// The network of a call of element type `dtype` and shape (max_time, batch) from its attributes.
xla::ffi::Error DecodeAttrs(const CallAttrs& attrs, xla::ffi::DataType dtype, int64_t max_time, int64_t batch,
                            Network* network);

// The network of a call from its attributes and x [T, B, input_size] (x's dtype is the network's).
xla::ffi::Error DecodeCall(const xla::ffi::AnyBuffer& x, const CallAttrs& attrs, Network* network);

// The buffers `remaining` (ffi::RemainingArgs or ffi::RemainingRets) holds from `first` on.
template <typename Remaining>
std::vector<xla::ffi::AnyBuffer> BuffersFrom(const Remaining& remaining, size_t first) {
  std::vector<xla::ffi::AnyBuffer> buffers;
  for (size_t i = first; i < remaining.size(); ++i) {
    auto buffer = remaining.template get<xla::ffi::AnyBuffer>(i);
    if constexpr (std::is_same_v<Remaining, xla::ffi::RemainingArgs>) buffers.push_back(*buffer);
    else buffers.push_back(**buffer);
  }
  return buffers;
}

// The params' pieces (`what`: "params" or "dparams"), each of the network's dtype and within the buffer
// `attrs.params_elements` long, as a view with the input channel, and the slot offsets checked against the buffer:
// what the handlers that read or write the params start with.
xla::ffi::Error DecodeParams(const std::vector<xla::ffi::AnyBuffer>& buffers, const char* what, const CallAttrs& call,
                             const PiecesAttrs& attrs, const Network& network, std::optional<ParamsView>* params,
                             std::vector<SlotOffsets>* slots);

}  // namespace jax_cudnn_rnn::onednn

#define JCR_ONEDNN_CALL_ATTRS                                                                      \
  JCR_RNN_CONFIG_ATTRS, ::xla::ffi::StructMember<::xla::ffi::Span<const int64_t>>("slot_offsets"), \
      ::xla::ffi::StructMember<bool>("training"), ::xla::ffi::StructMember<bool>("plain_backward_weights")
#define JCR_ONEDNN_PIECES_ATTRS                                                                                   \
  ::xla::ffi::StructMember<::xla::ffi::Span<const int64_t>>("piece_offsets"),                                     \
      ::xla::ffi::StructMember<int64_t>("params_elements"), ::xla::ffi::StructMember<int64_t>("channel_columns"), \
      ::xla::ffi::StructMember<::xla::ffi::Span<const float>>("channel_weights"),                                 \
      ::xla::ffi::StructMember<bool>("channel_skip_input")

#endif  // JAX_CUDNN_RNN_ONEDNN_RNN_OPERANDS_H_
