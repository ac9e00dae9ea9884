// Argument checks shared by the native backends' FFI handlers (cuda/, onednn/): a handler checks every buffer's
// element type and shape against what its attributes describe before a library reads or writes it, so a mismatch is
// an ffi::Error naming the buffer, never undefined behaviour. Header-only: each extension compiles its own copy.
#ifndef JAX_CUDNN_RNN_COMMON_FFI_CHECKS_H_
#define JAX_CUDNN_RNN_COMMON_FFI_CHECKS_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn {

// Propagates an ffi::Error returned by a helper.
#define JCR_RETURN_IF_ERROR(expr)                  \
  do {                                             \
    ::xla::ffi::Error jcr_error_ = (expr);         \
    if (jcr_error_.failure()) return jcr_error_;   \
  } while (0)

inline std::string ShapeString(::xla::ffi::Span<const int64_t> dims) {
  std::string text = "(";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + (dims.size() == 1 ? ",)" : ")");
}

inline ::xla::ffi::Error CheckBuffer(const char* name, ::xla::ffi::DataType dtype,
                                     ::xla::ffi::Span<const int64_t> dims, ::xla::ffi::DataType expected_dtype,
                                     std::vector<int64_t> expected_dims) {
  if (dtype != expected_dtype) {
    return ::xla::ffi::Error::InvalidArgument(std::string(name) + " has XLA element type " +
                                              std::to_string(static_cast<int>(dtype)) + "; expected " +
                                              std::to_string(static_cast<int>(expected_dtype)));
  }
  if (!(dims.size() == expected_dims.size() && std::equal(dims.begin(), dims.end(), expected_dims.begin()))) {
    return ::xla::ffi::Error::InvalidArgument(
        std::string(name) + " has shape " + ShapeString(dims) + "; expected " +
        ShapeString(::xla::ffi::Span<const int64_t>(expected_dims.data(), expected_dims.size())));
  }
  return ::xla::ffi::Error::Success();
}

inline ::xla::ffi::Error CheckBuffer(const char* name, const ::xla::ffi::AnyBuffer& buffer,
                                     ::xla::ffi::DataType expected_dtype, std::vector<int64_t> expected_dims) {
  return CheckBuffer(name, buffer.element_type(), buffer.dimensions(), expected_dtype, std::move(expected_dims));
}

}  // namespace jax_cudnn_rnn

#endif  // JAX_CUDNN_RNN_COMMON_FFI_CHECKS_H_
