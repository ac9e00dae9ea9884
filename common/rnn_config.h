// The network both native backends run, as jax_cudnn_rnn.RNNConfig describes it and with its names: decoded and
// checked once from the attributes every FFI handler of both extensions receives (the `config_attributes` of
// jax_cudnn_rnn/backends/fused/vjp.py), or from the same keywords of the modules' Python functions. The dtype comes
// from the buffers, dropout is applied between layers in Python. Each backend adds only what is its own: cuDNN its
// algorithm and math (cuda/descriptors.h), oneDNN the call's shape and the buffer's slot offsets (onednn/network.h).
#ifndef JAX_CUDNN_RNN_COMMON_RNN_CONFIG_H_
#define JAX_CUDNN_RNN_COMMON_RNN_CONFIG_H_

#include <cstdint>
#include <string_view>
#include <tuple>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn {

enum class Mode { kLstm, kGru, kRnnTanh, kRnnRelu };
enum class BiasMode { kDouble, kSingleInput, kSingleRecurrent, kNone };

// The attributes as the FFI hands them over (the strings point into the call's attributes).
struct RnnConfigAttrs {
  std::string_view mode;        // "lstm" | "gru" | "rnn_tanh" | "rnn_relu"
  int64_t num_layers;           // L
  int64_t num_units;            // H
  int64_t input_size;           // I
  int64_t proj_size;            // P; 0: no projection
  std::string_view direction;   // "unidirectional" | "bidirectional"
  std::string_view input_mode;  // "linear_input" | "skip_input" (Python resolves "auto_select")
  std::string_view bias_mode;   // "double" | "single_input" | "single_recurrent" | "none"
  double cell_clip;             // 0: no clipping (RNNConfig.cell_clip=None); else c is clipped to ±cell_clip
};

// Their attribute names, for XLA_FFI_REGISTER_STRUCT_ATTR_DECODING of a handler's attributes struct whose first
// member is an RnnConfigAttrs (the FFI builds the struct from the flat list, filling that member by brace elision).
#define JCR_RNN_CONFIG_ATTRS                                                                                   \
  ::xla::ffi::StructMember<std::string_view>("mode"), ::xla::ffi::StructMember<int64_t>("num_layers"),         \
      ::xla::ffi::StructMember<int64_t>("num_units"), ::xla::ffi::StructMember<int64_t>("input_size"),         \
      ::xla::ffi::StructMember<int64_t>("proj_size"), ::xla::ffi::StructMember<std::string_view>("direction"), \
      ::xla::ffi::StructMember<std::string_view>("input_mode"),                                                \
      ::xla::ffi::StructMember<std::string_view>("bias_mode"), ::xla::ffi::StructMember<double>("cell_clip")

// The decoded, checked network; derived sizes named as RNNConfig's properties.
struct RnnConfig {
  Mode mode = Mode::kLstm;
  int64_t num_layers = 0, num_units = 0, input_size = 0, proj_size = 0, num_directions = 1;
  bool skip_input = false;
  BiasMode bias_mode = BiasMode::kDouble;
  double cell_clip = 0;

  int64_t num_gates() const { return mode == Mode::kLstm ? 4 : mode == Mode::kGru ? 3 : 1; }  // G
  int64_t hidden_size() const { return proj_size > 0 ? proj_size : num_units; }               // width of h
  int64_t output_size() const { return num_directions * hidden_size(); }                      // width of y
  int64_t layer_input_size(int64_t layer) const { return layer == 0 ? input_size : output_size(); }
  bool has_cell_state() const { return mode == Mode::kLstm; }
  bool has_input_bias() const { return bias_mode == BiasMode::kDouble || bias_mode == BiasMode::kSingleInput; }
  bool has_recurrent_bias() const { return bias_mode == BiasMode::kDouble || bias_mode == BiasMode::kSingleRecurrent; }
  // h0 and h_n: [L * D, batch, hidden_size]; c0 and c_n (LSTM): [L * D, batch, num_units].
  std::vector<int64_t> state_shape(int64_t batch) const { return {num_layers * num_directions, batch, hidden_size()}; }
  std::vector<int64_t> cell_shape(int64_t batch) const { return {num_layers * num_directions, batch, num_units}; }

  // Every field, to compare and hash configurations (oneDNN's plan cache).
  auto fields() const {
    return std::tie(mode, num_layers, num_units, input_size, proj_size, num_directions, skip_input, bias_mode,
                    cell_clip);
  }
};

// The configuration the attributes describe; an InvalidArgument error naming the first attribute that is not a valid
// one (a string outside its choices, a size below 1, a projection or skip input that does not fit, a negative clip).
::xla::ffi::Error DecodeRnnConfig(const RnnConfigAttrs& attrs, RnnConfig* config);

}  // namespace jax_cudnn_rnn

#endif  // JAX_CUDNN_RNN_COMMON_RNN_CONFIG_H_
