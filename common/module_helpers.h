// What the two pybind11 modules (cuda/module.cc, onednn/module.cc) share: the FFI handlers as capsules for
// jax.ffi.register_ffi_target, ffi::Errors as Python exceptions, dtype names as Python spells them, and functions
// whose first keywords are the network's, with the names, spellings and checks of the handlers' attributes
// (common/rnn_config.h). Header-only: each extension compiles its own copy.
#ifndef JAX_CUDNN_RNN_COMMON_MODULE_HELPERS_H_
#define JAX_CUDNN_RNN_COMMON_MODULE_HELPERS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "rnn_config.h"
#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn {

// Defines `registrations()` of `module`: each handler by its FFI target name, as a capsule for
// jax.ffi.register_ffi_target.
inline void DefRegistrations(pybind11::module_& module,
                             std::vector<std::pair<const char*, XLA_FFI_Handler*>> handlers) {
  module.def("registrations", [handlers]() {
    pybind11::dict targets;
    for (const auto& [name, handler] : handlers) targets[name] = pybind11::capsule(reinterpret_cast<void*>(handler));
    return targets;
  });
}

// Defines the module's record of what it was compiled against: JAXLIB_BUILD_VERSION (the jaxlib whose XLA FFI headers
// it used; JCR_JAXLIB_BUILD_VERSION, set by cmake/jcr_helpers.cmake) and XLA_FFI_API_BUILD_VERSION (those headers' FFI
// C API version, (major, minor)), which the Python loader compares with the running jaxlib's before it registers any
// handler: XLA refuses a handler newer than itself (jax_cudnn_rnn/backends/native_extension.py).
inline void DefBuildRecord(pybind11::module_& module) {
  module.attr("JAXLIB_BUILD_VERSION") = JCR_JAXLIB_BUILD_VERSION;
  module.attr("XLA_FFI_API_BUILD_VERSION") = pybind11::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
}

// A failed ffi::Error as a C++ exception that pybind11 turns into a Python one (std::runtime_error: RuntimeError,
// std::invalid_argument: ValueError), with the same message.
template <typename Exception = std::runtime_error>
void ThrowIfError(const ::xla::ffi::Error& error) {
  if (error.failure()) throw Exception(error.message());
}

// The XLA element type of a floating dtype's name (numpy's spelling: RNNConfig.dtype.name); ValueError otherwise.
inline ::xla::ffi::DataType DataTypeFromName(const std::string& dtype) {
  if (dtype == "float16") return ::xla::ffi::DataType::F16;
  if (dtype == "bfloat16") return ::xla::ffi::DataType::BF16;
  if (dtype == "float32") return ::xla::ffi::DataType::F32;
  if (dtype == "float64") return ::xla::ffi::DataType::F64;
  throw std::invalid_argument("dtype is '" + dtype + "'; expected float16, bfloat16, float32 or float64");
}

// Defines the Python function `name` of `module`: its keywords are the network's (mode, num_layers, num_units,
// input_size, proj_size, direction, input_mode, bias_mode, cell_clip: RnnConfigAttrs) followed by `extra`'s
// (pybind11::arg for each of `fn`'s other parameters, a docstring); it calls `fn` with the decoded configuration, and
// raises ValueError where the network's keywords do not describe a valid one.
template <typename Result, typename... Rest, typename... Extra>
void DefWithConfig(pybind11::module_& module, const char* name, Result (*fn)(const RnnConfig&, Rest...),
                   const Extra&... extra) {
  namespace py = ::pybind11;
  module.def(
      name,
      [fn](const std::string& mode, int64_t num_layers, int64_t num_units, int64_t input_size, int64_t proj_size,
           const std::string& direction, const std::string& input_mode, const std::string& bias_mode, double cell_clip,
           Rest... rest) -> Result {
        RnnConfig config;
        ThrowIfError<std::invalid_argument>(DecodeRnnConfig(
            {mode, num_layers, num_units, input_size, proj_size, direction, input_mode, bias_mode, cell_clip},
            &config));
        return fn(config, std::forward<Rest>(rest)...);
      },
      py::arg("mode"), py::arg("num_layers"), py::arg("num_units"), py::arg("input_size"), py::arg("proj_size"),
      py::arg("direction"), py::arg("input_mode"), py::arg("bias_mode"), py::arg("cell_clip"), extra...);
}

}  // namespace jax_cudnn_rnn

#endif  // JAX_CUDNN_RNN_COMMON_MODULE_HELPERS_H_
