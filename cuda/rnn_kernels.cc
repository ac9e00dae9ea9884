// The three handlers. Argument lists (names as in jax_cudnn_rnn/backends/cudnn/; [..] only when the condition holds):
//
//   jax_cudnn_rnn_forward(x, h0, params, [c0: lstm], [seq_lengths]) -> (y, h_n, [c_n: lstm], [reserve_space: training])
//   jax_cudnn_rnn_backward_data(y, dy, h0, dh_n, params, reserve_space, [c0, dc_n: lstm], [seq_lengths])
//       -> (dx, dh0, reserve_space (aliases the input), [dc0: lstm])
//   jax_cudnn_rnn_backward_weights(x, h0, y, reserve_space, [seq_lengths])
//       -> (dparams, reserve_space (aliases the input))
//
// `params` is the opaque buffer, cuDNN's weight space.
//
// cuDNN writes into the reserve space during both backward passes, so each returns it as an output aliased to its
// input: XLA then orders backward weights after backward data and never shares the buffer with anything else.
#include "rnn_kernels.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "descriptors.h"
#include "ffi_args.h"
#include "ffi_helpers.h"
#include "handle_pool.h"
#include "rnn_config.h"

// The attributes of every handler (jax_cudnn_rnn/backends/cudnn/ `_attributes`), in RnnAttrs' order.
#define JCR_CUDNN_ATTRS                                               \
  JCR_RNN_CONFIG_ATTRS, ::xla::ffi::StructMember<bool>("allow_tf32"), \
      ::xla::ffi::StructMember<std::string_view>("algorithm")

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::jax_cudnn_rnn::RnnAttrs, JCR_CUDNN_ATTRS);
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::jax_cudnn_rnn::ForwardAttrs, JCR_CUDNN_ATTRS,
                                      ::xla::ffi::StructMember<bool>("training"));

