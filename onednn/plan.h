// A call's plan: oneDNN's primitives for every layer of one network and shape, the reorders between the opaque
// buffer's plain weight layout and the formats the primitives chose, and where every temporary lives inside the
// XLA-provided buffers (reserve space: what the backward pass needs from the training forward; scratch: the rest).
// Plans are built once per network and shape and cached; a plan is immutable and shared by concurrent calls, each of
// which passes its own scratch (oneDNN's scratchpad_mode::user), so primitives never keep per-thread state.
#ifndef JAX_CUDNN_RNN_ONEDNN_PLAN_H_
#define JAX_CUDNN_RNN_ONEDNN_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "network.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace jax_cudnn_rnn::onednn {

// The process-wide CPU engine.
const dnnl::engine& Engine();

// A byte range of the reserve or scratch buffer.
struct Region {
  size_t offset = 0, bytes = 0;
  char* in(void* base) const { return static_cast<char*>(base) + offset; }
};

// Hands out 64-byte aligned regions one after another.
class RegionAllocator {
 public:
  Region Add(size_t bytes);
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

// A reorder from one memory descriptor to another, or nothing where they are equal (the source is used as is).
struct Reorder {
  dnnl::reorder primitive;
  dnnl::memory::desc src, dst;
  bool needed = false;
  size_t scratchpad_bytes = 0;

  static Reorder Make(const dnnl::memory::desc& src, const dnnl::memory::desc& dst);
  void Run(const dnnl::stream& stream, void* src_data, void* dst_data, void* scratchpad) const;
};

// The weights of one layer (both directions) in some format: input matrices, recurrent matrices, projection.
struct WeightDescs {
  dnnl::memory::desc layer, iter, projection;
};
struct WeightRegions {
  Region layer, iter, projection;
};

// One layer's primitives (layers with the same input size share one).
struct LayerPlan {
  int64_t input_size = 0;
  dnnl::memory::desc src_layer, src_iter, src_iter_c, dst_layer, dst_iter, dst_iter_c, bias, workspace;
  WeightDescs plain;  // the opaque buffer's order: ldgoi (gates in oneDNN's order), projection ldoi
  dnnl::primitive forward;
  WeightDescs forward_weights;
  Reorder to_forward[3];
  size_t forward_scratchpad_bytes = 0;
  // Training only.
  dnnl::primitive backward;
  dnnl::memory::desc diff_src_layer, diff_src_iter, diff_src_iter_c, diff_dst_layer, diff_dst_iter, diff_dst_iter_c,
      diff_bias;
  WeightDescs backward_weights, diff_weights;
  Reorder to_backward[3], from_diff[3];
  size_t backward_scratchpad_bytes = 0;
};

// A whole call: layer plans, the reserve layout, and the forward's and backward's scratch layouts.
struct CallPlan {
  Network network;
  std::vector<std::shared_ptr<const LayerPlan>> layers;  // one per layer

  // Reserve space (training): per layer, oneDNN's workspace and (all but the last layer) the layer's output.
  std::vector<Region> workspace, layer_output;
  size_t reserve_bytes = 0;

  // The weights buffer (what the weights handler writes and the forward reads): per layer, the weights in the
  // forward primitive's formats and the summed bias.
  struct Weights {
    std::vector<WeightRegions> layers;
    std::vector<Region> bias;
    size_t bytes = 0;
  } weights;

  // The weights handler's scratch: the weights gathered from the opaque buffer (plain layout), the reorders'
  // scratchpad.
  struct Preparation {
    Region scratchpad;
    WeightRegions plain;
    size_t bytes = 0;
  } preparation;

  // Forward scratch.
  struct Forward {
    Region scratchpad, outputs[2];  // outputs: inference's intermediate layer outputs, alternating
    size_t bytes = 0;
  } forward;

  // Backward scratch. float32 copies of the bfloat16 tensors (oneDNN's bf16 backward takes float32 gradients).
  struct Backward {
    Region scratchpad, bias, diff_bias, diff_outputs[2], dy, dx, dh_n, dc_n, dh0, dc0;
    WeightRegions plain, weights, diff_weights;
    size_t bytes = 0;
  } backward;
  Reorder dy_to_f32, dh_n_to_f32, dc_n_to_f32, dx_from_f32, dh0_from_f32, dc0_from_f32;  // bf16 only
};

// The plan for `network`, built on first use and cached (thread-safe; least recently used plans are evicted).
// Throws dnnl::error or std::invalid_argument when oneDNN cannot run the network.
std::shared_ptr<const CallPlan> GetPlan(const Network& network);

// Number of plans in the cache, and its capacity.
size_t CachedPlanCount();
constexpr size_t kPlanCacheCapacity = 64;

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_PLAN_H_
