// Between the opaque buffer (cuDNN's weight space: per pseudo-layer, gate blocks in cuDNN's order, an input and a
// recurrent bias) and oneDNN's plain per-layer tensors:
// - gate order: LSTM's and the vanilla RNN's are the same as cuDNN's; lbr_gru's is (update, reset, new), cuDNN's is
//   (reset, update, new), so the first two blocks swap;
// - bias: oneDNN takes one bias per gate, the sum of the input and recurrent biases, except lbr_gru's new gate,
//   whose recurrent bias stays apart (multiplied by the reset gate) as a fourth block. The gradient of a summed bias
//   is the gradient of each of its terms, so it is written to both;
// - skip input: oneDNN always multiplies the input by a matrix, so layer 0 gets identity matrices and their
//   gradient is dropped;
// - an input channel (InputChannel): the network's layer-0 input has more columns than the params' input matrices,
//   whose weights are constants written here (zeros, then the channel's per-gate weight in the last column) and take
//   no gradient, so that a caller need not build a widened copy of the buffer at every call.
#ifndef JAX_CUDNN_RNN_ONEDNN_WEIGHTS_H_
#define JAX_CUDNN_RNN_ONEDNN_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "network.h"

namespace jax_cudnn_rnn::onednn {

// The opaque buffer as the handlers read it and write its gradient: one array, or pieces of it as arrays of their own
// (the canonical tensors a frontend trains, passed as they are so that no copy packs them into a buffer first). A
// piece holds `count` elements from element `offset` of the buffer; what no piece holds reads as zero and takes no
// gradient (a frontend's held slots).
class ParamsView {
 public:
  struct Piece {
    int64_t offset, count;
    void* data;
  };
  // `pieces` must not overlap (std::invalid_argument); `element_bytes`: the network's element size; `channel`: the
  // columns of layer 0's input that the params hold no weights for (DecodeInputChannel checks it).
  ParamsView(std::vector<Piece> pieces, size_t element_bytes, InputChannel channel = {});
  // Elements [offset, offset + count): their data where one piece holds them all, nullptr where no piece holds any;
  // std::invalid_argument where a piece holds part of them (a piece that is not one of the network's tensors).
  void* Block(int64_t offset, int64_t count) const;
  // The same, but nullptr wherever one piece does not hold them all.
  void* Whole(int64_t offset, int64_t count) const;
  const InputChannel& channel() const { return channel_; }
  // Whether layer `layer`'s input matrices are wider than the params' (layer 0 with an input channel).
  bool widens(int64_t layer) const { return layer == 0 && channel_.columns > 0; }

 private:
  std::vector<Piece> pieces_;  // by offset
  size_t element_bytes_;
  InputChannel channel_;
};

// Layer `layer`'s matrices (both directions) from `params` into the plain tensors: `w_layer` and `w_iter` ldgoi in
// oneDNN's gate order, `w_projection` ldoi; elements of the network's data type; layer 0's input channel's columns
// (the view's InputChannel) as their constants. A nullptr tensor is skipped (no
// projection, or one the caller reads in place: PlainInBuffer).
void GatherWeights(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots,
                   const ParamsView& params, void* w_layer, void* w_iter, void* w_projection);

// Where layer `layer`'s plain tensor `which` (0: w_layer, 1: w_iter, 2: w_projection) lies in `params` as it is, or
// nullptr where it must be gathered: one direction whose gates keep cuDNN's order (not lbr_gru's) and a real input
// matrix (not skip input's identity, nor widened by an input channel) make it one contiguous slice of the buffer.
const void* PlainInBuffer(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots,
                          const ParamsView& params, int which);

// Layer `layer`'s oneDNN bias [D, bias_gates, num_units] in float32; absent biases count as zero.
void GatherBias(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, const ParamsView& params,
                float* bias);

// The inverse of GatherWeights for gradients: plain tensors (network's data type) into `dparams`; an input channel's
// columns (dparams.channel()) are constants and give nothing.
void ScatterWeights(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, const void* w_layer,
                    const void* w_iter, const void* w_projection, const ParamsView& dparams);

// The bias gradient [D, bias_gates, num_units] (float32) into the input and recurrent bias gradients of `dparams`.
void ScatterBias(const Network& network, int64_t layer, const std::vector<SlotOffsets>& slots, const float* diff_bias,
                 const ParamsView& dparams);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_WEIGHTS_H_
