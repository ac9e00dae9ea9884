// The three XLA FFI handlers (platform "cpu"); jax_cudnn_rnn/backends/onednn/kernels.py calls them.
#ifndef JAX_CUDNN_RNN_ONEDNN_RNN_KERNELS_H_
#define JAX_CUDNN_RNN_ONEDNN_RNN_KERNELS_H_

#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

XLA_FFI_DECLARE_HANDLER_SYMBOL(RnnWeights);
XLA_FFI_DECLARE_HANDLER_SYMBOL(RnnForward);
XLA_FFI_DECLARE_HANDLER_SYMBOL(RnnBackward);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_RNN_KERNELS_H_
