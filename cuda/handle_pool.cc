#include "handle_pool.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>
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

namespace {

// The driver's context calls, looked up once through the runtime (CUDA 12.5+'s cudaGetDriverEntryPointByVersion;
// both functions exist since CUDA 4.0).
struct DriverContextCalls {
  PFN_cuCtxGetCurrent_v4000 get_current = nullptr;
  PFN_cuCtxSetCurrent_v4000 set_current = nullptr;
  std::string error;  // why they could not be found, else ""
};

std::string LookUp(const char* symbol, void** function) {
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t status = cudaGetDriverEntryPointByVersion(symbol, function, 4000, cudaEnableDefault, &found);
  if (status != cudaSuccess) {
    return CudaStatusMessage(status, "cudaGetDriverEntryPointByVersion", __FILE__, __LINE__) + " (" + symbol + ")";
  }
  if (found != cudaDriverEntryPointSuccess || *function == nullptr) {
    return std::string("the CUDA driver has no ") + symbol + " (cudaGetDriverEntryPointByVersion result " +
           std::to_string(static_cast<int>(found)) + ")";
  }
  return "";
}

const DriverContextCalls& ContextCalls() {
  static const DriverContextCalls calls = [] {
    DriverContextCalls result;
    void* get_current = nullptr;
    void* set_current = nullptr;
    result.error = LookUp("cuCtxGetCurrent", &get_current);
    if (result.error.empty()) result.error = LookUp("cuCtxSetCurrent", &set_current);
    if (result.error.empty()) {
      result.get_current = reinterpret_cast<PFN_cuCtxGetCurrent_v4000>(get_current);
      result.set_current = reinterpret_cast<PFN_cuCtxSetCurrent_v4000>(set_current);
    }
    return result;
  }();
  return calls;
}

std::string DriverStatusMessage(CUresult status, const char* expr) {
  return StatusMessage("CUDA driver", ("CUresult " + std::to_string(static_cast<int>(status))).c_str(), expr, __FILE__,
                       __LINE__);
}

}  // namespace

std::string CudaContextOps::GetCurrentContext(void** context) {
  const DriverContextCalls& calls = ContextCalls();
  if (!calls.error.empty()) return calls.error;
  CUcontext current = nullptr;
  if (CUresult status = calls.get_current(&current); status != CUDA_SUCCESS) {
    return DriverStatusMessage(status, "cuCtxGetCurrent(&current)");
  }
  *context = current;
  return "";
}

std::string CudaContextOps::SetCurrentContext(void* context) {
  const DriverContextCalls& calls = ContextCalls();
  if (!calls.error.empty()) return calls.error;
  if (CUresult status = calls.set_current(static_cast<CUcontext>(context)); status != CUDA_SUCCESS) {
    return DriverStatusMessage(status, "cuCtxSetCurrent(previous)");
  }
  return "";
}

std::string CudaContextOps::GetDevice(int* device) {
  cudaError_t status = cudaGetDevice(device);
  return status == cudaSuccess ? "" : CudaStatusMessage(status, "cudaGetDevice(device)", __FILE__, __LINE__);
}

std::string CudaContextOps::SetDevice(int device) {
  cudaError_t status = cudaSetDevice(device);
  return status == cudaSuccess ? "" : CudaStatusMessage(status, "cudaSetDevice(device)", __FILE__, __LINE__);
}

::xla::ffi::Error ScopedDevice::Activate(int device) {
  std::string error = guard_.Activate(device);
  return error.empty() ? ::xla::ffi::Error::Success() : ::xla::ffi::Error::Internal(error);
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
  if (device < 0) {
    // Resolving "the current device" belongs to the caller's ScopedDevice, which must hold it before the handle is
    // used (handle_pool.h).
    return ::xla::ffi::Error::InvalidArgument("device is " + std::to_string(device) +
                                              "; expected a CUDA ordinal >= 0 (ScopedDevice::device() after "
                                              "Activate(-1) for the current one)");
  }
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
    return ::xla::ffi::Error::Internal(
        CudnnStatusMessage(status, "cudnnSetStream(handle, stream)", __FILE__, __LINE__));
  }
  *out = BorrowedHandle(this, key, handle);
  return ::xla::ffi::Error::Success();
}

void HandlePool::Return(HandleKey key, cudnnHandle_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_handles_[key].push_back(handle);
}

}  // namespace jax_cudnn_rnn
