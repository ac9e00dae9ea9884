#include "descriptors.h"

#include <limits>
#include <string>

#include "ffi_helpers.h"

namespace jax_cudnn_rnn {

namespace ffi = ::xla::ffi;

ffi::Error CreateDescriptor(RnnDescriptor* out) {
  cudnnRNNDescriptor_t descriptor = nullptr;
  JCR_CUDNN_RETURN_IF_ERROR(cudnnCreateRNNDescriptor(&descriptor));
  out->reset(descriptor);
  return ffi::Error::Success();
}

ffi::Error CreateDescriptor(RnnDataDescriptor* out) {
  cudnnRNNDataDescriptor_t descriptor = nullptr;
  JCR_CUDNN_RETURN_IF_ERROR(cudnnCreateRNNDataDescriptor(&descriptor));
  out->reset(descriptor);
  return ffi::Error::Success();
}

ffi::Error CreateDescriptor(TensorDescriptor* out) {
  cudnnTensorDescriptor_t descriptor = nullptr;
  JCR_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&descriptor));
  out->reset(descriptor);
  return ffi::Error::Success();
}

ffi::Error CreateDescriptor(DropoutDescriptor* out) {
  cudnnDropoutDescriptor_t descriptor = nullptr;
  JCR_CUDNN_RETURN_IF_ERROR(cudnnCreateDropoutDescriptor(&descriptor));
  out->reset(descriptor);
  return ffi::Error::Success();
}

std::string CudnnVersionString(size_t version) {
  return std::to_string(version / 10000) + "." + std::to_string(version % 10000 / 100) + "." +
         std::to_string(version % 100);
}

ffi::Error CudnnDataType(ffi::DataType dtype, const char* argument, cudnnDataType_t* out) {
  switch (dtype) {
    case ffi::DataType::F16:
      *out = CUDNN_DATA_HALF;
      return ffi::Error::Success();
    case ffi::DataType::BF16:
      // A run-time check, not a compile-time one: isolated builds compile against the oldest supported headers
      // (cuDNN 9.12, pyproject.toml), which already define CUDNN_DATA_BFLOAT16 (= 9 since cuDNN 9.0), and must still
      // run bfloat16 where the loaded libcudnn is new enough.
      if (cudnnGetVersion() < kBfloat16RnnCudnnVersion) {
        return ffi::Error::InvalidArgument(std::string(argument) + " is bfloat16, which cuDNN RNNs accept from "
                                           "cuDNN 9.13 on; the loaded libcudnn is " +
                                           CudnnVersionString(cudnnGetVersion()));
      }
      *out = CUDNN_DATA_BFLOAT16;
      return ffi::Error::Success();
    case ffi::DataType::F32:
      *out = CUDNN_DATA_FLOAT;
      return ffi::Error::Success();
    case ffi::DataType::F64:
      *out = CUDNN_DATA_DOUBLE;
      return ffi::Error::Success();
    default:
      return ffi::Error::InvalidArgument(std::string(argument) + " has XLA element type " +
                                         std::to_string(static_cast<int>(dtype)) +
                                         "; expected float16, bfloat16, float32 or float64");
  }
}

