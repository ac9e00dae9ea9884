// Turns CUDA and cuDNN statuses into early-returned xla::ffi::Error values (in handlers) or C++ exceptions (in the
// pybind11 module), each naming the failing expression, the call site and the library's own message.
#ifndef JAX_CUDNN_RNN_FFI_HELPERS_H_
#define JAX_CUDNN_RNN_FFI_HELPERS_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "ffi_args.h"  // JCR_RETURN_IF_ERROR
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn {

inline std::string StatusMessage(const char* library, const char* status, const char* expr, const char* file,
                                 int line) {
  return std::string(library) + " call `" + expr + "` failed at " + file + ":" + std::to_string(line) + ": " + status;
}

// For a status reported without the macros below (handle_pool.cc).
inline std::string CudnnStatusMessage(cudnnStatus_t status, const char* expr, const char* file, int line) {
  return StatusMessage("cuDNN", cudnnGetErrorString(status), expr, file, line);
}

inline std::string CudaStatusMessage(cudaError_t status, const char* expr, const char* file, int line) {
  return StatusMessage("CUDA", cudaGetErrorString(status), expr, file, line);
}

}  // namespace jax_cudnn_rnn

// Returns an ffi::Error (Internal) from the enclosing function where the status `expr` of `library` is not `success`;
// the message names `text` (the expression as written), the call site and `describe`'s text for the status.
#define JCR_LIBRARY_RETURN_IF_ERROR(library, success, describe, expr, text)                          \
  do {                                                                                               \
    const auto jcr_status_ = (expr);                                                                 \
    if (jcr_status_ != (success)) {                                                                  \
      return ::xla::ffi::Error::Internal(                                                            \
          ::jax_cudnn_rnn::StatusMessage(library, describe(jcr_status_), text, __FILE__, __LINE__)); \
    }                                                                                                \
  } while (0)

#define JCR_CUDNN_RETURN_IF_ERROR(expr) \
  JCR_LIBRARY_RETURN_IF_ERROR("cuDNN", CUDNN_STATUS_SUCCESS, cudnnGetErrorString, expr, #expr)
#define JCR_CUDA_RETURN_IF_ERROR(expr) JCR_LIBRARY_RETURN_IF_ERROR("CUDA", cudaSuccess, cudaGetErrorString, expr, #expr)

#endif  // JAX_CUDNN_RNN_FFI_HELPERS_H_
