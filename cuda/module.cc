// The Python module `jax_cudnn_rnn._cudnn_rnn`: the FFI handlers as capsules for jax.ffi.register_ffi_target, and
// the questions only cuDNN can answer (its weight layout, its work and reserve sizes), which need a live handle and
// therefore a GPU: each is asked on the CUDA device the caller names (the computation's), without the GIL.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "descriptors.h"
#include "ffi_helpers.h"
#include "handle_pool.h"
#include "module_helpers.h"
#include "rnn_config.h"
#include "rnn_kernels.h"
#include "xla/ffi/api/c_api.h"

namespace jax_cudnn_rnn {
namespace {

namespace ffi = ::xla::ffi;
namespace py = ::pybind11;

// The FFI helpers' status checks, turned into exceptions for pybind11 (same message: call site and status string).
#define JCR_THROW_IF(return_if_error, expr) \
  ThrowIfError([&]() -> ffi::Error {        \
    return_if_error(expr);                  \
    return ffi::Error::Success();           \
  }())
#define JCR_CUDA_THROW_IF_ERROR(expr) JCR_THROW_IF(JCR_CUDA_RETURN_IF_ERROR, expr)
#define JCR_CUDNN_THROW_IF_ERROR(expr) JCR_THROW_IF(JCR_CUDNN_RETURN_IF_ERROR, expr)

// cuDNN's data type for a dtype name; ValueError for a name that is not a dtype, RuntimeError for one cuDNN lacks.
cudnnDataType_t CudnnDataTypeFromName(const std::string& dtype) {
  cudnnDataType_t data_type;
  ThrowIfError(CudnnDataType(DataTypeFromName(dtype), "dtype", &data_type));
  return data_type;
}

// Every function below asks cuDNN on CUDA device `device` of this process (-1: the current one), made current for the
// question's duration by `scoped_device`, which the caller declares before anything that uses the device and so
// destroys after it; say so plainly where there is no such device. The guard is taken before the handle is borrowed,
// for -1 too: the question's cudaMalloc and cuDNN calls would otherwise make the device's primary context current and
// leave it so (scoped_device.h). The caller holds no GIL: the first cudnnCreate on a device can take a second.
BorrowedHandle BorrowHandleOrThrow(const char* function, int device, ScopedDevice* scoped_device) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    throw std::runtime_error(std::string(function) +
                             " needs a CUDA GPU (cuDNN answers only with a live handle), but none is usable: " +
                             (status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device found"));
  }
  if (device >= count) {
    throw std::invalid_argument("device is " + std::to_string(device) + "; this process sees " + std::to_string(count) +
                                " CUDA device(s)");
  }
  ThrowIfError(scoped_device->Activate(device));
  BorrowedHandle handle;
  ThrowIfError(HandlePool::Instance().BorrowForDevice(scoped_device->device(), &handle));
  return handle;
}

// One weight or bias as cuDNN places it: byte offset in the weight space and descriptor shape (absent: no storage).
struct Slot {
  bool present = false;
  int64_t offset = 0;
  std::vector<int> shape;
};

struct WeightParam {
  int32_t pseudo_layer;
  int lin_layer_id;
  Slot matrix, bias;
};

std::vector<int> Dims(cudnnTensorDescriptor_t descriptor) {
  cudnnDataType_t data_type;
  int rank = 0, dims[8], strides[8];
  JCR_CUDNN_THROW_IF_ERROR(cudnnGetTensorNdDescriptor(descriptor, 8, &data_type, &rank, dims, strides));
  return std::vector<int>(dims, dims + rank);
}

py::object ToPython(const std::vector<int>& shape) {
  py::tuple tuple(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) tuple[i] = shape[i];
  return std::move(tuple);
}

// cuDNN's own account of the weight space: its size in bytes and, per pseudo-layer (layer * D + direction) and
// linLayerID (0..G-1 input, G..2G-1 recurrent, 8 the LSTM projection), the byte offset and descriptor shape of the
// matrix and of the bias, None where cuDNN stores nothing.
py::dict WeightParams(const RnnConfig& config, std::string dtype, int device) {
  const cudnnDataType_t data_type = CudnnDataTypeFromName(dtype);
  size_t weight_space_bytes = 0;
  std::vector<WeightParam> params;
  {
    py::gil_scoped_release release;
    ScopedDevice scoped_device;
    BorrowedHandle handle = BorrowHandleOrThrow("weight_params", device, &scoped_device);
    RnnNetwork rnn;
    ThrowIfError(
        MakeRnnNetwork(handle.get(), config, /*allow_tf32=*/false, "standard", data_type, /*padded=*/true, &rnn));
    weight_space_bytes = rnn.weight_space_bytes;
    // cuDNN reports addresses inside a real weight space.
    void* weight_space = nullptr;
    JCR_CUDA_THROW_IF_ERROR(cudaMalloc(&weight_space, rnn.weight_space_bytes));
    std::unique_ptr<void, cudaError_t (*)(void*)> weight_space_owner(weight_space, cudaFree);
    TensorDescriptor matrix, bias;
    ThrowIfError(CreateDescriptor(&matrix));
    ThrowIfError(CreateDescriptor(&bias));

    std::vector<int> lin_layer_ids;
    for (int id = 0; id < 2 * config.num_gates(); ++id) lin_layer_ids.push_back(id);
    if (config.proj_size > 0) lin_layer_ids.push_back(8);
    const int64_t pseudo_layers = config.num_layers * config.num_directions;
    for (int32_t pseudo_layer = 0; pseudo_layer < pseudo_layers; ++pseudo_layer) {
      for (int id : lin_layer_ids) {
        void* matrix_address = nullptr;
        void* bias_address = nullptr;
        JCR_CUDNN_THROW_IF_ERROR(cudnnGetRNNWeightParams(handle.get(), rnn.rnn.get(), pseudo_layer,
                                                         rnn.weight_space_bytes, weight_space, id, matrix.get(),
                                                         &matrix_address, bias.get(), &bias_address));
        auto slot = [&](void* address, cudnnTensorDescriptor_t descriptor) {
          Slot result;
          if (address == nullptr) return result;
          result.present = true;
          result.offset = static_cast<char*>(address) - static_cast<char*>(weight_space);
          result.shape = Dims(descriptor);
          return result;
        };
        params.push_back({pseudo_layer, id, slot(matrix_address, matrix.get()), slot(bias_address, bias.get())});
      }
    }
  }
  py::list entries;
  for (const WeightParam& param : params) {
    py::dict entry;
    entry["pseudo_layer"] = param.pseudo_layer;
    entry["lin_layer_id"] = param.lin_layer_id;
    entry["matrix_offset"] = param.matrix.present ? py::object(py::int_(param.matrix.offset)) : py::none();
    entry["matrix_shape"] = param.matrix.present ? ToPython(param.matrix.shape) : py::none();
    entry["bias_offset"] = param.bias.present ? py::object(py::int_(param.bias.offset)) : py::none();
    entry["bias_shape"] = param.bias.present ? ToPython(param.bias.shape) : py::none();
    entries.append(entry);
  }
  py::dict result;
  result["weight_space_size"] = weight_space_bytes;
  result["params"] = entries;
  return result;
}

// (workspace bytes, reserve-space bytes) for full-length sequences of shape [max_time, batch] with `algorithm`,
// `padded` as the call will run (it has seq_lengths); the reserve size is 0 for inference. Raises where cuDNN does not
// support `algorithm` for this network (CUDNN_STATUS_NOT_SUPPORTED).
std::pair<size_t, size_t> TempSpaceSizes(const RnnConfig& config, std::string dtype, bool allow_tf32,
                                         std::string algorithm, int64_t max_time, int64_t batch, bool padded,
                                         bool training, int device) {
  const cudnnDataType_t data_type = CudnnDataTypeFromName(dtype);
  if (batch < 1) throw std::invalid_argument("batch is " + std::to_string(batch) + "; expected >= 1");
  py::gil_scoped_release release;
  ScopedDevice scoped_device;
  BorrowedHandle handle = BorrowHandleOrThrow("temp_space_sizes", device, &scoped_device);
  RnnNetwork rnn;
  ThrowIfError(MakeRnnNetwork(handle.get(), config, allow_tf32, algorithm, data_type, padded, &rnn));
  RnnTensors tensors;
  ThrowIfError(MakeRnnTensors(config, data_type, max_time, batch,
                              std::vector<int32_t>(static_cast<size_t>(batch), static_cast<int32_t>(max_time)), padded,
                              &tensors));
  size_t workspace_bytes = 0, reserve_bytes = 0;
  JCR_CUDNN_THROW_IF_ERROR(cudnnGetRNNTempSpaceSizes(handle.get(), rnn.rnn.get(),
                                                     training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                                     tensors.x.get(), &workspace_bytes, &reserve_bytes));
  return {workspace_bytes, reserve_bytes};
}

}  // namespace
}  // namespace jax_cudnn_rnn

