#include "plan.h"

#include <algorithm>
#include <list>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace jax_cudnn_rnn::onednn {

namespace {

using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

constexpr size_t kRegionAlignment = 64;

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  // oneDNN's default (library) scratchpad is per thread and ties a primitive to the threads that ran it; the user
  // mode takes the scratchpad from each call's XLA-provided scratch, so one primitive serves every thread at once.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

memory::desc ArgDesc(const dnnl::primitive_desc& pd, int arg) { return pd.query_md(dnnl::query::exec_arg_md, arg); }

// The weights of one layer in `data` type with the layouts `layer_and_iter` and `projection` (tag::any lets the
// primitive choose).
WeightDescs LayerWeights(const Network& network, int64_t input_size, dt data, tag layer_and_iter, tag projection) {
  const memory::dim directions = network.num_directions, gates = network.num_gates(), units = network.num_units;
  const memory::dim hidden = network.hidden_size();
  return {memory::desc({1, directions, input_size, gates, units}, data, layer_and_iter),
          memory::desc({1, directions, hidden, gates, units}, data, layer_and_iter),
          network.proj_size > 0 ? memory::desc({1, directions, units, hidden}, data, projection) : memory::desc()};
}

// The forward primitive descriptor of `prop` with weights `weights` (and, for training, the backward one that uses it
// as a hint, with weights `backward_weights`) for one layer. Each cell kind has its own C++ types, so both are built
// in the same branch.
void MakePrimitiveDescs(const Network& network, const LayerPlan& layer, dnnl::prop_kind prop,
                        const WeightDescs& weights, const WeightDescs& backward_weights, dnnl::primitive_desc* forward,
                        dnnl::primitive_desc* backward) {
  const auto& engine = Engine();
  const auto direction = network.num_directions == 2 ? dnnl::rnn_direction::bidirectional_concat
                                                     : dnnl::rnn_direction::unidirectional_left2right;
  const WeightDescs diff = LayerWeights(network, layer.input_size, dt::f32, tag::any, tag::any);
  const dnnl::primitive_attr attr = UserScratchpad();
  const bool training = prop == dnnl::prop_kind::forward_training;

  switch (network.mode) {
    case Mode::kLstm: {
      dnnl::lstm_forward::primitive_desc fwd(engine, prop, direction, layer.src_layer, layer.src_iter, layer.src_iter_c,
                                             weights.layer, weights.iter, memory::desc(), weights.projection,
                                             layer.bias, layer.dst_layer, layer.dst_iter, layer.dst_iter_c, attr);
      *forward = fwd;
      if (training) {
        *backward = dnnl::lstm_backward::primitive_desc(
            engine, dnnl::prop_kind::backward, direction, layer.src_layer, layer.src_iter, layer.src_iter_c,
            backward_weights.layer, backward_weights.iter, memory::desc(), backward_weights.projection, layer.bias,
            layer.dst_layer, layer.dst_iter, layer.dst_iter_c, layer.diff_src_layer, layer.diff_src_iter,
            layer.diff_src_iter_c, diff.layer, diff.iter, memory::desc(), diff.projection, layer.diff_bias,
            layer.diff_dst_layer, layer.diff_dst_iter, layer.diff_dst_iter_c, fwd, attr);
      }
      return;
    }
    case Mode::kGru: {
      dnnl::lbr_gru_forward::primitive_desc fwd(engine, prop, direction, layer.src_layer, layer.src_iter, weights.layer,
                                                weights.iter, layer.bias, layer.dst_layer, layer.dst_iter, attr);
      *forward = fwd;
      if (training) {
        *backward = dnnl::lbr_gru_backward::primitive_desc(
            engine, dnnl::prop_kind::backward, direction, layer.src_layer, layer.src_iter, backward_weights.layer,
            backward_weights.iter, layer.bias, layer.dst_layer, layer.dst_iter, layer.diff_src_layer,
            layer.diff_src_iter, diff.layer, diff.iter, layer.diff_bias, layer.diff_dst_layer, layer.diff_dst_iter, fwd,
            attr);
      }
      return;
    }
    case Mode::kRnnTanh:
    case Mode::kRnnRelu: {
      const auto activation =
          network.mode == Mode::kRnnTanh ? dnnl::algorithm::eltwise_tanh : dnnl::algorithm::eltwise_relu;
      dnnl::vanilla_rnn_forward::primitive_desc fwd(engine, prop, activation, direction, layer.src_layer,
                                                    layer.src_iter, weights.layer, weights.iter, layer.bias,
                                                    layer.dst_layer, layer.dst_iter, attr);
      *forward = fwd;
      if (training) {
        *backward = dnnl::vanilla_rnn_backward::primitive_desc(
            engine, dnnl::prop_kind::backward, activation, direction, layer.src_layer, layer.src_iter,
            backward_weights.layer, backward_weights.iter, layer.bias, layer.dst_layer, layer.dst_iter,
            layer.diff_src_layer, layer.diff_src_iter, diff.layer, diff.iter, layer.diff_bias, layer.diff_dst_layer,
            layer.diff_dst_iter, fwd, attr);
      }
      return;
    }
  }
  throw std::invalid_argument("unknown cell kind");
}

WeightDescs ArgWeights(const dnnl::primitive_desc& pd, bool diff) {
  return {ArgDesc(pd, diff ? DNNL_ARG_DIFF_WEIGHTS_LAYER : DNNL_ARG_WEIGHTS_LAYER),
          ArgDesc(pd, diff ? DNNL_ARG_DIFF_WEIGHTS_ITER : DNNL_ARG_WEIGHTS_ITER),
          ArgDesc(pd, diff ? DNNL_ARG_DIFF_WEIGHTS_PROJECTION : DNNL_ARG_WEIGHTS_PROJECTION)};
}

// Replaces in `request` each weights tensor that `chosen` has in an opaque (packed) format by `plain`'s; whether any.
bool UnpackOpaque(const WeightDescs& chosen, const WeightDescs& plain, WeightDescs* request) {
  bool changed = false;
  auto unpack = [&](const memory::desc& picked, const memory::desc& layout, memory::desc* requested) {
    if (!picked.is_zero() && picked.get_format_kind() == memory::format_kind::opaque) {
      *requested = layout;
      changed = true;
    }
  };
  unpack(chosen.layer, plain.layer, &request->layer);
  unpack(chosen.iter, plain.iter, &request->iter);
  unpack(chosen.projection, plain.projection, &request->projection);
  return changed;
}

std::shared_ptr<LayerPlan> BuildLayerPlan(const Network& network, int64_t input_size) {
  auto layer = std::make_shared<LayerPlan>();
  layer->input_size = input_size;
  const memory::dim steps = network.max_time, batch = network.batch, directions = network.num_directions;
  const memory::dim units = network.num_units, hidden = network.hidden_size();
  const dt data = network.data_type;
  const bool lstm = network.has_cell_state();
  layer->src_layer = memory::desc({steps, batch, input_size}, data, tag::tnc);
  layer->src_iter = memory::desc({1, directions, batch, hidden}, data, tag::ldnc);
  layer->src_iter_c = lstm ? memory::desc({1, directions, batch, units}, data, tag::ldnc) : memory::desc();
  layer->dst_layer = memory::desc({steps, batch, directions * hidden}, data, tag::tnc);
  layer->dst_iter = layer->src_iter;
  layer->dst_iter_c = layer->src_iter_c;
  // The summed bias is computed in float32 whatever the data type (oneDNN accepts it with bf16 data too).
  layer->bias = memory::desc({1, directions, network.bias_gates(), units}, dt::f32, tag::ldgo);
  layer->plain = LayerWeights(network, input_size, data, tag::ldgoi, tag::ldoi);
  if (network.training) {
    auto f32 = [](const memory::desc& md) {
      return md.is_zero() ? md : memory::desc(md.get_dims(), dt::f32, md.get_strides());
    };
    layer->diff_src_layer = f32(layer->src_layer);
    layer->diff_src_iter = f32(layer->src_iter);
    layer->diff_src_iter_c = f32(layer->src_iter_c);
    layer->diff_dst_layer = f32(layer->dst_layer);
    layer->diff_dst_iter = f32(layer->dst_iter);
    layer->diff_dst_iter_c = f32(layer->dst_iter_c);
    layer->diff_bias = layer->bias;
  }

  // The weights in the layout each primitive picks (tag::any), but for one it picks its packed GEMM format in: the
  // packing is meant to be paid once for many calls, and every call here packs the weights anew. oneDNN 3.2's lbr_gru
  // inference picks it ("ref" implementation): packing the two matrices of a T=25 B=64 I=H=1024 bfloat16 GRU took
  // 16 ms of a 66 ms forward, and the same primitive on the plain layout runs the forward in 56-58 ms.
  // With plain_backward_weights the backward takes the plain ldgoi layout whatever it would pick: oneDNN 3.2's
  // bfloat16 LSTM backward then runs its GEMM ("ref") driver instead of its brgemm kernels, which is faster at some
  // shapes and slower at others (the CPU rule's measurements, jax_cudnn_rnn/backends/onednn/cpu_measurements.json).
  const auto prop = network.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  WeightDescs forward_request = LayerWeights(network, input_size, data, tag::any, tag::any);
  WeightDescs backward_request = network.plain_backward_weights ? layer->plain : forward_request;
  dnnl::primitive_desc forward, backward;
  MakePrimitiveDescs(network, *layer, prop, forward_request, backward_request, &forward, &backward);
  const bool unpack_forward = UnpackOpaque(
      ArgWeights(forward, false), LayerWeights(network, input_size, data, tag::ldigo, tag::ldio), &forward_request);
  const bool unpack_backward =
      network.training && UnpackOpaque(ArgWeights(backward, false), layer->plain, &backward_request);
  if (unpack_forward || unpack_backward) {
    MakePrimitiveDescs(network, *layer, prop, forward_request, backward_request, &forward, &backward);
  }
  layer->forward = dnnl::primitive(forward);
  layer->forward_weights = ArgWeights(forward, false);
  layer->forward_scratchpad_bytes = forward.scratchpad_desc().get_size();
  const memory::desc* plain[] = {&layer->plain.layer, &layer->plain.iter, &layer->plain.projection};
  const memory::desc* fwd_formats[] = {&layer->forward_weights.layer, &layer->forward_weights.iter,
                                       &layer->forward_weights.projection};
  for (int i = 0; i < 3; ++i) layer->to_forward[i] = Reorder::Make(*plain[i], *fwd_formats[i]);
  if (network.training) {
    layer->workspace = ArgDesc(forward, DNNL_ARG_WORKSPACE);
    layer->backward = dnnl::primitive(backward);
    layer->backward_weights = ArgWeights(backward, false);
    layer->diff_weights = ArgWeights(backward, true);
    layer->backward_scratchpad_bytes = backward.scratchpad_desc().get_size();
    const memory::desc* bwd_formats[] = {&layer->backward_weights.layer, &layer->backward_weights.iter,
                                         &layer->backward_weights.projection};
    const memory::desc* diff_formats[] = {&layer->diff_weights.layer, &layer->diff_weights.iter,
                                          &layer->diff_weights.projection};
    for (int i = 0; i < 3; ++i) {
      layer->to_backward[i] = Reorder::Make(*plain[i], *bwd_formats[i]);
      layer->from_diff[i] = Reorder::Make(*diff_formats[i], *plain[i]);
    }
  }
  return layer;
}

size_t MaxScratchpad(size_t bytes, const Reorder (&reorders)[3]) {
  for (const Reorder& reorder : reorders) bytes = std::max(bytes, reorder.scratchpad_bytes);
  return bytes;
}

Reorder Conversion(int64_t elements, dt from, dt to) {
  return Reorder::Make(memory::desc({elements}, from, tag::a), memory::desc({elements}, to, tag::a));
}

std::shared_ptr<const CallPlan> BuildPlan(const Network& network) {
  auto plan = std::make_shared<CallPlan>();
  plan->network = network;
  const int64_t num_layers = network.num_layers;
  std::shared_ptr<LayerPlan> first = BuildLayerPlan(network, network.input_size);
  std::shared_ptr<LayerPlan> rest = first;
  if (num_layers > 1 && network.output_size() != network.input_size) {
    rest = BuildLayerPlan(network, network.output_size());
  }
  for (int64_t l = 0; l < num_layers; ++l) plan->layers.push_back(l == 0 ? first : rest);

  const size_t eb = network.element_bytes();
  const size_t output_bytes = static_cast<size_t>(network.max_time * network.batch * network.output_size()) * eb;
  if (network.training) {
    RegionAllocator reserve;
    for (int64_t l = 0; l < num_layers; ++l) {
      plan->workspace.push_back(reserve.Add(plan->layers[l]->workspace.get_size()));
      plan->layer_output.push_back(reserve.Add(l + 1 < num_layers ? output_bytes : 0));
    }
    plan->reserve_bytes = reserve.total();
  }

  auto max_over_layers = [&](auto size_of) {
    size_t bytes = 0;
    for (const auto& layer : {first, rest}) bytes = std::max(bytes, static_cast<size_t>(size_of(*layer)));
    return bytes;
  };
  auto weight_regions = [&](RegionAllocator& arena, WeightDescs LayerPlan::* descs) {
    WeightRegions regions;
    regions.layer = arena.Add(max_over_layers([&](const LayerPlan& l) { return (l.*descs).layer.get_size(); }));
    regions.iter = arena.Add(max_over_layers([&](const LayerPlan& l) { return (l.*descs).iter.get_size(); }));
    regions.projection =
        arena.Add(max_over_layers([&](const LayerPlan& l) { return (l.*descs).projection.get_size(); }));
    return regions;
  };

  RegionAllocator weights;
  for (int64_t l = 0; l < num_layers; ++l) {
    const LayerPlan& layer = *plan->layers[l];
    plan->weights.layers.push_back({weights.Add(layer.forward_weights.layer.get_size()),
                                    weights.Add(layer.forward_weights.iter.get_size()),
                                    weights.Add(layer.forward_weights.projection.get_size())});
    plan->weights.bias.push_back(weights.Add(layer.bias.get_size()));
  }
  plan->weights.bytes = weights.total();

  RegionAllocator preparation;
  plan->preparation.scratchpad =
      preparation.Add(max_over_layers([](const LayerPlan& l) { return MaxScratchpad(0, l.to_forward); }));
  plan->preparation.plain = weight_regions(preparation, &LayerPlan::plain);
  plan->preparation.bytes = preparation.total();

  RegionAllocator forward;
  plan->forward.scratchpad =
      forward.Add(max_over_layers([](const LayerPlan& l) { return l.forward_scratchpad_bytes; }));
  if (!network.training) {  // training keeps the intermediate outputs in the reserve space
    plan->forward.outputs[0] = forward.Add(num_layers > 1 ? output_bytes : 0);
    plan->forward.outputs[1] = forward.Add(num_layers > 2 ? output_bytes : 0);
  }
  plan->forward.bytes = forward.total();

  if (network.training) {
    const bool bf16 = network.data_type == dt::bf16;
    const int64_t states = num_layers * network.num_directions * network.batch;
    const int64_t y_elements = network.max_time * network.batch * network.output_size();
    const int64_t x_elements = network.max_time * network.batch * network.input_size;
    const int64_t h_elements = states * network.hidden_size();
    const int64_t c_elements = network.has_cell_state() ? states * network.num_units : 0;
    if (bf16) {
      plan->dy_to_f32 = Conversion(y_elements, dt::bf16, dt::f32);
      plan->dh_n_to_f32 = Conversion(h_elements, dt::bf16, dt::f32);
      plan->dx_from_f32 = Conversion(x_elements, dt::f32, dt::bf16);
      plan->dh0_from_f32 = Conversion(h_elements, dt::f32, dt::bf16);
      if (c_elements > 0) {
        plan->dc_n_to_f32 = Conversion(c_elements, dt::bf16, dt::f32);
        plan->dc0_from_f32 = Conversion(c_elements, dt::f32, dt::bf16);
      }
    }
    size_t scratchpad = max_over_layers([](const LayerPlan& l) {
      return MaxScratchpad(MaxScratchpad(l.backward_scratchpad_bytes, l.to_backward), l.from_diff);
    });
    for (const Reorder* r : {&plan->dy_to_f32, &plan->dh_n_to_f32, &plan->dc_n_to_f32, &plan->dx_from_f32,
                             &plan->dh0_from_f32, &plan->dc0_from_f32}) {
      scratchpad = std::max(scratchpad, r->scratchpad_bytes);
    }
    RegionAllocator backward;
    auto& b = plan->backward;
    b.scratchpad = backward.Add(scratchpad);
    b.bias = backward.Add(first->bias.get_size());
    b.diff_bias = backward.Add(first->diff_bias.get_size());
    b.plain = weight_regions(backward, &LayerPlan::plain);
    b.weights = weight_regions(backward, &LayerPlan::backward_weights);
    b.diff_weights = weight_regions(backward, &LayerPlan::diff_weights);
    const size_t diff_output_bytes = output_bytes / eb * sizeof(float);
    b.diff_outputs[0] = backward.Add(num_layers > 1 ? diff_output_bytes : 0);
    b.diff_outputs[1] = backward.Add(num_layers > 2 ? diff_output_bytes : 0);
    if (bf16) {
      b.dy = backward.Add(y_elements * sizeof(float));
      b.dx = backward.Add(x_elements * sizeof(float));
      b.dh_n = backward.Add(h_elements * sizeof(float));
      b.dh0 = backward.Add(h_elements * sizeof(float));
      b.dc_n = backward.Add(c_elements * sizeof(float));
      b.dc0 = backward.Add(c_elements * sizeof(float));
    }
    b.bytes = backward.total();
  }
  return plan;
}

// A small LRU cache: plans hold JIT-compiled kernels, and shapes that change without end must not grow memory.
class PlanCache {
 public:
  std::shared_ptr<const CallPlan> Get(const Network& network) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = index_.find(network);
      if (it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
      }
    }
    // Built outside the lock: creation takes milliseconds and other shapes must not wait for it. Two threads that
    // build the same plan at once keep the first one stored.
    std::shared_ptr<const CallPlan> plan = BuildPlan(network);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(network);
    if (it != index_.end()) return it->second->second;
    order_.emplace_front(network, plan);
    index_[network] = order_.begin();
    while (order_.size() > kPlanCacheCapacity) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return plan;
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return order_.size();
  }

 private:
  using Entry = std::pair<Network, std::shared_ptr<const CallPlan>>;
  std::mutex mutex_;
  std::list<Entry> order_;
  std::unordered_map<Network, std::list<Entry>::iterator, NetworkHash> index_;
};

