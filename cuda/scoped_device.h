// Makes a CUDA device current for a scope and then puts back exactly what the thread had before: its driver context,
// or none at all. Header-only and free of CUDA headers so that tests/cudnn/test_scoped_device.py can compile it on a
// machine without CUDA against a simulated driver; handle_pool.h instantiates it with the real CUDA calls.
//
// Why not cudaGetDevice + cudaSetDevice: on a thread without a current context cudaGetDevice reports device 0, and
// since CUDA 12 cudaSetDevice(0) creates GPU 0's primary context (about 0.5 GB) in a process that may own only GPU k
// (jax.distributed with local_device_ids), or fails in exclusive-process mode; and it would replace a non-primary
// context by the primary one of its device. So the guard asks the driver whether a context is current
// (cuCtxGetCurrent), switches only when none is or it belongs to another device, and restores the saved context,
// nullptr included, with cuCtxSetCurrent, as XLA's ScopedActivateContext restores the context it found.
#ifndef JAX_CUDNN_RNN_SCOPED_DEVICE_H_
#define JAX_CUDNN_RNN_SCOPED_DEVICE_H_

#include <string>
#include <utility>

namespace jax_cudnn_rnn {

// `Ops` supplies, each returning "" on success or else what failed:
//   std::string GetCurrentContext(void** context)  the calling thread's current driver context (nullptr: none)
//   std::string SetCurrentContext(void* context)   makes `context` current on the calling thread (nullptr: none)
//   std::string GetDevice(int* device)             the current context's device, else the runtime's device for the
//                                                  thread (cudaGetDevice); asked with no context current only to
//                                                  resolve device -1
//   std::string SetDevice(int device)              makes `device`'s primary context current (cudaSetDevice)
template <typename Ops>
class BasicScopedDevice {
 public:
  explicit BasicScopedDevice(Ops ops = Ops()) : ops_(std::move(ops)) {}
  BasicScopedDevice(const BasicScopedDevice&) = delete;
  BasicScopedDevice& operator=(const BasicScopedDevice&) = delete;
  ~BasicScopedDevice() {
    if (switched_) ops_.SetCurrentContext(previous_);  // nothing to report an error to in a destructor
  }

  // Makes `device` current until the guard is destroyed; a negative `device` means the thread's current device
  // (GetDevice's answer), which may have no context yet: it is then made current under the same rule, so that what
  // runs in the scope (cudnnCreate, cudaMalloc) does not make a primary context current for good. "" on success, else
  // the error (the thread's context is then restored by the destructor if it may have changed). Call at most once per
  // guard.
  std::string Activate(int device) {
    if (activated_) return "BasicScopedDevice::Activate was called twice on one guard";
    activated_ = true;
    void* previous = nullptr;
    std::string error = ops_.GetCurrentContext(&previous);
    if (!error.empty()) return error;
    if (previous != nullptr || device < 0) {
      int current = -1;
      error = ops_.GetDevice(&current);
      if (!error.empty()) return error;
      if (device < 0) device = current;
      if (previous != nullptr && current == device) {
        device_ = device;
        return "";
      }
    }
    previous_ = previous;
    switched_ = true;
    error = ops_.SetDevice(device);
    if (error.empty()) device_ = device;
    return error;
  }

  // The device Activate made current (device -1 resolved); -1 until it succeeded.
  int device() const { return device_; }

 private:
  Ops ops_;
  void* previous_ = nullptr;
  bool switched_ = false;
  bool activated_ = false;
  int device_ = -1;
};

}  // namespace jax_cudnn_rnn

#endif  // JAX_CUDNN_RNN_SCOPED_DEVICE_H_