PYBIND11_MODULE(_cudnn_rnn, m) {
  namespace py = ::pybind11;
  using namespace ::jax_cudnn_rnn;
  m.doc() = "cuDNN RNN kernels as XLA FFI handlers (see jax_cudnn_rnn/backends/cudnn/extension.py)";
  DefRegistrations(m, {{"jax_cudnn_rnn_forward", RnnForward},
                       {"jax_cudnn_rnn_backward_data", RnnBackwardData},
                       {"jax_cudnn_rnn_backward_weights", RnnBackwardWeights}});
  m.def(
      "cudnn_version", []() { return static_cast<int64_t>(cudnnGetVersion()); },
      "The version of the libcudnn loaded at run time, e.g. 92800 for 9.28.0.");
  m.attr("CUDNN_BUILD_VERSION") = static_cast<int64_t>(CUDNN_VERSION);
  // What the module was compiled against: jax_cudnn_rnn/backends/native_extension.py compares it with what runs.
  DefBuildRecord(m);
  DefWithConfig(m, "weight_params", &WeightParams, py::arg("dtype"), py::arg("device") = -1);
  DefWithConfig(m, "temp_space_sizes", &TempSpaceSizes, py::arg("dtype"), py::arg("allow_tf32"), py::arg("algorithm"),
                py::arg("max_time"), py::arg("batch"), py::arg("padded"), py::arg("training"), py::arg("device") = -1);
}
