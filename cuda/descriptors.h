// RAII wrappers for cuDNN descriptors and the one function that turns an RNN's attributes into descriptors, shared by
// the FFI handlers and the pybind11 module so both describe a network identically.
#ifndef JAX_CUDNN_RNN_DESCRIPTORS_H_
#define JAX_CUDNN_RNN_DESCRIPTORS_H_

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ffi_helpers.h"
#include "rnn_config.h"
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn {

// A cuDNN descriptor owned by a unique_ptr: `Create` makes one (CreateDescriptor), `Destroy` frees it.
template <typename Descriptor, cudnnStatus_t (*Create)(Descriptor*), cudnnStatus_t (*Destroy)(Descriptor)>
struct DescriptorDeleter {
  static constexpr auto create = Create;
  void operator()(Descriptor descriptor) const { Destroy(descriptor); }
};

template <typename Descriptor, cudnnStatus_t (*Create)(Descriptor*), cudnnStatus_t (*Destroy)(Descriptor)>
using UniqueDescriptor =
    std::unique_ptr<std::remove_pointer_t<Descriptor>, DescriptorDeleter<Descriptor, Create, Destroy>>;

using RnnDescriptor = UniqueDescriptor<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using RnnDataDescriptor =
    UniqueDescriptor<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor>;
using TensorDescriptor =
    UniqueDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using DropoutDescriptor =
    UniqueDescriptor<cudnnDropoutDescriptor_t, cudnnCreateDropoutDescriptor, cudnnDestroyDropoutDescriptor>;

// Makes `*out` a new descriptor of its kind.
template <typename Unique>
::xla::ffi::Error CreateDescriptor(Unique* out) {
  typename Unique::pointer descriptor = nullptr;
  JCR_LIBRARY_RETURN_IF_ERROR("cuDNN", CUDNN_STATUS_SUCCESS, cudnnGetErrorString,
                              Unique::deleter_type::create(&descriptor), "cudnnCreate*Descriptor(&descriptor)");
  out->reset(descriptor);
  return ::xla::ffi::Error::Success();
}

// The handlers' attributes: the network (common/rnn_config.h) and how cuDNN runs it.
struct RnnAttrs {
  RnnConfigAttrs config;
  bool allow_tf32;             // float32 only: let cuDNN use TF32 tensor cores (else strict FMA math)
  std::string_view algorithm;  // "standard" | "persist_static" | "persist_static_small_h"
                               // (jax_cudnn_rnn/backends/cudnn/algorithm.py)
};

// The forward handler's attributes: those plus whether to run in training mode (reserve space output).
struct ForwardAttrs : RnnAttrs {
  bool training;
};

// The first cuDNN whose RNNs accept bfloat16 data (PyTorch guards on the same version), as cudnnGetVersion() reads.
// jax_cudnn_rnn/backends/cudnn/backend.py applies it (BFLOAT16_CUDNN_VERSION), with compute capability >= 8.0, while a
// call is traced, so that rnn(implementation=None) runs the xla implementation instead; this check stays for the
// callers no Python stands in front of (the module's weight_params and temp_space_sizes, a hand-made custom call).
inline constexpr size_t kBfloat16RnnCudnnVersion = 91300;

// cuDNN's integer version (major * 10000 + minor * 100 + patch) as "9.13.0".
std::string CudnnVersionString(size_t version);

// cuDNN's data type for an XLA element type; an error naming `argument` for anything else, and for bfloat16 when the
// loaded libcudnn is older than kBfloat16RnnCudnnVersion.
::xla::ffi::Error CudnnDataType(::xla::ffi::DataType dtype, const char* argument, cudnnDataType_t* out);

// The RNN descriptor and the dropout descriptor it points to (no dropout: inter-layer dropout is applied by the
// Python side layer by layer, so that it matches the CPU implementation bit for bit).
struct RnnNetwork {
  DropoutDescriptor dropout;  // declared first: destroyed after `rnn`, which refers to it
  RnnDescriptor rnn;
  size_t weight_space_bytes = 0;  // cudnnGetRNNWeightSpaceSize
};

// `padded`: the call has seq_lengths, so x and y use the SEQ_MAJOR_UNPACKED layout, which needs cuDNN's padded I/O.
// Without seq_lengths every sequence is full length, and the same [T, B, *] memory is also the SEQ_MAJOR_PACKED layout
// with padded I/O off, which this library uses then (PyTorch describes dense input as SEQ_MAJOR_UNPACKED with padded
// I/O enabled instead; on an H100 both layouts gave the same results and no timing difference beyond noise). The
// persistent algorithms support no per-sequence lengths, so a padded network must use the algorithm "standard".
// Forward and backward of one call must agree on both (both derive them from the same attributes and seq_lengths).
::xla::ffi::Error MakeRnnNetwork(cudnnHandle_t handle, const RnnConfig& config, bool allow_tf32,
                                 std::string_view algorithm, cudnnDataType_t data_type, bool padded, RnnNetwork* out);

// Descriptors of x [T, B, I], y [T, B, D*hidden], h [L*D, B, hidden] and c [L*D, B, H] for one call; `seq_lengths`
// (host, B entries, each in [1, T]; all T unless `padded`) is baked into the x and y descriptors.
struct RnnTensors {
  RnnDataDescriptor x;
  RnnDataDescriptor y;
  TensorDescriptor h;
  TensorDescriptor c;
};

::xla::ffi::Error MakeRnnTensors(const RnnConfig& config, cudnnDataType_t data_type, int64_t max_time, int64_t batch,
                                 const std::vector<int32_t>& seq_lengths, bool padded, RnnTensors* out);

}  // namespace jax_cudnn_rnn

#endif  // JAX_CUDNN_RNN_DESCRIPTORS_H_