namespace {

ffi::Error Invalid(const std::string& message) { return ffi::Error::InvalidArgument(message); }

ffi::Error CellMode(std::string_view mode, cudnnRNNMode_t* out) {
  if (mode == "lstm") *out = CUDNN_LSTM;
  else if (mode == "gru") *out = CUDNN_GRU;
  else if (mode == "rnn_tanh") *out = CUDNN_RNN_TANH;
  else if (mode == "rnn_relu") *out = CUDNN_RNN_RELU;
  else return Invalid("mode is '" + std::string(mode) + "'; expected lstm, gru, rnn_tanh or rnn_relu");
  return ffi::Error::Success();
}

ffi::Error BiasMode(std::string_view bias_mode, cudnnRNNBiasMode_t* out) {
  if (bias_mode == "double") *out = CUDNN_RNN_DOUBLE_BIAS;
  else if (bias_mode == "single_input") *out = CUDNN_RNN_SINGLE_INP_BIAS;
  else if (bias_mode == "single_recurrent") *out = CUDNN_RNN_SINGLE_REC_BIAS;
  else if (bias_mode == "none") *out = CUDNN_RNN_NO_BIAS;
  else return Invalid("bias_mode is '" + std::string(bias_mode) + "'; expected double, single_input, "
                      "single_recurrent or none");
  return ffi::Error::Success();
}

ffi::Error DirectionMode(std::string_view direction, cudnnDirectionMode_t* out) {
  if (direction == "unidirectional") *out = CUDNN_UNIDIRECTIONAL;
  else if (direction == "bidirectional") *out = CUDNN_BIDIRECTIONAL;
  else return Invalid("direction is '" + std::string(direction) + "'; expected unidirectional or bidirectional");
  return ffi::Error::Success();
}

ffi::Error InputMode(std::string_view input_mode, cudnnRNNInputMode_t* out) {
  if (input_mode == "linear_input") *out = CUDNN_LINEAR_INPUT;
  else if (input_mode == "skip_input") *out = CUDNN_SKIP_INPUT;
  else return Invalid("input_mode is '" + std::string(input_mode) + "'; expected linear_input or skip_input");
  return ffi::Error::Success();
}

ffi::Error Algorithm(std::string_view algo, bool padded, cudnnRNNAlgo_t* out) {
  if (algo == "standard") *out = CUDNN_RNN_ALGO_STANDARD;
  else if (algo == "persist_static") *out = CUDNN_RNN_ALGO_PERSIST_STATIC;
  else if (algo == "persist_static_small_h") *out = CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H;
  else return Invalid("algo is '" + std::string(algo) + "'; expected standard, persist_static or "
                      "persist_static_small_h");
  if (padded && *out != CUDNN_RNN_ALGO_STANDARD) {
    return Invalid("algo is '" + std::string(algo) + "', but the call has seq_lengths, which only the standard "
                   "algorithm supports");
  }
  return ffi::Error::Success();
}

ffi::Error CheckInt32(const char* name, int64_t value, int64_t minimum) {
  if (value < minimum || value > std::numeric_limits<int32_t>::max()) {
    return Invalid(std::string(name) + " is " + std::to_string(value) + "; expected an int32 >= " +
                   std::to_string(minimum));
  }
  return ffi::Error::Success();
}

}  // namespace

ffi::Error MakeRnnNetwork(cudnnHandle_t handle, const RnnAttrs& attrs, cudnnDataType_t data_type, bool padded,
                          RnnNetwork* out) {
  cudnnRNNMode_t cell_mode;
  cudnnRNNBiasMode_t bias_mode;
  cudnnDirectionMode_t direction;
  cudnnRNNInputMode_t input_mode;
  cudnnRNNAlgo_t algo;
  JCR_RETURN_IF_ERROR(CellMode(attrs.mode, &cell_mode));
  JCR_RETURN_IF_ERROR(Algorithm(attrs.algo, padded, &algo));
  JCR_RETURN_IF_ERROR(BiasMode(attrs.bias_mode, &bias_mode));
  JCR_RETURN_IF_ERROR(DirectionMode(attrs.direction, &direction));
  JCR_RETURN_IF_ERROR(InputMode(attrs.input_mode, &input_mode));
  JCR_RETURN_IF_ERROR(CheckInt32("num_layers", attrs.num_layers, 1));
  JCR_RETURN_IF_ERROR(CheckInt32("num_units", attrs.num_units, 1));
  JCR_RETURN_IF_ERROR(CheckInt32("input_size", attrs.input_size, 1));
  JCR_RETURN_IF_ERROR(CheckInt32("proj_size", attrs.proj_size, 0));

  // Strict f32 unless TF32 is allowed; half types compute in f32 on tensor cores; f64 computes in f64.
  cudnnDataType_t math_precision = data_type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnMathType_t math_type;
  switch (data_type) {
    case CUDNN_DATA_FLOAT:
      math_type = attrs.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
      break;
    case CUDNN_DATA_DOUBLE:
      math_type = CUDNN_DEFAULT_MATH;
      break;
    default:
      math_type = CUDNN_TENSOR_OP_MATH;
      break;
  }

  JCR_RETURN_IF_ERROR(CreateDescriptor(&out->dropout));
  // No states are needed at probability 0 (PyTorch's "no dropout" descriptor does the same).
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetDropoutDescriptor(out->dropout.get(), handle, 0.0f, nullptr, 0, 0));
  JCR_RETURN_IF_ERROR(CreateDescriptor(&out->rnn));
  // The weight space is the same for every algorithm (PyTorch flattens its weights with the standard algorithm and runs
  // them with the persistent ones; the GPU tests run every algorithm on buffers laid out for the standard one).
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetRNNDescriptor_v8(
      out->rnn.get(), algo, cell_mode, bias_mode, direction, input_mode, data_type,
      math_precision, math_type, static_cast<int32_t>(attrs.input_size), static_cast<int32_t>(attrs.num_units),
      static_cast<int32_t>(attrs.proj_size > 0 ? attrs.proj_size : attrs.num_units),
      static_cast<int32_t>(attrs.num_layers), out->dropout.get(),
      padded ? CUDNN_RNN_PADDED_IO_ENABLED : CUDNN_RNN_PADDED_IO_DISABLED));
  if (attrs.cell_clip > 0) {
    JCR_CUDNN_RETURN_IF_ERROR(
        cudnnRNNSetClip_v9(out->rnn.get(), CUDNN_RNN_CLIP_MINMAX, -attrs.cell_clip, attrs.cell_clip));
  }
  JCR_CUDNN_RETURN_IF_ERROR(cudnnGetRNNWeightSpaceSize(handle, out->rnn.get(), &out->weight_space_bytes));
  return ffi::Error::Success();
}

