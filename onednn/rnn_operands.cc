#include "rnn_operands.h"

#include <string>
#include <utility>

#include "ffi_args.h"

namespace jax_cudnn_rnn::onednn {

namespace ffi = ::xla::ffi;

ffi::Error DecodeAttrs(const CallAttrs& attrs, ffi::DataType dtype, int64_t max_time, int64_t batch, Network* network) {
  RnnConfig config;
  JCR_RETURN_IF_ERROR(DecodeRnnConfig(attrs.config, &config));
  return DecodeNetwork(config, dtype, max_time, batch, attrs.training, attrs.plain_backward_weights, network);
}

ffi::Error DecodeCall(const ffi::AnyBuffer& x, const CallAttrs& attrs, Network* network) {
  auto x_dims = x.dimensions();
  if (x_dims.size() != 3) {
    return ffi::Error::InvalidArgument("x has shape " + ShapeString(x_dims) + "; expected rank 3");
  }
  JCR_RETURN_IF_ERROR(DecodeAttrs(attrs, x.element_type(), x_dims[0], x_dims[1], network));
  return CheckBuffer("x", x, x.element_type(), {network->max_time, network->batch, network->input_size});
}

ffi::Error DecodeParams(const std::vector<ffi::AnyBuffer>& buffers, const char* what, const CallAttrs& call,
                        const PiecesAttrs& attrs, const Network& network, std::optional<ParamsView>* params,
                        std::vector<SlotOffsets>* slots) {
  if (buffers.size() != attrs.piece_offsets.size()) {
    return ffi::Error::InvalidArgument("got " + std::to_string(buffers.size()) + " " + what +
                                       " pieces; piece_offsets has " + std::to_string(attrs.piece_offsets.size()));
  }
  const ffi::DataType dtype =
      network.data_type == dnnl::memory::data_type::bf16 ? ffi::DataType::BF16 : ffi::DataType::F32;
  std::vector<ParamsView::Piece> pieces;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const ffi::AnyBuffer& piece = buffers[i];
    const std::string name = std::string(what) + " piece " + std::to_string(i);
    if (piece.element_type() != dtype) {
      return ffi::Error::InvalidArgument(name + " has dtype " + DataTypeName(piece.element_type()) +
                                         "; expected the network's, " + DataTypeName(dtype));
    }
    const auto elements = static_cast<int64_t>(piece.element_count());
    const int64_t offset = attrs.piece_offsets[i];
    if (offset < 0 || offset + elements > attrs.params_elements) {
      return ffi::Error::InvalidArgument(name + " (" + std::to_string(elements) + " elements at " +
                                         std::to_string(offset) + ") lies outside the " +
                                         std::to_string(attrs.params_elements) + "-element buffer");
    }
    pieces.push_back({offset, elements, piece.untyped_data()});
  }
  if (buffers.size() == 1 && attrs.piece_offsets[0] == 0 &&
      static_cast<int64_t>(buffers[0].element_count()) != attrs.params_elements) {
    // The opaque buffer itself: a shorter one would leave its last tensors to read as zero (as a held slot reads).
    return ffi::Error::InvalidArgument(std::string(what) + " has " + std::to_string(buffers[0].element_count()) +
                                       " elements; expected the network's buffer of " +
                                       std::to_string(attrs.params_elements));
  }
  InputChannel channel;
  JCR_RETURN_IF_ERROR(
      DecodeInputChannel(network, attrs.channel_columns, attrs.channel_weights, attrs.channel_skip_input, &channel));
  params->emplace(std::move(pieces), network.element_bytes(), std::move(channel));
  return DecodeSlotOffsets(network, (*params)->channel(), call.slot_offsets, attrs.params_elements, slots);
}

}  // namespace jax_cudnn_rnn::onednn
