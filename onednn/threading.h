// Where the primitives run. (First version: on the calling thread.)
#ifndef JAX_CUDNN_RNN_ONEDNN_THREADING_H_
#define JAX_CUDNN_RNN_ONEDNN_THREADING_H_

#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

template <typename Fn>
xla::ffi::Error RunOnOnednnThread(Fn&& fn) {
  return fn();
}

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_THREADING_H_