namespace jax_cudnn_rnn {

namespace ffi = ::xla::ffi;

namespace {

constexpr size_t kAlignment = 256;  // cuDNN's documented alignment for work and reserve space
// XLA's FFI scratch allocator refuses alignments above 16 bytes ("Unsupported alignment"); larger ones are made by
// asking for kAlignment more bytes and rounding the pointer up.
constexpr size_t kScratchAlignment = 16;

// `bytes` of XLA-owned device memory aligned to kAlignment, freed when the call returns.
ffi::Error AllocateScratch(ffi::ScratchAllocator& scratch, size_t bytes, const std::string& what, void** out) {
  *out = nullptr;
  if (bytes == 0) return ffi::Error::Success();
  std::optional<void*> memory = scratch.Allocate(bytes + kAlignment, kScratchAlignment);
  if (!memory.has_value()) {
    return ffi::Error::Internal("could not allocate " + std::to_string(bytes) + " bytes of device memory for " + what);
  }
  const uintptr_t address = reinterpret_cast<uintptr_t>(*memory);
  *out = reinterpret_cast<void*>((address + kAlignment - 1) / kAlignment * kAlignment);
  return ffi::Error::Success();
}

// Everything one cuDNN call needs besides the buffers: a handle on the call's stream, the network and tensor
// descriptors, and the sequence lengths on host (baked into the descriptors) and on device (devSeqLengths).
struct RnnCall {
  BorrowedHandle handle;
  cudnnDataType_t data_type = CUDNN_DATA_FLOAT;
  ffi::DataType element_type = ffi::DataType::F32;
  int64_t max_time = 0;
  int64_t batch = 0;
  RnnNetwork network;
  RnnTensors tensors;
  std::vector<int32_t> host_seq_lengths;
  const int32_t* device_seq_lengths = nullptr;
};

// Without seq_lengths every length is T, known on host: no device read. With seq_lengths the lengths must reach the
// host because cuDNN bakes them into the data descriptors: one small device-to-host copy and a stream
// synchronization per call, which stalls the host until the work queued before this call has finished.
ffi::Error ReadSeqLengths(cudaStream_t stream, ffi::ScratchAllocator& scratch,
                          const std::optional<ffi::AnyBuffer>& seq_lengths, RnnCall* call) {
  const int64_t T = call->max_time, B = call->batch;
  call->host_seq_lengths.assign(static_cast<size_t>(B), static_cast<int32_t>(T));
  if (seq_lengths.has_value()) {
    JCR_RETURN_IF_ERROR(CheckBuffer("seq_lengths", *seq_lengths, ffi::DataType::S32, {B}));
    call->device_seq_lengths = static_cast<const int32_t*>(seq_lengths->untyped_data());
    JCR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(call->host_seq_lengths.data(), call->device_seq_lengths,
                                             B * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    JCR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    for (int64_t b = 0; b < B; ++b) {
      const int32_t length = call->host_seq_lengths[b];
      if (length < 1 || length > T) {
        return ffi::Error::InvalidArgument("seq_lengths[" + std::to_string(b) + "] is " + std::to_string(length) +
                                           "; every length must be in [1, " + std::to_string(T) + "] = [1, max_time]");
      }
    }
    return ffi::Error::Success();
  }
  // cuDNN reads devSeqLengths asynchronously; a copy of the all-T lengths goes to scratch memory (a pageable
  // host-to-device cudaMemcpyAsync has consumed the host array when it returns).
  void* device = nullptr;
  JCR_RETURN_IF_ERROR(AllocateScratch(scratch, B * sizeof(int32_t), "seq_lengths", &device));
  JCR_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device, call->host_seq_lengths.data(), B * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  call->device_seq_lengths = static_cast<const int32_t*>(device);
  return ffi::Error::Success();
}

// `data` is x (forward, backward weights) or dx (backward data): [T, B, input_size] of the call's dtype; `params` is
// the opaque buffer or its gradient: cuDNN's weight space, 1-D of the same dtype.
ffi::Error PrepareCall(cudaStream_t stream, ffi::ScratchAllocator& scratch, const RnnConfig& config,
                       const RnnAttrs& attrs, const ffi::AnyBuffer& data, const char* data_name,
                       const ffi::AnyBuffer& params, const std::optional<ffi::AnyBuffer>& seq_lengths, RnnCall* call) {
  const ffi::DataType element_type = data.element_type();
  const ffi::Span<const int64_t> data_dims = data.dimensions();
  JCR_RETURN_IF_ERROR(CudnnDataType(element_type, data_name, &call->data_type));
  call->element_type = element_type;
  if (data_dims.size() != 3 || data_dims[2] != config.input_size) {
    return ffi::Error::InvalidArgument(std::string(data_name) + " has shape " + ShapeString(data_dims) +
                                       "; expected (max_time, batch, " + std::to_string(config.input_size) + ")");
  }
  call->max_time = data_dims[0];
  call->batch = data_dims[1];
  JCR_RETURN_IF_ERROR(ReadSeqLengths(stream, scratch, seq_lengths, call));
  JCR_RETURN_IF_ERROR(HandlePool::Instance().Borrow(stream, &call->handle));
  JCR_RETURN_IF_ERROR(MakeRnnNetwork(call->handle.get(), config, attrs.allow_tf32, attrs.algorithm, call->data_type,
                                     seq_lengths.has_value(), &call->network));
  if (params.element_type() != element_type || params.dimensions().size() != 1 ||
      params.size_bytes() != call->network.weight_space_bytes) {
    return ffi::Error::InvalidArgument(
        "params has shape " + ShapeString(params.dimensions()) + " (" + std::to_string(params.size_bytes()) +
        " bytes); cuDNN's weight space for this configuration is a 1-D buffer of " +
        std::to_string(call->network.weight_space_bytes) + " bytes of the data type of " + data_name +
        " (if params has params_size(config) elements, layout.params_size disagrees with cuDNN)");
  }
  return MakeRnnTensors(config, call->data_type, call->max_time, call->batch, call->host_seq_lengths,
                        seq_lengths.has_value(), &call->tensors);
}

// Sizes for the call's actual lengths; the reserve space was sized at trace time for full-length sequences.
ffi::Error TempSpace(const RnnCall& call, cudnnForwardMode_t mode, size_t* workspace_bytes, size_t* reserve_bytes) {
  JCR_CUDNN_RETURN_IF_ERROR(cudnnGetRNNTempSpaceSizes(call.handle.get(), call.network.rnn.get(), mode,
                                                      call.tensors.x.get(), workspace_bytes, reserve_bytes));
  return ffi::Error::Success();
}

// The backward passes update the reserve space in place; XLA aliases output and input, so this copies only if it
// ever hands over distinct buffers.
ffi::Error ForwardReserve(cudaStream_t stream, const ffi::AnyBuffer& in, ffi::Result<ffi::AnyBuffer>& out) {
  if (out->untyped_data() != in.untyped_data()) {
    JCR_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(out->untyped_data(), in.untyped_data(), in.size_bytes(), cudaMemcpyDeviceToDevice, stream));
  }
  return ffi::Error::Success();
}

ffi::Error RnnForwardImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x, ffi::AnyBuffer h0,
                          ffi::AnyBuffer params, ffi::RemainingArgs optional_args, ffi::Result<ffi::AnyBuffer> y,
                          ffi::Result<ffi::AnyBuffer> h_n, ffi::RemainingRets optional_rets, ForwardAttrs attrs) {
  RnnConfig config;
  JCR_RETURN_IF_ERROR(DecodeRnnConfig(attrs.config, &config));
  const bool lstm = config.has_cell_state();
  std::optional<ffi::AnyBuffer> c0, seq_lengths;
  OptionalBuffers args(optional_args, "argument");
  JCR_RETURN_IF_ERROR(args.Take(lstm, "c0", &c0));
  JCR_RETURN_IF_ERROR(args.Take(args.more(), "seq_lengths", &seq_lengths));
  JCR_RETURN_IF_ERROR(args.CheckAllTaken());
  std::optional<ffi::Result<ffi::AnyBuffer>> c_n, reserve_space;
  OptionalBuffers rets(optional_rets, "result");
  JCR_RETURN_IF_ERROR(rets.Take(lstm, "c_n", &c_n));
  JCR_RETURN_IF_ERROR(rets.Take(attrs.training, "reserve_space", &reserve_space));
  JCR_RETURN_IF_ERROR(rets.CheckAllTaken());

  RnnCall call;
  JCR_RETURN_IF_ERROR(PrepareCall(stream, scratch, config, attrs, x, "x", params, seq_lengths, &call));
  const ffi::DataType dtype = call.element_type;
  const int64_t T = call.max_time, B = call.batch;
  JCR_RETURN_IF_ERROR(CheckBuffer("h0", h0, dtype, config.state_shape(B)));
  JCR_RETURN_IF_ERROR(CheckBuffer("y", *y, dtype, {T, B, config.output_size()}));
  JCR_RETURN_IF_ERROR(CheckBuffer("h_n", *h_n, dtype, config.state_shape(B)));
  if (lstm) {
    JCR_RETURN_IF_ERROR(CheckBuffer("c0", *c0, dtype, config.cell_shape(B)));
    JCR_RETURN_IF_ERROR(CheckBuffer("c_n", **c_n, dtype, config.cell_shape(B)));
  }

  const cudnnForwardMode_t mode = attrs.training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
  size_t workspace_bytes = 0, reserve_bytes = 0;
  JCR_RETURN_IF_ERROR(TempSpace(call, mode, &workspace_bytes, &reserve_bytes));
  void* reserve = nullptr;
  if (attrs.training) {
    JCR_RETURN_IF_ERROR(CheckReserveRows("reserve_space", **reserve_space, reserve_bytes));
    reserve = (*reserve_space)->untyped_data();
    reserve_bytes = (*reserve_space)->size_bytes();
  }
  void* workspace = nullptr;
  JCR_RETURN_IF_ERROR(AllocateScratch(scratch, workspace_bytes, "the cuDNN workspace", &workspace));
  JCR_CUDNN_RETURN_IF_ERROR(
      cudnnRNNForward(call.handle.get(), call.network.rnn.get(), mode, call.device_seq_lengths, call.tensors.x.get(),
                      x.untyped_data(), call.tensors.y.get(), y->untyped_data(), call.tensors.h.get(),
                      h0.untyped_data(), h_n->untyped_data(), call.tensors.c.get(), DataOrNull(c0), DataOrNull(c_n),
                      params.size_bytes(), params.untyped_data(), workspace_bytes, workspace, reserve_bytes, reserve));
  return ffi::Error::Success();
}

ffi::Error RnnBackwardDataImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer y, ffi::AnyBuffer dy,
                               ffi::AnyBuffer h0, ffi::AnyBuffer dh_n, ffi::AnyBuffer params,
                               ffi::AnyBuffer reserve_space, ffi::RemainingArgs optional_args,
                               ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dh0,
                               ffi::Result<ffi::AnyBuffer> reserve_space_out, ffi::RemainingRets optional_rets,
                               RnnAttrs attrs) {
  RnnConfig config;
  JCR_RETURN_IF_ERROR(DecodeRnnConfig(attrs.config, &config));
  const bool lstm = config.has_cell_state();
  std::optional<ffi::AnyBuffer> c0, dc_n, seq_lengths;
  OptionalBuffers args(optional_args, "argument");
  JCR_RETURN_IF_ERROR(args.Take(lstm, "c0", &c0));
  JCR_RETURN_IF_ERROR(args.Take(lstm, "dc_n", &dc_n));
  JCR_RETURN_IF_ERROR(args.Take(args.more(), "seq_lengths", &seq_lengths));
  JCR_RETURN_IF_ERROR(args.CheckAllTaken());
  std::optional<ffi::Result<ffi::AnyBuffer>> dc0;
  OptionalBuffers rets(optional_rets, "result");
  JCR_RETURN_IF_ERROR(rets.Take(lstm, "dc0", &dc0));
  JCR_RETURN_IF_ERROR(rets.CheckAllTaken());

  RnnCall call;
  JCR_RETURN_IF_ERROR(PrepareCall(stream, scratch, config, attrs, *dx, "dx", params, seq_lengths, &call));
  const ffi::DataType dtype = call.element_type;
  const int64_t T = call.max_time, B = call.batch;
  const std::vector<int64_t> h_dims = config.state_shape(B);
  const std::vector<int64_t> c_dims = config.cell_shape(B);
  JCR_RETURN_IF_ERROR(CheckBuffer("y", y, dtype, {T, B, config.output_size()}));
  JCR_RETURN_IF_ERROR(CheckBuffer("dy", dy, dtype, {T, B, config.output_size()}));
  JCR_RETURN_IF_ERROR(CheckBuffer("h0", h0, dtype, h_dims));
  JCR_RETURN_IF_ERROR(CheckBuffer("dh_n", dh_n, dtype, h_dims));
  JCR_RETURN_IF_ERROR(CheckBuffer("dh0", *dh0, dtype, h_dims));
  if (lstm) {
    JCR_RETURN_IF_ERROR(CheckBuffer("c0", *c0, dtype, c_dims));
    JCR_RETURN_IF_ERROR(CheckBuffer("dc_n", *dc_n, dtype, c_dims));
    JCR_RETURN_IF_ERROR(CheckBuffer("dc0", **dc0, dtype, c_dims));
  }

  size_t workspace_bytes = 0, reserve_bytes = 0;
  JCR_RETURN_IF_ERROR(TempSpace(call, CUDNN_FWD_MODE_TRAINING, &workspace_bytes, &reserve_bytes));
  JCR_RETURN_IF_ERROR(CheckReserveRows("reserve_space", reserve_space, reserve_bytes));
  JCR_RETURN_IF_ERROR(ForwardReserve(stream, reserve_space, reserve_space_out));
  void* workspace = nullptr;
  JCR_RETURN_IF_ERROR(AllocateScratch(scratch, workspace_bytes, "the cuDNN workspace", &workspace));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnRNNBackwardData_v8(
      call.handle.get(), call.network.rnn.get(), call.device_seq_lengths, call.tensors.y.get(), y.untyped_data(),
      dy.untyped_data(), call.tensors.x.get(), dx->untyped_data(), call.tensors.h.get(), h0.untyped_data(),
      dh_n.untyped_data(), dh0->untyped_data(), call.tensors.c.get(), DataOrNull(c0), DataOrNull(dc_n), DataOrNull(dc0),
      params.size_bytes(), params.untyped_data(), workspace_bytes, workspace, reserve_space_out->size_bytes(),
      reserve_space_out->untyped_data()));
  return ffi::Error::Success();
}

