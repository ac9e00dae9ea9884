// A matrix product on oneDNN's matmul primitive, as an XLA FFI handler (platform "cpu"), called by
// jax_cudnn_rnn/backends/onednn/kernels.py:
//
//   jax_cudnn_rnn_onednn_matmul(a, b) -> c,   c[..., m, n] = sum_k op(a)[..., m, k] op(b)[..., k, n]
//
// op(a) is a [..., M, K], or its transpose where `transpose_a` (a stored [..., K, M]); op(b) likewise [..., K, N] or,
// where `transpose_b`, stored [..., N, K]. a, b and c have the same rank (at least 2); each leading (batch) dimension
// of a and b is c's or 1 (broadcast: how jax.vmap's "expand_dims" passes an unmapped operand). a and b are both
// float32 or both bfloat16; c is float32 (bfloat16 inputs accumulate in float32 and keep it) or a's element type.
// The transposes are strides of oneDNN's memory descriptors, never copies. Primitives are built once per shape and
// cached (least recently used evicted), scratchpads come from the extension's pool (scratch.h), and the product runs on
// the extension's threads (threading.h).
#ifndef JAX_CUDNN_RNN_ONEDNN_MATMUL_H_
#define JAX_CUDNN_RNN_ONEDNN_MATMUL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "plan.h"
#include "xla/ffi/api/ffi.h"

namespace jax_cudnn_rnn::onednn {

XLA_FFI_DECLARE_HANDLER_SYMBOL(Matmul);

// The same product with b packed once into the layout oneDNN's kernels read (blocked), for a product repeated with the
// same weights (an RNN's recurrent product at every step), which otherwise copies b into that layout at every call:
//
//   jax_cudnn_rnn_onednn_matmul_pack(b) -> packed     b [..., K, N] (or [..., N, K] where transpose_b), packed
//                                                     uint8 [..., bytes]: each batch entry packed
//   jax_cudnn_rnn_onednn_matmul_packed(a, packed) -> c    a [..., M, K], c [..., M, N] float32
//
// Both take `rows` (the M the layout is picked for), `b_shape` (b's stored [K, N] or [N, K]) and `transpose_b`. The
// product's batch dimensions broadcast as the plain one's; where all rows read the same packed weights they are one
// product (a vmapped a's rows folded into M).
XLA_FFI_DECLARE_HANDLER_SYMBOL(MatmulPack);
XLA_FFI_DECLARE_HANDLER_SYMBOL(MatmulPacked);

// oneDNN's name for the kernel it runs for such a product (e.g. "brg:avx512_core_bf16"), building and caching the
// primitive: what a benchmark reports beside its time. Shapes and element types as the handler's.
// Throws std::invalid_argument for shapes or element types the handler refuses.
std::string MatmulImplementation(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                                 xla::ffi::DataType dtype, xla::ffi::DataType out_dtype, bool transpose_a,
                                 bool transpose_b);

// A product's primitive and what a call needs to run it: its operands' layouts (for packed weights, `b` is the packed
// one, and `pack` the reorder that packs them), its scratchpad's size and oneDNN's name for its kernel.
struct MatmulPlan {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c;
  size_t scratchpad_bytes = 0;
  std::string implementation;
  Reorder pack;
};

// The plan of jax_cudnn_rnn_onednn_matmul's product for operands of these stored shapes and element types (matmul.h's
// top), for handlers that run products of their own (gemm_recurrence.h). Cached with the handlers' plans; throws
// std::invalid_argument for shapes they refuse.
std::shared_ptr<const MatmulPlan> ProductPlan(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                                              xla::ffi::DataType dtype, xla::ffi::DataType out_dtype, bool transpose_a,
                                              bool transpose_b);

// An operand's strides in elements: element (i, j) of a 2-D operand lies at i * strides[0] + j * strides[1].
using Strides = std::array<int64_t, 2>;

// The plan of c = a b (`accumulate`: c += a b) for a [m, k], b [k, n] and c [m, n] that lie with these strides (blocks
// of a larger array: a gate's columns, a matrix held transposed), a and b of element type `dtype`, c of `out_dtype`
// (float32 or dtype), run by RunMatmul on pointers to each operand's first element. Cached with the handlers' plans;
// throws std::invalid_argument for element types they refuse.
std::shared_ptr<const MatmulPlan> StridedProductPlan(int64_t m, int64_t k, int64_t n, const Strides& a_strides,
                                                     const Strides& b_strides, const Strides& c_strides,
                                                     xla::ffi::DataType dtype, xla::ffi::DataType out_dtype,
                                                     bool accumulate = false);

// The plan of a product of `rows` rows (a [rows, k] of element type `dtype`, c float32) with b ([k, n], or [n, k]
// where `transpose_b`) packed for products of `packed_rows` rows as jax_cudnn_rnn_onednn_matmul_pack packs it: what
// the "onednn:gemm" recurrence runs at every step (gemm_recurrence.h). Cached with the handlers' plans; throws
// std::invalid_argument for shapes they refuse.
std::shared_ptr<const MatmulPlan> PackedProductPlan(int64_t rows, int64_t packed_rows, int64_t k, int64_t n,
                                                    xla::ffi::DataType dtype, bool transpose_b);

// Runs `plan`'s product (in the caller's RunOnednn) on row-major a and c and on b in the plan's layout; `scratchpad`
// holds the plan's scratchpad_bytes.
void RunMatmul(const MatmulPlan& plan, const dnnl::stream& stream, const void* a, const void* b, void* c,
               void* scratchpad);

// Bytes of b packed for products of `rows` rows (b_shape, transpose_b as the handlers' attributes); throws
// std::invalid_argument for shapes or element types the handlers refuse.
size_t PackedBytes(int64_t rows, const std::vector<int64_t>& b_shape, xla::ffi::DataType dtype, bool transpose_b);

// Number of matmul primitives in the cache, and its capacity.
size_t CachedMatmulCount();
constexpr size_t kMatmulCacheCapacity = 256;

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_MATMUL_H_
