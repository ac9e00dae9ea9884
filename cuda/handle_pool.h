// A pool of cuDNN handles keyed by (CUDA device, stream), as jaxlib's gpu/handle_pool.h keys its handles by stream.
// cudnnCreate is expensive (it loads kernels), so handles are created once and reused; a handle is bound to its stream
// once, when it is created, and only ever lent out again for that same stream. A handle therefore never moves to
// another stream while work queued through it on the previous one may still run, and two handlers running at once
// never share one (a borrowed handle returns to the pool by RAII).
#ifndef JAX_CUDNN_RNN_HANDLE_POOL_H_
#define JAX_CUDNN_RNN_HANDLE_POOL_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "scoped_device.h"
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn {

class HandlePool;

// The pool's key: a CUDA device and a stream on it (nullptr: that device's legacy default stream).
using HandleKey = std::pair<int, cudaStream_t>;

// A handle borrowed from the pool; gives it back on destruction.
class BorrowedHandle {
 public:
  BorrowedHandle() = default;
  BorrowedHandle(HandlePool* pool, HandleKey key, cudnnHandle_t handle) : pool_(pool), key_(key), handle_(handle) {}
  BorrowedHandle(BorrowedHandle&& other) noexcept;
  BorrowedHandle& operator=(BorrowedHandle&& other) noexcept;
  BorrowedHandle(const BorrowedHandle&) = delete;
  BorrowedHandle& operator=(const BorrowedHandle&) = delete;
  ~BorrowedHandle();

  cudnnHandle_t get() const { return handle_; }

 private:
  void Release();

  HandlePool* pool_ = nullptr;
  HandleKey key_{-1, nullptr};
  cudnnHandle_t handle_ = nullptr;
};

// The CUDA calls BasicScopedDevice (scoped_device.h) needs: the driver's cuCtxGetCurrent/cuCtxSetCurrent, reached
// through cudaGetDriverEntryPointByVersion (the module links only the static CUDA runtime, not libcuda), and the
// runtime's cudaGetDevice/cudaSetDevice. Each returns "" or the failing call with CUDA's message.
struct CudaContextOps {
  std::string GetCurrentContext(void** context);
  std::string SetCurrentContext(void* context);
  std::string GetDevice(int* device);
  std::string SetDevice(int device);
};

// Makes a CUDA device current for the guard's lifetime (cudnnCreate binds a handle to the current device, and
// cudaMalloc allocates there) and then restores the thread's previous context, or none (scoped_device.h says why).
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  // `device` (-1: the thread's current device) until the guard is destroyed (BasicScopedDevice::Activate).
  ::xla::ffi::Error Activate(int device);
  // The device Activate made current, -1 resolved; -1 until it succeeded.
  int device() const { return guard_.device(); }

 private:
  BasicScopedDevice<CudaContextOps> guard_;
};

class HandlePool {
 public:
  // The process-wide pool (handles live as long as the process: destroying them at exit races CUDA's own teardown).
  static HandlePool& Instance();

  // Borrows a handle bound to `stream`, for the device that owns it (an FFI handler's stream).
  ::xla::ffi::Error Borrow(cudaStream_t stream, BorrowedHandle* out);

  // Borrows a handle on CUDA device `device` (>= 0) of this process (its legacy default stream), for the questions
  // asked at trace time. The caller holds a ScopedDevice on `device` for as long as it uses the handle: cuDNN's calls
  // and the caller's cudaMalloc run on the current device, and only the guard puts back the thread's context after.
  ::xla::ffi::Error BorrowForDevice(int device, BorrowedHandle* out);

 private:
  friend class BorrowedHandle;
  struct KeyHash {
    size_t operator()(const HandleKey& key) const {
      return std::hash<int>()(key.first) * 31 + std::hash<const void*>()(key.second);
    }
  };

  ::xla::ffi::Error BorrowFor(HandleKey key, BorrowedHandle* out);
  void Return(HandleKey key, cudnnHandle_t handle);

  std::mutex mutex_;
  std::unordered_map<HandleKey, std::vector<cudnnHandle_t>, KeyHash> free_handles_;
};

}  // namespace jax_cudnn_rnn

#endif  // JAX_CUDNN_RNN_HANDLE_POOL_H_
