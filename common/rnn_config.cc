#include "rnn_config.h"

#include <cmath>
#include <cstddef>
#include <string>
#include <utility>

#include "ffi_args.h"

namespace jax_cudnn_rnn {

namespace ffi = ::xla::ffi;

namespace {

ffi::Error Invalid(const std::string& message) { return ffi::Error::InvalidArgument(message); }

// `*out` is the value of the choice that `value` spells; else an error listing the choices as `expected`.
template <typename T, size_t N>
ffi::Error Choose(const char* name, std::string_view value, const std::pair<const char*, T> (&choices)[N],
                  const char* expected, T* out) {
  for (const auto& [spelling, choice] : choices) {
    if (value == spelling) {
      *out = choice;
      return ffi::Error::Success();
    }
  }
  return Invalid(std::string(name) + " is '" + std::string(value) + "'; expected " + expected);
}

ffi::Error CheckPositive(const char* name, int64_t value) {
  if (value < 1) return Invalid(std::string(name) + " is " + std::to_string(value) + "; expected >= 1");
  return ffi::Error::Success();
}

}  // namespace

ffi::Error DecodeRnnConfig(const RnnConfigAttrs& attrs, RnnConfig* config) {
  static const std::pair<const char*, Mode> kModes[] = {
      {"lstm", Mode::kLstm}, {"gru", Mode::kGru}, {"rnn_tanh", Mode::kRnnTanh}, {"rnn_relu", Mode::kRnnRelu}};
  static const std::pair<const char*, int64_t> kDirections[] = {{"unidirectional", 1}, {"bidirectional", 2}};
  static const std::pair<const char*, bool> kInputModes[] = {{"linear_input", false}, {"skip_input", true}};
  static const std::pair<const char*, BiasMode> kBiasModes[] = {{"double", BiasMode::kDouble},
                                                                {"single_input", BiasMode::kSingleInput},
                                                                {"single_recurrent", BiasMode::kSingleRecurrent},
                                                                {"none", BiasMode::kNone}};
  RnnConfig result;
  JCR_RETURN_IF_ERROR(Choose("mode", attrs.mode, kModes, "lstm, gru, rnn_tanh or rnn_relu", &result.mode));
  JCR_RETURN_IF_ERROR(
      Choose("direction", attrs.direction, kDirections, "unidirectional or bidirectional", &result.num_directions));
  JCR_RETURN_IF_ERROR(
      Choose("input_mode", attrs.input_mode, kInputModes, "linear_input or skip_input", &result.skip_input));
  JCR_RETURN_IF_ERROR(Choose("bias_mode", attrs.bias_mode, kBiasModes, "double, single_input, single_recurrent or none",
                             &result.bias_mode));
  JCR_RETURN_IF_ERROR(CheckPositive("num_layers", attrs.num_layers));
  JCR_RETURN_IF_ERROR(CheckPositive("num_units", attrs.num_units));
  JCR_RETURN_IF_ERROR(CheckPositive("input_size", attrs.input_size));
  if (attrs.proj_size < 0 || attrs.proj_size >= attrs.num_units ||
      (attrs.proj_size > 0 && result.mode != Mode::kLstm)) {
    return Invalid("proj_size is " + std::to_string(attrs.proj_size) + "; expected 0, or for an LSTM a value in [1, " +
                   std::to_string(attrs.num_units) + ") = [1, num_units)");
  }
  if (result.skip_input && attrs.input_size != attrs.num_units) {
    return Invalid("input_mode is 'skip_input', which needs input_size == num_units; got input_size " +
                   std::to_string(attrs.input_size) + " and num_units " + std::to_string(attrs.num_units));
  }
  if (!(std::isfinite(attrs.cell_clip) && attrs.cell_clip >= 0)) {
    return Invalid("cell_clip is " + std::to_string(attrs.cell_clip) + "; expected a finite value >= 0 (0: none)");
  }
  result.num_layers = attrs.num_layers;
  result.num_units = attrs.num_units;
  result.input_size = attrs.input_size;
  result.proj_size = attrs.proj_size;
  result.cell_clip = attrs.cell_clip;
  *config = result;
  return ffi::Error::Success();
}

}  // namespace jax_cudnn_rnn
