// A pool of cuDNN handles per CUDA device. cudnnCreate is expensive (it loads kernels), so handles are created once
// per device and reused; a borrowed handle is bound to the caller's stream and returned to the pool by RAII, so two
// handlers running concurrently never share one.
#ifndef JAX_CUDNN_RNN_HANDLE_POOL_H_
#define JAX_CUDNN_RNN_HANDLE_POOL_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn {

class HandlePool;

// A handle borrowed from the pool; gives it back on destruction.
class BorrowedHandle {
 public:
  BorrowedHandle() = default;
  BorrowedHandle(HandlePool* pool, int device, cudnnHandle_t handle) : pool_(pool), device_(device), handle_(handle) {}
  BorrowedHandle(BorrowedHandle&& other) noexcept;
  BorrowedHandle& operator=(BorrowedHandle&& other) noexcept;
  BorrowedHandle(const BorrowedHandle&) = delete;
  BorrowedHandle& operator=(const BorrowedHandle&) = delete;
  ~BorrowedHandle();

  cudnnHandle_t get() const { return handle_; }

 private:
  void Release();

  HandlePool* pool_ = nullptr;
  int device_ = -1;
  cudnnHandle_t handle_ = nullptr;
};

class HandlePool {
 public:
  // The process-wide pool (handles live as long as the process: destroying them at exit races CUDA's own teardown).
  static HandlePool& Instance();

  // Borrows a handle for the device that owns `stream` (nullptr: the current device) and binds it to `stream`.
  ::xla::ffi::Error Borrow(cudaStream_t stream, BorrowedHandle* out);

 private:
  friend class BorrowedHandle;
  void Return(int device, cudnnHandle_t handle);

  std::mutex mutex_;
  std::unordered_map<int, std::vector<cudnnHandle_t>> free_handles_;
};

}  // namespace jax_cudnn_rnn

#endif  // JAX_CUDNN_RNN_HANDLE_POOL_H_
