// The temporary memory of the handlers (staged and reordered weights, oneDNN's scratchpad, intermediate layer outputs,
// float32 copies of bfloat16 gradients), reused from call to call.
//
// It used to be an extra output of each FFI call, which XLA's CPU runtime allocates anew for every execution: buffers
// that large come from mmap, so every call paid a page fault per 4 KiB page on first touch. Measured on this project's
// 2-core AMD EPYC, LSTM T=25 B=64 I=H=1024 float32: 18,400 minor faults and 44 ms of kernel time per forward (the
// primitive itself 133 ms, the call 167 ms); T=100 B=32 H=256 training step: 15,000 faults and 45 ms of kernel time.
// The pool keeps the most recently returned buffers (at most kMaxKeptBuffers, kMaxKeptBytes together) for the next
// call that fits in one; every call holds a buffer of its own, so concurrent calls never share one.
#ifndef JAX_CUDNN_RNN_ONEDNN_SCRATCH_H_
#define JAX_CUDNN_RNN_ONEDNN_SCRATCH_H_

#include <cstddef>
#include <memory>

namespace jax_cudnn_rnn::onednn {

constexpr size_t kMaxKeptBuffers = 4;
constexpr size_t kMaxKeptBytes = size_t{1} << 30;

// Scratch memory of at least the requested size (64-byte aligned), back to the pool when the lease dies.
class ScratchLease {
 public:
  ScratchLease(char* data, size_t bytes) : data_(data), bytes_(bytes) {}
  ScratchLease(ScratchLease&& other) noexcept;
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  ~ScratchLease();
  void* data() const { return data_; }

 private:
  char* data_;
  size_t bytes_;
};

// A buffer of at least `bytes` for one call: the smallest kept one that fits, else a new one.
ScratchLease TakeScratch(size_t bytes);

// Bytes the pool keeps between calls, and the number of its buffers.
size_t KeptScratchBytes();
size_t KeptScratchBuffers();

// Frees every buffer the pool keeps (calls in flight keep theirs, and return them when they end).
void ReleaseScratch();

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_SCRATCH_H_
