// Where the primitives run. Which threads execute a oneDNN call depends on the CPU runtime the linked libdnnl was
// built with (DNNL_CPU_RUNTIME in dnnl_config.h); this file is the only one that knows. Nothing here changes a
// process-wide setting: no environment variable, no OpenMP ICV, no TBB global_control, no thread count of anyone else.
//
// - TBB (the onednn-cpu-tbb wheels, what the package builds against): every call runs inside one tbb::task_arena that
//   the extension owns, on the calling XLA thread plus TBB's workers. Idle TBB workers leave the arena and sleep after
//   a short spin, so they neither hold the cores between calls nor slow other thread pools in the process (PyTorch's
//   OpenMP team, XLA's own threads). Measured on this project's 2-core AMD EPYC (Zen 4), LSTM T100 B32 H256 float32:
//   17.8 / 75.8 ms forward / training step, against 27.3 / 96.3 under GNU OpenMP with OMP_WAIT_POLICY=PASSIVE (what
//   the package used to set for the whole process) and 17.9 / 79.2 with OpenMP's default spinning, which slowed
//   PyTorch's LSTM in the same process 1.3-3.4x.
// - OMP (a oneDNN built on GNU OpenMP, from DNNL_ROOT or the onednn-devel-cpu-gomp wheel): every call runs on one
//   thread that the extension owns, so that there is exactly one OpenMP team in the process, kept warm from call to
//   call (each thread that opens a parallel region gets a team of its own). Its idle workers spin as libgomp's
//   settings say; the extension leaves those settings to the user.
#ifndef JAX_CUDNN_RNN_ONEDNN_THREADING_H_
#define JAX_CUDNN_RNN_ONEDNN_THREADING_H_

#include <cstdint>
#include <functional>

#include "oneapi/dnnl/dnnl.hpp"
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

// Runs `fn` with a stream whose primitives execute on the threads described above and returns its result (an
// exception it throws is rethrown here).
xla::ffi::Error RunOnednn(const std::function<xla::ffi::Error(dnnl::stream&)>& fn);

// Inside RunOnednn's `fn`: runs body(chunk, begin, end) for `chunks` consecutive pieces of [0, n), the pieces at once
// on the arena's threads (TBB); on the OMP runtime one after another on the calling thread. The pieces are the same for
// the same (n, chunks), so that sums taken per piece and then added up are the same from call to call.
void ParallelFor(int64_t n, int64_t chunks, const std::function<void(int64_t chunk, int64_t begin, int64_t end)>& body);

// How many threads ParallelFor runs on: the extension's arena's concurrency (TBB), whether asked inside RunOnednn or
// before it; 1 (OMP).
int64_t ParallelThreads();

// The CPU runtime this extension was built for: "tbb" or "omp".
const char* CpuRuntime();

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_THREADING_H_
