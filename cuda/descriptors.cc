#include "descriptors.h"

#include <limits>
#include <string>

#include "ffi_helpers.h"

namespace jax_cudnn_rnn {

namespace ffi = ::xla::ffi;

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
        return ffi::Error::InvalidArgument(
            std::string(argument) +
            " is bfloat16, which cuDNN RNNs accept from cuDNN 9.13 on; the loaded libcudnn is " +
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
      return ffi::Error::InvalidArgument(std::string(argument) + " has dtype " + DataTypeName(dtype) +
                                         "; expected float16, bfloat16, float32 or float64");
  }
}

namespace {

ffi::Error Invalid(const std::string& message) { return ffi::Error::InvalidArgument(message); }

cudnnRNNMode_t CudnnMode(Mode mode) {
  switch (mode) {
    case Mode::kLstm:
      return CUDNN_LSTM;
    case Mode::kGru:
      return CUDNN_GRU;
    case Mode::kRnnTanh:
      return CUDNN_RNN_TANH;
    case Mode::kRnnRelu:
      return CUDNN_RNN_RELU;
  }
  return CUDNN_LSTM;  // not reached: DecodeRnnConfig makes every Mode one of the above
}

cudnnRNNBiasMode_t CudnnBiasMode(BiasMode bias_mode) {
  switch (bias_mode) {
    case BiasMode::kDouble:
      return CUDNN_RNN_DOUBLE_BIAS;
    case BiasMode::kSingleInput:
      return CUDNN_RNN_SINGLE_INP_BIAS;
    case BiasMode::kSingleRecurrent:
      return CUDNN_RNN_SINGLE_REC_BIAS;
    case BiasMode::kNone:
      return CUDNN_RNN_NO_BIAS;
  }
  return CUDNN_RNN_DOUBLE_BIAS;  // not reached
}

ffi::Error Algorithm(std::string_view algorithm, bool padded, cudnnRNNAlgo_t* out) {
  if (algorithm == "standard") *out = CUDNN_RNN_ALGO_STANDARD;
  else if (algorithm == "persist_static") *out = CUDNN_RNN_ALGO_PERSIST_STATIC;
  else if (algorithm == "persist_static_small_h") *out = CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H;
  else
    return Invalid("algorithm is '" + std::string(algorithm) +
                   "'; expected standard, persist_static or persist_static_small_h");
  if (padded && *out != CUDNN_RNN_ALGO_STANDARD) {
    return Invalid("algorithm is '" + std::string(algorithm) +
                   "', but the call has seq_lengths, which only the standard algorithm supports");
  }
  return ffi::Error::Success();
}

ffi::Error CheckInt32(const char* name, int64_t value, int64_t minimum) {
  if (value < minimum || value > std::numeric_limits<int32_t>::max()) {
    return Invalid(std::string(name) + " is " + std::to_string(value) +
                   "; expected an int32 >= " + std::to_string(minimum));
  }
  return ffi::Error::Success();
}

}  // namespace

ffi::Error MakeRnnNetwork(cudnnHandle_t handle, const RnnConfig& config, bool allow_tf32, std::string_view algorithm,
                          cudnnDataType_t data_type, bool padded, RnnNetwork* out) {
  const cudnnRNNMode_t cell_mode = CudnnMode(config.mode);
  const cudnnRNNBiasMode_t bias_mode = CudnnBiasMode(config.bias_mode);
  const cudnnDirectionMode_t direction = config.num_directions == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL;
  const cudnnRNNInputMode_t input_mode = config.skip_input ? CUDNN_SKIP_INPUT : CUDNN_LINEAR_INPUT;
  cudnnRNNAlgo_t algo;
  JCR_RETURN_IF_ERROR(Algorithm(algorithm, padded, &algo));
  JCR_RETURN_IF_ERROR(CheckInt32("num_layers", config.num_layers, 1));
  JCR_RETURN_IF_ERROR(CheckInt32("num_units", config.num_units, 1));
  JCR_RETURN_IF_ERROR(CheckInt32("input_size", config.input_size, 1));
  JCR_RETURN_IF_ERROR(CheckInt32("proj_size", config.proj_size, 0));

  // Strict f32 unless TF32 is allowed; half types compute in f32 on tensor cores; f64 computes in f64.
  cudnnDataType_t math_precision = data_type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnMathType_t math_type;
  switch (data_type) {
    case CUDNN_DATA_FLOAT:
      math_type = allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
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
      out->rnn.get(), algo, cell_mode, bias_mode, direction, input_mode, data_type, math_precision, math_type,
      static_cast<int32_t>(config.input_size), static_cast<int32_t>(config.num_units),
      static_cast<int32_t>(config.hidden_size()), static_cast<int32_t>(config.num_layers), out->dropout.get(),
      padded ? CUDNN_RNN_PADDED_IO_ENABLED : CUDNN_RNN_PADDED_IO_DISABLED));
  if (config.cell_clip > 0) {
    JCR_CUDNN_RETURN_IF_ERROR(
        cudnnRNNSetClip_v9(out->rnn.get(), CUDNN_RNN_CLIP_MINMAX, -config.cell_clip, config.cell_clip));
  }
  JCR_CUDNN_RETURN_IF_ERROR(cudnnGetRNNWeightSpaceSize(handle, out->rnn.get(), &out->weight_space_bytes));
  return ffi::Error::Success();
}

ffi::Error MakeRnnTensors(const RnnConfig& config, cudnnDataType_t data_type, int64_t max_time, int64_t batch,
                          const std::vector<int32_t>& seq_lengths, bool padded, RnnTensors* out) {
  JCR_RETURN_IF_ERROR(CheckInt32("max_time", max_time, 1));
  JCR_RETURN_IF_ERROR(CheckInt32("batch", batch, 1));
  if (seq_lengths.size() != static_cast<size_t>(batch)) {
    return Invalid("seq_lengths has " + std::to_string(seq_lengths.size()) +
                   " entries; expected batch = " + std::to_string(batch));
  }
  // Padding positions of y are filled with this value, read as the data type: all-zero bytes are 0 in every one.
  double zero_fill = 0.0;
  void* fill = padded ? &zero_fill : nullptr;
  const cudnnRNNDataLayout_t layout =
      padded ? CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED : CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED;
  const int T = static_cast<int>(max_time), B = static_cast<int>(batch);
  JCR_RETURN_IF_ERROR(CreateDescriptor(&out->x));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetRNNDataDescriptor(out->x.get(), data_type, layout, T, B,
                                                      static_cast<int>(config.input_size), seq_lengths.data(), fill));
  JCR_RETURN_IF_ERROR(CreateDescriptor(&out->y));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetRNNDataDescriptor(
      out->y.get(), data_type, layout, T, B, static_cast<int>(config.output_size()), seq_lengths.data(), fill));
  const int num_states = static_cast<int>(config.num_layers * config.num_directions);
  const int hidden = static_cast<int>(config.hidden_size()), units = static_cast<int>(config.num_units);
  const int h_dims[3] = {num_states, B, hidden}, h_strides[3] = {B * hidden, hidden, 1};
  const int c_dims[3] = {num_states, B, units}, c_strides[3] = {B * units, units, 1};
  JCR_RETURN_IF_ERROR(CreateDescriptor(&out->h));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetTensorNdDescriptor(out->h.get(), data_type, 3, h_dims, h_strides));
  JCR_RETURN_IF_ERROR(CreateDescriptor(&out->c));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetTensorNdDescriptor(out->c.get(), data_type, 3, c_dims, c_strides));
  return ffi::Error::Success();
}

}  // namespace jax_cudnn_rnn