ffi::Error RnnBackwardWeightsImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x,
                                  ffi::AnyBuffer h0, ffi::AnyBuffer y, ffi::AnyBuffer reserve_space,
                                  ffi::RemainingArgs optional_args, ffi::Result<ffi::AnyBuffer> dparams,
                                  ffi::Result<ffi::AnyBuffer> reserve_space_out, RnnAttrs attrs) {
  RnnConfig config;
  JCR_RETURN_IF_ERROR(DecodeRnnConfig(attrs.config, &config));
  std::optional<ffi::AnyBuffer> seq_lengths;
  OptionalBuffers args(optional_args, "argument");
  JCR_RETURN_IF_ERROR(args.Take(args.more(), "seq_lengths", &seq_lengths));
  JCR_RETURN_IF_ERROR(args.CheckAllTaken());

  RnnCall call;
  // dparams has the shape and dtype of params, and cuDNN only needs the weight space's size here.
  JCR_RETURN_IF_ERROR(PrepareCall(stream, scratch, config, attrs, x, "x", *dparams, seq_lengths, &call));
  const ffi::DataType dtype = call.element_type;
  const int64_t T = call.max_time, B = call.batch;
  JCR_RETURN_IF_ERROR(CheckBuffer("h0", h0, dtype, config.state_shape(B)));
  JCR_RETURN_IF_ERROR(CheckBuffer("y", y, dtype, {T, B, config.output_size()}));

  size_t workspace_bytes = 0, reserve_bytes = 0;
  JCR_RETURN_IF_ERROR(TempSpace(call, CUDNN_FWD_MODE_TRAINING, &workspace_bytes, &reserve_bytes));
  JCR_RETURN_IF_ERROR(CheckReserveRows("reserve_space", reserve_space, reserve_bytes));
  JCR_RETURN_IF_ERROR(ForwardReserve(stream, reserve_space, reserve_space_out));
  void* workspace = nullptr;
  JCR_RETURN_IF_ERROR(AllocateScratch(scratch, workspace_bytes, "the cuDNN workspace", &workspace));
  // cudnnRNNBackwardWeights_v8 accepts only CUDNN_WGRAD_MODE_ADD (cudnnWgradMode_t also has SET, which this
  // function refuses): it accumulates into dparams, so start from zero.
  JCR_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dparams->untyped_data(), 0, dparams->size_bytes(), stream));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnRNNBackwardWeights_v8(
      call.handle.get(), call.network.rnn.get(), CUDNN_WGRAD_MODE_ADD, call.device_seq_lengths, call.tensors.x.get(),
      x.untyped_data(), call.tensors.h.get(), h0.untyped_data(), call.tensors.y.get(), y.untyped_data(),
      dparams->size_bytes(), dparams->untyped_data(), workspace_bytes, workspace, reserve_space_out->size_bytes(),
      reserve_space_out->untyped_data()));
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(RnnForward, RnnForwardImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // h0
                                  .Arg<ffi::AnyBuffer>()  // params
                                  .RemainingArgs()        // [c0], [seq_lengths]
                                  .Ret<ffi::AnyBuffer>()  // y
                                  .Ret<ffi::AnyBuffer>()  // h_n
                                  .RemainingRets()        // [c_n], [reserve_space]
                                  .Attrs<ForwardAttrs>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(RnnBackwardData, RnnBackwardDataImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::AnyBuffer>()  // y
                                  .Arg<ffi::AnyBuffer>()  // dy
                                  .Arg<ffi::AnyBuffer>()  // h0
                                  .Arg<ffi::AnyBuffer>()  // dh_n
                                  .Arg<ffi::AnyBuffer>()  // params
                                  .Arg<ffi::AnyBuffer>()  // reserve_space
                                  .RemainingArgs()        // [c0, dc_n], [seq_lengths]
                                  .Ret<ffi::AnyBuffer>()  // dx
                                  .Ret<ffi::AnyBuffer>()  // dh0
                                  .Ret<ffi::AnyBuffer>()  // reserve_space (aliased)
                                  .RemainingRets()        // [dc0]
                                  .Attrs<RnnAttrs>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(RnnBackwardWeights, RnnBackwardWeightsImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // h0
                                  .Arg<ffi::AnyBuffer>()  // y
                                  .Arg<ffi::AnyBuffer>()  // reserve_space
                                  .RemainingArgs()        // [seq_lengths]
                                  .Ret<ffi::AnyBuffer>()  // dparams
                                  .Ret<ffi::AnyBuffer>()  // reserve_space (aliased)
                                  .Attrs<RnnAttrs>());

}  // namespace jax_cudnn_rnn
