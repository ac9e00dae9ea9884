// The handlers. Argument lists (names as in jax_cudnn_rnn/backends/onednn/; [..] only when the condition holds):
//
//   jax_cudnn_rnn_onednn_weights(*params) -> weights
//   jax_cudnn_rnn_onednn_forward(x, h0, weights, [c0: lstm])
//       -> (y, h_n, [c_n: lstm], [reserve_space: training])
//   jax_cudnn_rnn_onednn_backward(x, h0, y, h_n, dy, dh_n, reserve_space, [c0, c_n, dc_n: lstm], *params)
//       -> (dx, dh0, [dc0: lstm], *dparams)
//
// `params` is the opaque buffer, or pieces of it (a frontend's canonical tensors, weights.h ParamsView), each at the
// element of the buffer the attribute `piece_offsets` gives (the buffer: [0]); `dparams` are like them. `channel_*`:
// layer-0 input columns the params hold no weights for (network.h InputChannel), written as constants, no gradient.
// The weights handler writes every layer's weights in its forward primitive's formats (and the summed biases) into a
// buffer of bytes, which the forward reads: a separate call, so that XLA hoists it out of a loop over calls with the
// same params (a decoding loop of one-step calls reorders the weights once, not at every step).
// The network runs layer by layer, each layer one oneDNN primitive over both directions (bidirectional_concat).
// The call's temporary memory comes from the extension's scratch pool (scratch.h); the reserve space's size comes
// from `buffer_sizes` in module.cc, the same plan.
#include "rnn_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ffi_args.h"
#include "guarded.h"
#include "network.h"
#include "pages.h"
#include "plan.h"
#include "rnn_operands.h"
#include "scratch.h"
#include "threading.h"
#include "weights.h"

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::jax_cudnn_rnn::onednn::CallAttrs, JCR_ONEDNN_CALL_ATTRS);
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::jax_cudnn_rnn::onednn::WeightsAttrs, JCR_ONEDNN_CALL_ATTRS,
                                      ::xla::ffi::StructMember<std::string_view>("dtype"),
                                      ::xla::ffi::StructMember<int64_t>("max_time"),
                                      ::xla::ffi::StructMember<int64_t>("batch"), JCR_ONEDNN_PIECES_ATTRS);
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::jax_cudnn_rnn::onednn::BackwardAttrs, JCR_ONEDNN_CALL_ATTRS,
                                      JCR_ONEDNN_PIECES_ATTRS);

