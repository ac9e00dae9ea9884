// Turns CUDA and cuDNN statuses into early-returned xla::ffi::Error values (in handlers) or C++ exceptions (in the
// pybind11 module), each naming the failing expression, the call site and the library's own message.
#ifndef JAX_CUDNN_RNN_FFI_HELPERS_H_
#define JAX_CUDNN_RNN_FFI_HELPERS_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "ffi_checks.h"  // JCR_RETURN_IF_ERROR
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn {

inline std::string StatusMessage(const char* library, const char* status, const char* expr, const char* file,
                                 int line) {
  return std::string(library) + " call `" + expr + "` failed at " + file + ":" + std::to_string(line) + ": " +
         status;
}

inline std::string CudnnStatusMessage(cudnnStatus_t status, const char* expr, const char* file, int line) {
  return StatusMessage("cuDNN", cudnnGetErrorString(status), expr, file, line);
}

inline std::string CudaStatusMessage(cudaError_t status, const char* expr, const char* file, int line) {
  return StatusMessage("CUDA", cudaGetErrorString(status), expr, file, line);
}

}  // namespace jax_cudnn_rnn

#define JCR_CUDNN_RETURN_IF_ERROR(expr)                                                                 \
  do {                                                                                                  \
    cudnnStatus_t jcr_status_ = (expr);                                                                 \
    if (jcr_status_ != CUDNN_STATUS_SUCCESS) {                                                          \
      return ::xla::ffi::Error::Internal(                                                               \
          ::jax_cudnn_rnn::CudnnStatusMessage(jcr_status_, #expr, __FILE__, __LINE__));                 \
    }                                                                                                   \
  } while (0)

#define JCR_CUDA_RETURN_IF_ERROR(expr)                                                                  \
  do {                                                                                                  \
    cudaError_t jcr_status_ = (expr);                                                                   \
    if (jcr_status_ != cudaSuccess) {                                                                   \
      return ::xla::ffi::Error::Internal(                                                               \
          ::jax_cudnn_rnn::CudaStatusMessage(jcr_status_, #expr, __FILE__, __LINE__));                  \
    }                                                                                                   \
  } while (0)

#endif  // JAX_CUDNN_RNN_FFI_HELPERS_H_
