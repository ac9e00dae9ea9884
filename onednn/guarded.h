// How every oneDNN handler turns what oneDNN or the standard library throws into the ffi::Error XLA reports: the
// handler's target name, then oneDNN's message and status (dnnl::error) or the exception's message. No exception
// crosses the FFI boundary.
#ifndef JAX_CUDNN_RNN_ONEDNN_GUARDED_H_
#define JAX_CUDNN_RNN_ONEDNN_GUARDED_H_

#include <exception>
#include <string>

#include "oneapi/dnnl/dnnl.hpp"
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

// body() -> ffi::Error, run so that an exception becomes an ffi::Error naming `handler`.
template <typename Fn>
::xla::ffi::Error Guarded(const char* handler, Fn&& body) {
  try {
    return body();
  } catch (const dnnl::error& e) {
    return ::xla::ffi::Error::Internal(std::string(handler) + ": oneDNN failed: " + e.what() + " (dnnl_status_t " +
                                       std::to_string(static_cast<int>(e.status)) + ")");
  } catch (const std::exception& e) {
    return ::xla::ffi::Error::Internal(std::string(handler) + " failed: " + e.what());
  }
}

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_GUARDED_H_
