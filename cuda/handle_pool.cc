#include "handle_pool.h"

#include <utility>

#include "ffi_helpers.h"

namespace jax_cudnn_rnn {

BorrowedHandle::BorrowedHandle(BorrowedHandle&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      key_(std::exchange(other.key_, HandleKey{-1, nullptr})),
      handle_(std::exchange(other.handle_, nullptr)) {}

BorrowedHandle& BorrowedHandle::operator=(BorrowedHandle&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::exchange(other.pool_, nullptr);
    key_ = std::exchange(other.key_, HandleKey{-1, nullptr});
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

BorrowedHandle::~BorrowedHandle() { Release(); }

void BorrowedHandle::Release() {
  if (pool_ != nullptr && handle_ != nullptr) pool_->Return(key_, handle_);
  pool_ = nullptr;
  handle_ = nullptr;
}

::xla::ffi::Error ScopedDevice::Activate(int device) {
  JCR_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
  if (previous_ != device) {
    JCR_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    restore_ = true;
  }
  return ::xla::ffi::Error::Success();
}

ScopedDevice::~ScopedDevice() {
  if (restore_) cudaSetDevice(previous_);
}

HandlePool& HandlePool::Instance() {
  static HandlePool* pool = new HandlePool();  // never destroyed, see the header
  return *pool;
}

::xla::ffi::Error HandlePool::Borrow(cudaStream_t stream, BorrowedHandle* out) {
  int device = 0;
  if (stream != nullptr) {
    JCR_CUDA_RETURN_IF_ERROR(cudaStreamGetDevice(stream, &device));
  } else {
    JCR_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  }
  return BorrowFor({device, stream}, out);
}

::xla::ffi::Error HandlePool::BorrowForDevice(int device, BorrowedHandle* out) {
  if (device < 0) JCR_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  return BorrowFor({device, nullptr}, out);
}

::xla::ffi::Error HandlePool::BorrowFor(HandleKey key, BorrowedHandle* out) {
  cudnnHandle_t handle = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<cudnnHandle_t>& handles = free_handles_[key];
    if (!handles.empty()) {
      handle = handles.back();
      handles.pop_back();
    }
  }
  if (handle != nullptr) {
    *out = BorrowedHandle(this, key, handle);  // already bound to key.second
    return ::xla::ffi::Error::Success();
  }
  ScopedDevice scoped_device;
  JCR_RETURN_IF_ERROR(scoped_device.Activate(key.first));
  JCR_CUDNN_RETURN_IF_ERROR(cudnnCreate(&handle));
  if (cudnnStatus_t status = cudnnSetStream(handle, key.second); status != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(handle);  // never pooled: it is bound to no stream
    return ::xla::ffi::Error::Internal(CudnnStatusMessage(status, "cudnnSetStream(handle, stream)", __FILE__,
                                                          __LINE__));
  }
  *out = BorrowedHandle(this, key, handle);
  return ::xla::ffi::Error::Success();
}

void HandlePool::Return(HandleKey key, cudnnHandle_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_handles_[key].push_back(handle);
}

}  // namespace jax_cudnn_rnn
