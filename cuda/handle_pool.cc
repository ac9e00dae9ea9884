#include "handle_pool.h"

#include <utility>

#include "ffi_helpers.h"

namespace jax_cudnn_rnn {

BorrowedHandle::BorrowedHandle(BorrowedHandle&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      device_(std::exchange(other.device_, -1)),
      handle_(std::exchange(other.handle_, nullptr)) {}

BorrowedHandle& BorrowedHandle::operator=(BorrowedHandle&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::exchange(other.pool_, nullptr);
    device_ = std::exchange(other.device_, -1);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

BorrowedHandle::~BorrowedHandle() { Release(); }

void BorrowedHandle::Release() {
  if (pool_ != nullptr && handle_ != nullptr) pool_->Return(device_, handle_);
  pool_ = nullptr;
  handle_ = nullptr;
}

HandlePool& HandlePool::Instance() {
  static HandlePool* pool = new HandlePool();  // never destroyed, see the header
  return *pool;
}

namespace {

// Makes `device` current for the lifetime of the guard (cudnnCreate binds a handle to the current device).
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ::xla::ffi::Error Activate(int device) {
    JCR_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
    if (previous_ != device) {
      JCR_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
      restore_ = true;
    }
    return ::xla::ffi::Error::Success();
  }
  ~ScopedDevice() {
    if (restore_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace

::xla::ffi::Error HandlePool::Borrow(cudaStream_t stream, BorrowedHandle* out) {
  int device = 0;
  if (stream != nullptr) {
    JCR_CUDA_RETURN_IF_ERROR(cudaStreamGetDevice(stream, &device));
  } else {
    JCR_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  }
  cudnnHandle_t handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<cudnnHandle_t>& handles = free_handles_[device];
    if (!handles.empty()) {
      handle = handles.back();
      handles.pop_back();
    }
  }
  if (handle == nullptr) {
    ScopedDevice scoped_device;
    JCR_RETURN_IF_ERROR(scoped_device.Activate(device));
    JCR_CUDNN_RETURN_IF_ERROR(cudnnCreate(&handle));
  }
  // Bound before anything can fail, so the handle goes back to the pool on every path.
  *out = BorrowedHandle(this, device, handle);
  JCR_CUDNN_RETURN_IF_ERROR(cudnnSetStream(handle, stream));
  return ::xla::ffi::Error::Success();
}

void HandlePool::Return(int device, cudnnHandle_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_handles_[device].push_back(handle);
}

}  // namespace jax_cudnn_rnn
