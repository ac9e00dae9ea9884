// Where the primitives run: every oneDNN call of this extension runs on one thread that the extension owns.
//
// The oneDNN wheels are built on GNU OpenMP, which gives each thread that opens a parallel region a team of its own
// (num_cores - 1 worker threads that spin for a while between regions, then sleep). XLA runs a custom call on
// whichever thread executes it: the Python thread that dispatched the computation, or one of XLA's intra-op threads,
// and a training step puts the forward and the backward on different ones. Run inline, every such thread grew its own
// team, and teams left spinning competed with the team at work and with XLA's own threads for the cores. On one
// dedicated thread there is exactly one team, kept warm from call to call; the XLA thread that made the call blocks on
// a futex meanwhile, using no CPU. Concurrent calls queue and run one after another, each on all cores: the speed an
// RNN gets from more cores comes from oneDNN's threads within a call, not from overlapping calls.
#ifndef JAX_CUDNN_RNN_ONEDNN_THREADING_H_
#define JAX_CUDNN_RNN_ONEDNN_THREADING_H_

#include <functional>

#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

// Runs `fn` on the oneDNN thread and returns its result (an exception it throws is rethrown here).
xla::ffi::Error RunOnOnednnThread(std::function<xla::ffi::Error()> fn);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_THREADING_H_