PlanCache& Cache() {
  static PlanCache* cache = new PlanCache();  // never destroyed: calls may still run while the process exits
  return *cache;
}

}  // namespace

const dnnl::engine& Engine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

Region RegionAllocator::Add(size_t bytes) {
  Region region{total_, bytes};
  total_ += (bytes + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
  return region;
}

Reorder Reorder::Make(const dnnl::memory::desc& src, const dnnl::memory::desc& dst) {
  Reorder reorder;
  reorder.src = src;
  reorder.dst = dst;
  reorder.needed = !src.is_zero() && src != dst;
  if (reorder.needed) {
    dnnl::reorder::primitive_desc pd(Engine(), src, Engine(), dst, UserScratchpad());
    reorder.scratchpad_bytes = pd.scratchpad_desc().get_size();
    reorder.primitive = dnnl::reorder(pd);
  }
  return reorder;
}

void Reorder::Run(const dnnl::stream& stream, void* src_data, void* dst_data, void* scratchpad) const {
  if (!needed) return;
  dnnl::memory from(src, Engine(), src_data), to(dst, Engine(), dst_data);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  if (scratchpad_bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory({{static_cast<memory::dim>(scratchpad_bytes)}, dt::u8, tag::a}, Engine(), scratchpad));
  }
  try {
    primitive.execute(stream, args);
  } catch (const dnnl::error& e) {
    throw dnnl::error(e.status, "reorder failed");
  }
}

std::shared_ptr<const CallPlan> GetPlan(const Network& network) { return Cache().Get(network); }

size_t CachedPlanCount() { return Cache().size(); }

}  // namespace jax_cudnn_rnn::onednn
