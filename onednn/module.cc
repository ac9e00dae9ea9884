// The Python module `jax_cudnn_rnn._onednn_rnn`: the FFI handlers as capsules for jax.ffi.register_ffi_target
// (platform "cpu"), and the sizes of the reserve and scratch buffers that the handlers need, which Python must know
// when tracing (they come from the same cached plan the handlers then run).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "network.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "plan.h"
#include "rnn_kernels.h"

namespace jax_cudnn_rnn::onednn {
namespace {

namespace py = ::pybind11;
namespace ffi = ::xla::ffi;

Network MakeNetwork(const std::string& mode, int64_t num_layers, int64_t num_units, int64_t input_size,
                    int64_t proj_size, const std::string& direction, bool skip_input, const std::string& dtype,
                    int64_t max_time, int64_t batch, bool training) {
  ffi::DataType element_type;
  if (dtype == "float32") element_type = ffi::DataType::F32;
  else if (dtype == "bfloat16") element_type = ffi::DataType::BF16;
  else throw std::invalid_argument("dtype is '" + dtype + "'; the oneDNN RNN runs float32 and bfloat16");
  Network network;
  ffi::Error error = DecodeNetwork(mode, num_layers, num_units, input_size, proj_size, direction, skip_input,
                                   element_type, max_time, batch, training, &network);
  if (error.failure()) throw std::invalid_argument(error.message());
  return network;
}

// {"reserve": bytes, "forward_scratch": bytes, "backward_scratch": bytes} for one call (backward only in training).
py::dict BufferSizes(const std::string& mode, int64_t num_layers, int64_t num_units, int64_t input_size,
                     int64_t proj_size, const std::string& direction, bool skip_input, const std::string& dtype,
                     int64_t max_time, int64_t batch, bool training) {
  Network network = MakeNetwork(mode, num_layers, num_units, input_size, proj_size, direction, skip_input, dtype,
                                max_time, batch, training);
  std::shared_ptr<const CallPlan> plan;
  {
    py::gil_scoped_release release;  // building a plan JIT-compiles kernels: let other Python threads run
    plan = GetPlan(network);
  }
  py::dict sizes;
  sizes["reserve"] = plan->reserve_bytes;
  sizes["forward_scratch"] = plan->forward.bytes;
  sizes["backward_scratch"] = plan->backward.bytes;
  return sizes;
}

template <typename Fn>
py::capsule Capsule(Fn* fn) {
  return py::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace
}  // namespace jax_cudnn_rnn::onednn

PYBIND11_MODULE(_onednn_rnn, m) {
  namespace py = ::pybind11;
  using namespace ::jax_cudnn_rnn::onednn;
  m.doc() = "oneDNN's fused RNN primitives as XLA FFI handlers for the CPU (see jax_cudnn_rnn/onednn.py)";
  m.def("registrations", []() {
    py::dict targets;
    targets["jax_cudnn_rnn_onednn_forward"] = Capsule(RnnForward);
    targets["jax_cudnn_rnn_onednn_backward"] = Capsule(RnnBackward);
    return targets;
  });
  m.def("buffer_sizes", &BufferSizes, py::arg("mode"), py::arg("num_layers"), py::arg("num_units"),
        py::arg("input_size"), py::arg("proj_size"), py::arg("direction"), py::arg("skip_input"), py::arg("dtype"),
        py::arg("max_time"), py::arg("batch"), py::arg("training"));
  m.def("cached_plans", &CachedPlanCount, "Number of call plans (primitives per network and shape) in the cache.");
  m.attr("PLAN_CACHE_CAPACITY") = kPlanCacheCapacity;
  m.def("onednn_version", []() {
    const dnnl_version_t* v = dnnl_version();
    return py::make_tuple(v->major, v->minor, v->patch);
  }, "The (major, minor, patch) version of the libdnnl loaded at run time.");
}
