// The Python module `jax_cudnn_rnn._onednn_rnn`: the FFI handlers as capsules for jax.ffi.register_ffi_target
// (platform "cpu"), and the sizes of the reserve and scratch buffers that the handlers need, which Python must know
// when tracing (they come from the same cached plan the handlers then run).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gemm_recurrence.h"
#include "matmul.h"
#include "module_helpers.h"
#include "network.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "plan.h"
#include "rnn_config.h"
#include "rnn_kernels.h"
#include "scratch.h"
#include "threading.h"

namespace jax_cudnn_rnn::onednn {
namespace {

namespace py = ::pybind11;

// {"weights": bytes, "reserve_space": bytes, "weights_scratch": bytes, "forward_scratch": bytes, "backward_scratch":
// bytes} for one call (backward only in training).
py::dict BufferSizes(const RnnConfig& config, std::string dtype, int64_t max_time, int64_t batch, bool training,
                     bool plain_backward_weights) {
  Network network;
  ThrowIfError<std::invalid_argument>(
      DecodeNetwork(config, DataTypeFromName(dtype), max_time, batch, training, plain_backward_weights, &network));
  std::shared_ptr<const CallPlan> plan;
  {
    py::gil_scoped_release release;  // building a plan JIT-compiles kernels: let other Python threads run
    plan = GetPlan(network);
  }
  py::dict sizes;
  sizes["weights"] = plan->weights.bytes;
  sizes["reserve_space"] = plan->reserve_bytes;
  sizes["weights_scratch"] = plan->preparation.bytes;
  sizes["forward_scratch"] = plan->forward.bytes;
  sizes["backward_scratch"] = plan->backward.bytes;
  return sizes;
}

// oneDNN's name for the instruction set its kernels use on this CPU (dnnl_get_effective_cpu_isa: the CPU's, capped by
// ONEDNN_MAX_CPU_ISA where the user set it). The CPU chooser's tables are measured per instruction set.
const char* EffectiveCpuIsa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx2_vnni_2:
      return "avx2_vnni_2";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_fp16:
      return "avx512_core_fp16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_amx_fp16:
      return "avx512_core_amx_fp16";
    default:
      return "other";
  }
}

}  // namespace
}  // namespace jax_cudnn_rnn::onednn

PYBIND11_MODULE(_onednn_rnn, m) {
  namespace py = ::pybind11;
  using namespace ::jax_cudnn_rnn;
  using namespace ::jax_cudnn_rnn::onednn;
  m.doc() = "oneDNN's fused RNN primitives as XLA FFI handlers for the CPU (see jax_cudnn_rnn/backends/onednn/)";
  DefRegistrations(m, {{"jax_cudnn_rnn_onednn_weights", RnnWeights},
                       {"jax_cudnn_rnn_onednn_forward", RnnForward},
                       {"jax_cudnn_rnn_onednn_backward", RnnBackward},
                       {"jax_cudnn_rnn_onednn_matmul", Matmul},
                       {"jax_cudnn_rnn_onednn_matmul_pack", MatmulPack},
                       {"jax_cudnn_rnn_onednn_matmul_packed", MatmulPacked},
                       {"jax_cudnn_rnn_onednn_gemm_forward", GemmForward},
                       {"jax_cudnn_rnn_onednn_gemm_backward", GemmBackward}});
  DefBuildRecord(m);
  DefWithConfig(m, "buffer_sizes", &BufferSizes, py::arg("dtype"), py::arg("max_time"), py::arg("batch"),
                py::arg("training"), py::arg("plain_backward_weights") = false);
  m.def("cached_plans", &CachedPlanCount, "Number of call plans (primitives per network and shape) in the cache.");
  m.attr("PLAN_CACHE_CAPACITY") = kPlanCacheCapacity;
  m.def(
      "matmul_implementation",
      [](const std::vector<int64_t>& a_shape, const std::vector<int64_t>& b_shape, const std::string& dtype,
         const std::string& out_dtype, bool transpose_a, bool transpose_b) {
        return MatmulImplementation(a_shape, b_shape, DataTypeFromName(dtype), DataTypeFromName(out_dtype), transpose_a,
                                    transpose_b);
      },
      py::arg("a_shape"), py::arg("b_shape"), py::arg("dtype"), py::arg("out_dtype"), py::arg("transpose_a") = false,
      py::arg("transpose_b") = false,
      "oneDNN's name for the kernel jax_cudnn_rnn_onednn_matmul runs for such a product (matmul.h); ValueError for "
      "shapes or dtypes it refuses.");
  m.def(
      "matmul_packed_bytes",
      [](int64_t rows, const std::vector<int64_t>& b_shape, const std::string& dtype, bool transpose_b) {
        return PackedBytes(rows, b_shape, DataTypeFromName(dtype), transpose_b);
      },
      py::arg("rows"), py::arg("b_shape"), py::arg("dtype"), py::arg("transpose_b") = false,
      "Bytes of weights packed by jax_cudnn_rnn_onednn_matmul_pack for products of `rows` rows (matmul.h).");
  m.def("cached_matmuls", &CachedMatmulCount, "Number of matmul primitives in the cache.");
  m.attr("MATMUL_CACHE_CAPACITY") = kMatmulCacheCapacity;
  m.attr("CPU_RUNTIME") = CpuRuntime();
  m.def(
      "kept_scratch", []() { return py::make_tuple(KeptScratchBytes(), KeptScratchBuffers()); },
      "(bytes, buffers) of scratch memory the extension keeps between calls (scratch.h).");
  m.attr("MAX_KEPT_SCRATCH") = py::make_tuple(kMaxKeptBytes, kMaxKeptBuffers);
  m.def("release_scratch", &ReleaseScratch, "Frees the scratch memory the extension keeps between calls.");
  m.def(
      "onednn_version",
      []() {
        const dnnl_version_t* v = dnnl_version();
        return py::make_tuple(v->major, v->minor, v->patch);
      },
      "The (major, minor, patch) version of the libdnnl loaded at run time.");
  m.def("effective_cpu_isa", &EffectiveCpuIsa,
        "oneDNN's name for the instruction set its kernels use on this CPU (\"avx2\", \"avx512_core_bf16\", ...).");
}