ffi::Error MakeRnnTensors(const RnnAttrs& attrs, cudnnDataType_t data_type, int64_t max_seq_length,
                          int64_t batch_size, const std::vector<int32_t>& seq_lengths, bool padded,
                          RnnTensors* out) {
  JCR_RETURN_IF_ERROR(CheckInt32("max_time", max_seq_length, 1));
  JCR_RETURN_IF_ERROR(CheckInt32("batch", batch_size, 1));
  if (seq_lengths.size() != static_cast<size_t>(batch_size)) {
    return Invalid("seq_lengths has " + std::to_string(seq_lengths.size()) + " entries; expected batch = " +
                   std::to_string(batch_size));
  }
  // Padding positions of y are filled with this value, read as the data type: all-zero bytes are 0 in every one.
  double zero_fill = 0.0;
  void* fill = padded ? &zero_fill : nullptr;
  const cudnnRNNDataLayout_t layout =
      padded ? CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED : CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED;
  const int T = static_cast<int>(max_seq_length), B = static_cast<int>(batch_size);
  JCR_RETURN_IF_ERROR(CreateDescriptor(&out->x));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetRNNDataDescriptor(out->x.get(), data_type,
                                                      layout, T, B,
                                                      static_cast<int>(attrs.input_size), seq_lengths.data(), fill));
  JCR_RETURN_IF_ERROR(CreateDescriptor(&out->y));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetRNNDataDescriptor(out->y.get(), data_type,
                                                      layout, T, B,
                                                      static_cast<int>(attrs.output_size()), seq_lengths.data(),
                                                      fill));
  const int num_states = static_cast<int>(attrs.num_layers * attrs.num_directions());
  const int hidden = static_cast<int>(attrs.hidden_size()), units = static_cast<int>(attrs.num_units);
  const int h_dims[3] = {num_states, B, hidden}, h_strides[3] = {B * hidden, hidden, 1};
  const int c_dims[3] = {num_states, B, units}, c_strides[3] = {B * units, units, 1};
  JCR_RETURN_IF_ERROR(CreateDescriptor(&out->h));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetTensorNdDescriptor(out->h.get(), data_type, 3, h_dims, h_strides));
  JCR_RETURN_IF_ERROR(CreateDescriptor(&out->c));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetTensorNdDescriptor(out->c.get(), data_type, 3, c_dims, c_strides));
  return ffi::Error::Success();
}

}  // namespace jax_cudnn_rnn
