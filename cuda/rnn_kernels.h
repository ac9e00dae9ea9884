// XLA FFI handlers for cuDNN's RNN forward, backward-data and backward-weights passes (registered for "CUDA").
#ifndef JAX_CUDNN_RNN_RNN_KERNELS_H_
#define JAX_CUDNN_RNN_RNN_KERNELS_H_

#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn {

XLA_FFI_DECLARE_HANDLER_SYMBOL(RnnForward);
XLA_FFI_DECLARE_HANDLER_SYMBOL(RnnBackwardData);
XLA_FFI_DECLARE_HANDLER_SYMBOL(RnnBackwardWeights);

}  // namespace jax_cudnn_rnn

#endif  // JAX_CUDNN_RNN_RNN_KERNELS_H_