namespace jax_cudnn_rnn::onednn {

namespace ffi = ::xla::ffi;

namespace {

using Args = std::unordered_map<int, dnnl::memory>;

dnnl::memory Memory(const dnnl::memory::desc& desc, void* data) { return dnnl::memory(desc, Engine(), data); }

dnnl::memory Bytes(Region region, void* base) {
  return Memory(dnnl::memory::desc({static_cast<dnnl::memory::dim>(region.bytes)}, dnnl::memory::data_type::u8,
                                   dnnl::memory::format_tag::a),
                region.in(base));
}

// Pointer to layer `layer`'s slice [D, B, width] of a state array [L*D, B, width] of `element_bytes` elements.
char* StateSlice(void* states, const Network& network, int64_t layer, int64_t width, size_t element_bytes) {
  return static_cast<char*>(states) + layer * network.num_directions * network.batch * width * element_bytes;
}

// Where one layer's weights (in a primitive's formats) and summed bias are.
struct WeightPointers {
  void *layer, *iter, *projection;
  float* bias;
};
WeightPointers Pointers(const WeightRegions& weights, Region bias, void* base) {
  return {weights.layer.in(base), weights.iter.in(base), weights.projection.in(base),
          reinterpret_cast<float*>(bias.in(base))};
}

// Writes the weights of layer `layer` in the formats of `reorders` and its summed bias to `out` (where `formatted`
// and `bias` say): each tensor reordered from the buffer itself where it lies there in the plain layout
// (PlainInBuffer), else gathered into `plain` (in `scratch`) and reordered, or gathered straight into place where the
// primitive takes the plain layout as it is.
WeightPointers PrepareWeights(const dnnl::stream& stream, const Network& network, int64_t layer,
                              const std::vector<SlotOffsets>& slots, const ParamsView& params,
                              const Reorder (&reorders)[3], const WeightRegions& plain, Region scratchpad,
                              void* scratch, const WeightRegions& formatted, Region bias, void* out) {
  const WeightPointers result = Pointers(formatted, bias, out);
  void* formatted_data[] = {result.layer, result.iter, result.projection};
  const Region plain_regions[] = {plain.layer, plain.iter, plain.projection};
  void* source[3];  // what each reorder reads
  void* gather[3];  // where GatherWeights writes (nullptr: nothing to gather)
  for (int i = 0; i < 3; ++i) {
    const void* in_buffer = reorders[i].needed ? PlainInBuffer(network, layer, slots, params, i) : nullptr;
    source[i] = in_buffer != nullptr ? const_cast<void*>(in_buffer) : plain_regions[i].in(scratch);
    gather[i] = in_buffer != nullptr ? nullptr : reorders[i].needed ? source[i] : formatted_data[i];
  }
  GatherWeights(network, layer, slots, params, gather[0], gather[1], network.proj_size > 0 ? gather[2] : nullptr);
  for (int i = 0; i < 3; ++i) reorders[i].Run(stream, source[i], formatted_data[i], scratchpad.in(scratch));
  GatherBias(network, layer, slots, params, result.bias);
  return result;
}

// A call's states, each [L * D, B, width] (c0 and c_n nullptr unless the network has a cell state).
struct States {
  void *h0, *h_n, *c0, *c_n;
};

// The arguments the forward and the backward primitive of layer `l` share: the layer's input and output, its slices
// of the states, and its weights (`weights`, in the formats `formats`).
Args LayerArgs(const Network& network, int64_t l, const LayerPlan& layer, const WeightDescs& formats,
               const WeightPointers& weights, void* src_layer, void* dst_layer, const States& states) {
  const size_t eb = network.element_bytes();
  const int64_t hidden = network.hidden_size(), units = network.num_units;
  Args args{{DNNL_ARG_SRC_LAYER, Memory(layer.src_layer, src_layer)},
            {DNNL_ARG_SRC_ITER, Memory(layer.src_iter, StateSlice(states.h0, network, l, hidden, eb))},
            {DNNL_ARG_WEIGHTS_LAYER, Memory(formats.layer, weights.layer)},
            {DNNL_ARG_WEIGHTS_ITER, Memory(formats.iter, weights.iter)},
            {DNNL_ARG_BIAS, Memory(layer.bias, weights.bias)},
            {DNNL_ARG_DST_LAYER, Memory(layer.dst_layer, dst_layer)},
            {DNNL_ARG_DST_ITER, Memory(layer.dst_iter, StateSlice(states.h_n, network, l, hidden, eb))}};
  if (network.has_cell_state()) {
    args.emplace(DNNL_ARG_SRC_ITER_C, Memory(layer.src_iter_c, StateSlice(states.c0, network, l, units, eb)));
    args.emplace(DNNL_ARG_DST_ITER_C, Memory(layer.dst_iter_c, StateSlice(states.c_n, network, l, units, eb)));
  }
  if (network.proj_size > 0) {
    args.emplace(DNNL_ARG_WEIGHTS_PROJECTION, Memory(formats.projection, weights.projection));
  }
  return args;
}

ffi::Error RnnWeightsImpl(ffi::RemainingArgs params_pieces, ffi::Result<ffi::AnyBuffer> weights, WeightsAttrs attrs) {
  return Guarded("jax_cudnn_rnn_onednn_weights", [&]() -> ffi::Error {
    Network network;
    std::optional<ParamsView> params;
    std::vector<SlotOffsets> slots;
    ffi::DataType dtype;
    if (attrs.dtype == "float32") dtype = ffi::DataType::F32;
    else if (attrs.dtype == "bfloat16") dtype = ffi::DataType::BF16;
    else
      return ffi::Error::InvalidArgument("dtype is '" + std::string(attrs.dtype) + "'; expected float32 or bfloat16");
    JCR_RETURN_IF_ERROR(DecodeAttrs(attrs.call, dtype, attrs.max_time, attrs.batch, &network));
    JCR_RETURN_IF_ERROR(
        DecodeParams(BuffersFrom(params_pieces, 0), "params", attrs.call, attrs.pieces, network, &params, &slots));
    std::shared_ptr<const CallPlan> plan = GetPlan(network);
    JCR_RETURN_IF_ERROR(CheckBytes("weights", *weights, plan->weights.bytes));
    AdviseHugePages(weights->untyped_data(), weights->size_bytes());
    ScratchLease scratch = TakeScratch(plan->preparation.bytes);
    const auto& p = plan->preparation;
    return RunOnednn([&](dnnl::stream& stream) -> ffi::Error {
      for (int64_t l = 0; l < network.num_layers; ++l) {
        PrepareWeights(stream, network, l, slots, *params, plan->layers[l]->to_forward, p.plain, p.scratchpad,
                       scratch.data(), plan->weights.layers[l], plan->weights.bias[l], weights->untyped_data());
      }
      stream.wait();
      return ffi::Error::Success();
    });
  });
}

ffi::Error RnnForwardImpl(ffi::AnyBuffer x, ffi::AnyBuffer h0, ffi::AnyBuffer weights, ffi::RemainingArgs optional_args,
                          ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> h_n,
                          ffi::RemainingRets optional_rets, CallAttrs attrs) {
  return Guarded("jax_cudnn_rnn_onednn_forward", [&]() -> ffi::Error {
    Network network;
    JCR_RETURN_IF_ERROR(DecodeCall(x, attrs, &network));
    const ffi::DataType dtype = x.element_type();
    const int64_t B = network.batch;
    const bool lstm = network.has_cell_state();
    std::optional<ffi::AnyBuffer> c0;
    OptionalBuffers args(optional_args, "argument");
    JCR_RETURN_IF_ERROR(args.Take(lstm, "c0", &c0));
    JCR_RETURN_IF_ERROR(args.CheckAllTaken());
    std::optional<ffi::Result<ffi::AnyBuffer>> c_n, reserve_space;
    OptionalBuffers rets(optional_rets, "result");
    JCR_RETURN_IF_ERROR(rets.Take(lstm, "c_n", &c_n));
    JCR_RETURN_IF_ERROR(rets.Take(network.training, "reserve_space", &reserve_space));
    JCR_RETURN_IF_ERROR(rets.CheckAllTaken());
    JCR_RETURN_IF_ERROR(CheckBuffer("h0", h0, dtype, network.state_shape(B)));
    JCR_RETURN_IF_ERROR(CheckBuffer("y", *y, dtype, {network.max_time, B, network.output_size()}));
    JCR_RETURN_IF_ERROR(CheckBuffer("h_n", *h_n, dtype, network.state_shape(B)));
    if (lstm) {
      JCR_RETURN_IF_ERROR(CheckBuffer("c0", *c0, dtype, network.cell_shape(B)));
      JCR_RETURN_IF_ERROR(CheckBuffer("c_n", **c_n, dtype, network.cell_shape(B)));
    }

    std::shared_ptr<const CallPlan> plan = GetPlan(network);
    JCR_RETURN_IF_ERROR(CheckBytes("weights", weights, plan->weights.bytes));
    ScratchLease scratch = TakeScratch(plan->forward.bytes);
    void* work = scratch.data();
    if (network.training) JCR_RETURN_IF_ERROR(CheckBytes("reserve_space", **reserve_space, plan->reserve_bytes));
    void* reserve = DataOrNull(reserve_space);
    AdviseHugePages(reserve, network.training ? plan->reserve_bytes : 0);
    AdviseHugePages(y->untyped_data(), y->size_bytes());
    const States states{h0.untyped_data(), h_n->untyped_data(), DataOrNull(c0), DataOrNull(c_n)};

    const auto& f = plan->forward;
    return RunOnednn([&](dnnl::stream& stream) -> ffi::Error {
      void* layer_input = x.untyped_data();
      for (int64_t l = 0; l < network.num_layers; ++l) {
        const LayerPlan& layer = *plan->layers[l];
        const bool last = l + 1 == network.num_layers;
        const WeightPointers layer_weights =
            Pointers(plan->weights.layers[l], plan->weights.bias[l], weights.untyped_data());
        void* layer_output = last               ? y->untyped_data()
                             : network.training ? plan->layer_output[l].in(reserve)
                                                : f.outputs[l % 2].in(work);
        Args args =
            LayerArgs(network, l, layer, layer.forward_weights, layer_weights, layer_input, layer_output, states);
        args.emplace(DNNL_ARG_SCRATCHPAD, Bytes(f.scratchpad, work));
        if (network.training) args.emplace(DNNL_ARG_WORKSPACE, Memory(layer.workspace, plan->workspace[l].in(reserve)));
        layer.forward.execute(stream, args);
        layer_input = layer_output;
      }
      stream.wait();
      return ffi::Error::Success();
    });
  });
}

ffi::Error RnnBackwardImpl(ffi::AnyBuffer x, ffi::AnyBuffer h0, ffi::AnyBuffer y, ffi::AnyBuffer h_n, ffi::AnyBuffer dy,
                           ffi::AnyBuffer dh_n, ffi::AnyBuffer reserve_space, ffi::RemainingArgs remaining_args,
                           ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dh0,
                           ffi::RemainingRets remaining_rets, BackwardAttrs attrs) {
  return Guarded("jax_cudnn_rnn_onednn_backward", [&]() -> ffi::Error {
    Network network;
    std::optional<ParamsView> params, dparams;
    std::vector<SlotOffsets> slots;
    if (!attrs.call.training) {
      return ffi::Error::InvalidArgument("the backward needs training=true (it reads a reserve space)");
    }
    JCR_RETURN_IF_ERROR(DecodeCall(x, attrs.call, &network));
    const ffi::DataType dtype = x.element_type();
    const int64_t B = network.batch;
    const int64_t hidden = network.hidden_size(), units = network.num_units;
    const bool lstm = network.has_cell_state(), bf16 = network.data_type == dnnl::memory::data_type::bf16;
    std::optional<ffi::AnyBuffer> c0, c_n, dc_n;
    OptionalBuffers args(remaining_args, "argument");
    JCR_RETURN_IF_ERROR(args.Take(lstm, "c0", &c0));
    JCR_RETURN_IF_ERROR(args.Take(lstm, "c_n", &c_n));
    JCR_RETURN_IF_ERROR(args.Take(lstm, "dc_n", &dc_n));
    std::optional<ffi::Result<ffi::AnyBuffer>> dc0;
    OptionalBuffers rets(remaining_rets, "result");
    JCR_RETURN_IF_ERROR(rets.Take(lstm, "dc0", &dc0));
    // The rest are the params' pieces and their gradients, alike.
    const std::vector<ffi::AnyBuffer> pieces = BuffersFrom(remaining_args, lstm ? 3 : 0);
    const std::vector<ffi::AnyBuffer> dpieces = BuffersFrom(remaining_rets, lstm ? 1 : 0);
    JCR_RETURN_IF_ERROR(DecodeParams(pieces, "params", attrs.call, attrs.pieces, network, &params, &slots));
    JCR_RETURN_IF_ERROR(DecodeParams(dpieces, "dparams", attrs.call, attrs.pieces, network, &dparams, &slots));
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (!std::equal(pieces[i].dimensions().begin(), pieces[i].dimensions().end(), dpieces[i].dimensions().begin(),
                      dpieces[i].dimensions().end())) {
        return ffi::Error::InvalidArgument("dparams piece " + std::to_string(i) + " has shape " +
                                           ShapeString(dpieces[i].dimensions()) + "; expected params piece " +
                                           std::to_string(i) + "'s, " + ShapeString(pieces[i].dimensions()));
      }
    }
    const std::pair<const char*, const ffi::AnyBuffer*> state_buffers[] = {
        {"h0", &h0}, {"h_n", &h_n}, {"dh_n", &dh_n}, {"dh0", &*dh0}};
    for (const auto& [name, buffer] : state_buffers) {
      JCR_RETURN_IF_ERROR(CheckBuffer(name, *buffer, dtype, network.state_shape(B)));
    }
    if (lstm) {
      const std::pair<const char*, const ffi::AnyBuffer*> cell_buffers[] = {
          {"c0", &*c0}, {"c_n", &*c_n}, {"dc_n", &*dc_n}, {"dc0", &**dc0}};
      for (const auto& [name, buffer] : cell_buffers) {
        JCR_RETURN_IF_ERROR(CheckBuffer(name, *buffer, dtype, network.cell_shape(B)));
      }
    }
    const std::vector<int64_t> y_dims{network.max_time, B, network.output_size()};
    JCR_RETURN_IF_ERROR(CheckBuffer("dx", *dx, dtype, {network.max_time, B, network.input_size}));
    JCR_RETURN_IF_ERROR(CheckBuffer("y", y, dtype, y_dims));
    JCR_RETURN_IF_ERROR(CheckBuffer("dy", dy, dtype, y_dims));

    std::shared_ptr<const CallPlan> plan = GetPlan(network);
    ScratchLease scratch = TakeScratch(plan->backward.bytes);
    void* work = scratch.data();
    JCR_RETURN_IF_ERROR(CheckBytes("reserve_space", reserve_space, plan->reserve_bytes));
    void* reserve = reserve_space.untyped_data();
    const States states{h0.untyped_data(), h_n.untyped_data(), DataOrNull(c0), DataOrNull(c_n)};
    AdviseHugePages(dx->untyped_data(), dx->size_bytes());
    void* dc_n_data = DataOrNull(dc_n);
    void* dc0_data = DataOrNull(dc0);
    const auto& b = plan->backward;

    return RunOnednn([&](dnnl::stream& stream) -> ffi::Error {
      void* scratchpad = b.scratchpad.in(work);
      // oneDNN's bf16 backward takes and gives float32 gradients.
      void* dy32 = dy.untyped_data();
      void* dh_n32 = dh_n.untyped_data();
      void* dc_n32 = dc_n_data;
      void* dx32 = dx->untyped_data();
      void* dh0_32 = dh0->untyped_data();
      void* dc0_32 = dc0_data;
      if (bf16) {
        dy32 = b.dy.in(work);
        dh_n32 = b.dh_n.in(work);
        dx32 = b.dx.in(work);
        dh0_32 = b.dh0.in(work);
        plan->dy_to_f32.Run(stream, dy.untyped_data(), dy32, scratchpad);
        plan->dh_n_to_f32.Run(stream, dh_n.untyped_data(), dh_n32, scratchpad);
        if (lstm) {
          dc_n32 = b.dc_n.in(work);
          dc0_32 = b.dc0.in(work);
          plan->dc_n_to_f32.Run(stream, dc_n_data, dc_n32, scratchpad);
        }
      }
      for (int64_t l = network.num_layers - 1; l >= 0; --l) {
        const LayerPlan& layer = *plan->layers[l];
        const bool last = l + 1 == network.num_layers;
        const WeightPointers weights = PrepareWeights(stream, network, l, slots, *params, layer.to_backward, b.plain,
                                                      b.scratchpad, work, b.weights, b.bias, work);
        // oneDNN's backward adds into the weight gradients.
        void* diff_weights[] = {b.diff_weights.layer.in(work), b.diff_weights.iter.in(work),
                                b.diff_weights.projection.in(work)};
        std::memset(diff_weights[0], 0, layer.diff_weights.layer.get_size());
        std::memset(diff_weights[1], 0, layer.diff_weights.iter.get_size());
        if (network.proj_size > 0) std::memset(diff_weights[2], 0, layer.diff_weights.projection.get_size());
        float* diff_bias = reinterpret_cast<float*>(b.diff_bias.in(work));
        std::memset(diff_bias, 0, layer.diff_bias.get_size());

        void* src_layer = l == 0 ? x.untyped_data() : plan->layer_output[l - 1].in(reserve);
        void* dst_layer = last ? y.untyped_data() : plan->layer_output[l].in(reserve);
        void* diff_dst_layer = last ? dy32 : b.diff_outputs[l % 2].in(work);
        void* diff_src_layer = l == 0 ? dx32 : b.diff_outputs[(l - 1) % 2].in(work);
        Args args = LayerArgs(network, l, layer, layer.backward_weights, weights, src_layer, dst_layer, states);
        args.insert({{DNNL_ARG_WORKSPACE, Memory(layer.workspace, plan->workspace[l].in(reserve))},
                     {DNNL_ARG_DIFF_SRC_LAYER, Memory(layer.diff_src_layer, diff_src_layer)},
                     {DNNL_ARG_DIFF_SRC_ITER, Memory(layer.diff_src_iter, StateSlice(dh0_32, network, l, hidden, 4))},
                     {DNNL_ARG_DIFF_WEIGHTS_LAYER, Memory(layer.diff_weights.layer, diff_weights[0])},
                     {DNNL_ARG_DIFF_WEIGHTS_ITER, Memory(layer.diff_weights.iter, diff_weights[1])},
                     {DNNL_ARG_DIFF_BIAS, Memory(layer.diff_bias, diff_bias)},
                     {DNNL_ARG_DIFF_DST_LAYER, Memory(layer.diff_dst_layer, diff_dst_layer)},
                     {DNNL_ARG_DIFF_DST_ITER, Memory(layer.diff_dst_iter, StateSlice(dh_n32, network, l, hidden, 4))},
                     {DNNL_ARG_SCRATCHPAD, Bytes(b.scratchpad, work)}});
        if (lstm) {
          args.emplace(DNNL_ARG_DIFF_SRC_ITER_C,
                       Memory(layer.diff_src_iter_c, StateSlice(dc0_32, network, l, units, 4)));
          args.emplace(DNNL_ARG_DIFF_DST_ITER_C,
                       Memory(layer.diff_dst_iter_c, StateSlice(dc_n32, network, l, units, 4)));
        }
        if (network.proj_size > 0) {
          args.emplace(DNNL_ARG_DIFF_WEIGHTS_PROJECTION, Memory(layer.diff_weights.projection, diff_weights[2]));
        }
        layer.backward.execute(stream, args);

        // Gradients back into the buffer's layout (the plain staging is free again once the primitive ran).
        void* plain[] = {b.plain.layer.in(work), b.plain.iter.in(work), b.plain.projection.in(work)};
        for (int i = 0; i < 3; ++i) {
          layer.from_diff[i].Run(stream, diff_weights[i], plain[i], scratchpad);
          // Where oneDNN's format is already the plain one (e.g. a recurrent matrix of one unit), nothing was copied:
          // the gradients are where the primitive wrote them.
          if (!layer.from_diff[i].needed) plain[i] = diff_weights[i];
        }
        stream.wait();
        ScatterWeights(network, l, slots, plain[0], plain[1], network.proj_size > 0 ? plain[2] : nullptr, *dparams);
        ScatterBias(network, l, slots, diff_bias, *dparams);
      }
      if (bf16) {
        plan->dx_from_f32.Run(stream, dx32, dx->untyped_data(), scratchpad);
        plan->dh0_from_f32.Run(stream, dh0_32, dh0->untyped_data(), scratchpad);
        if (lstm) plan->dc0_from_f32.Run(stream, dc0_32, dc0_data, scratchpad);
      }
      stream.wait();
      return ffi::Error::Success();
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(RnnWeights, RnnWeightsImpl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()        // params (the buffer, or its pieces)
                                  .Ret<ffi::AnyBuffer>()  // weights
                                  .Attrs<WeightsAttrs>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(RnnForward, RnnForwardImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // h0
                                  .Arg<ffi::AnyBuffer>()  // weights
                                  .RemainingArgs()        // [c0]
                                  .Ret<ffi::AnyBuffer>()  // y
                                  .Ret<ffi::AnyBuffer>()  // h_n
                                  .RemainingRets()        // [c_n], [reserve_space]
                                  .Attrs<CallAttrs>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(RnnBackward, RnnBackwardImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // h0
                                  .Arg<ffi::AnyBuffer>()  // y
                                  .Arg<ffi::AnyBuffer>()  // h_n
                                  .Arg<ffi::AnyBuffer>()  // dy
                                  .Arg<ffi::AnyBuffer>()  // dh_n
                                  .Arg<ffi::AnyBuffer>()  // reserve_space
                                  .RemainingArgs()        // [c0, c_n, dc_n], params
                                  .Ret<ffi::AnyBuffer>()  // dx
                                  .Ret<ffi::AnyBuffer>()  // dh0
                                  .RemainingRets()        // [dc0], dparams
                                  .Attrs<BackwardAttrs>());

}  // namespace jax_cudnn_rnn::onednn
