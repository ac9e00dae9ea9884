#include "matmul.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "ffi_args.h"
#include "guarded.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "pages.h"
#include "plan.h"
#include "scratch.h"
#include "threading.h"

namespace jax_cudnn_rnn::onednn {
// The handlers' attributes (jax_cudnn_rnn/backends/onednn/kernels.py `matmul`, `pack_weights`, `matmul_packed`).
struct MatmulAttrs {
  bool transpose_a;
  bool transpose_b;
};
// Packed weights: the product's rows (M) they are packed for and their stored shape ([K, N], or [N, K] where
// `transpose_b`).
struct PackedAttrs {
  int64_t rows;
  xla::ffi::Span<const int64_t> b_shape;
  bool transpose_b;
};
}  // namespace jax_cudnn_rnn::onednn

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::jax_cudnn_rnn::onednn::MatmulAttrs,
                                      ::xla::ffi::StructMember<bool>("transpose_a"),
                                      ::xla::ffi::StructMember<bool>("transpose_b"));
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::jax_cudnn_rnn::onednn::PackedAttrs, ::xla::ffi::StructMember<int64_t>("rows"),
                                      ::xla::ffi::StructMember<::xla::ffi::Span<const int64_t>>("b_shape"),
                                      ::xla::ffi::StructMember<bool>("transpose_b"));

namespace jax_cudnn_rnn::onednn {

namespace ffi = ::xla::ffi;

namespace {

using dt = dnnl::memory::data_type;

// Everything a matmul primitive depends on; the key of the primitive cache. With `packed_rows` > 0 the product reads b
// packed (2-D a and b, float32 c): in the layout the primitive for `packed_rows` rows picks for its weights.
struct MatmulShape {
  std::vector<int64_t> a_dims, b_dims;  // as stored
  dt data_type = dt::f32, out_type = dt::f32;
  bool transpose_a = false, transpose_b = false;
  int64_t packed_rows = 0;
  // A 2-D product over operands that lie with these strides (a's, b's, c's: 2 each) instead of densely, and whether
  // it adds to c (StridedProductPlan).
  std::vector<int64_t> strides;
  bool accumulate = false;

  bool operator==(const MatmulShape& other) const {
    return a_dims == other.a_dims && b_dims == other.b_dims && data_type == other.data_type &&
           out_type == other.out_type && transpose_a == other.transpose_a && transpose_b == other.transpose_b &&
           packed_rows == other.packed_rows && strides == other.strides && accumulate == other.accumulate;
  }
  size_t rank() const { return a_dims.size(); }
  int64_t m() const { return a_dims[rank() - (transpose_a ? 1 : 2)]; }
  int64_t k() const { return a_dims[rank() - (transpose_a ? 2 : 1)]; }
  int64_t n() const { return b_dims[rank() - (transpose_b ? 2 : 1)]; }
  // c's dimensions: the batch dimensions broadcast, then (M, N).
  std::vector<int64_t> c_dims() const {
    std::vector<int64_t> dims(rank());
    for (size_t i = 0; i + 2 < rank(); ++i) dims[i] = std::max(a_dims[i], b_dims[i]);
    dims[rank() - 2] = m();
    dims[rank() - 1] = n();
    return dims;
  }
};

struct MatmulShapeHash {
  size_t operator()(const MatmulShape& shape) const {
    size_t seed = std::hash<int64_t>{}(shape.packed_rows * 8192 + static_cast<int>(shape.data_type) * 128 +
                                       static_cast<int>(shape.out_type) * 8 + shape.accumulate * 4 +
                                       shape.transpose_a * 2 + shape.transpose_b);
    for (const auto* dims : {&shape.a_dims, &shape.b_dims, &shape.strides}) {
      for (int64_t d : *dims) seed ^= std::hash<int64_t>{}(d) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
    }
    return seed;
  }
};

ffi::Error DataTypeOf(const char* name, ffi::DataType dtype, dt* out) {
  if (dtype == ffi::DataType::F32) *out = dt::f32;
  else if (dtype == ffi::DataType::BF16) *out = dt::bf16;
  else {
    return ffi::Error::InvalidArgument(std::string(name) + " has dtype " + DataTypeName(dtype) +
                                       "; expected float32 or bfloat16");
  }
  return ffi::Error::Success();
}

std::string DimsString(const std::vector<int64_t>& dims) {
  return ShapeString(ffi::Span<const int64_t>(dims.data(), dims.size()));
}

// The shape of a product from its operands' shapes and element types, checked.
ffi::Error DecodeShape(std::vector<int64_t> a_dims, std::vector<int64_t> b_dims, ffi::DataType a_type,
                       ffi::DataType b_type, ffi::DataType c_type, bool transpose_a, bool transpose_b,
                       MatmulShape* shape) {
  MatmulShape result;
  result.transpose_a = transpose_a;
  result.transpose_b = transpose_b;
  JCR_RETURN_IF_ERROR(DataTypeOf("a", a_type, &result.data_type));
  JCR_RETURN_IF_ERROR(DataTypeOf("c", c_type, &result.out_type));
  if (b_type != a_type) return ffi::Error::InvalidArgument("b's element type differs from a's");
  if (result.out_type != dt::f32 && result.out_type != result.data_type) {
    return ffi::Error::InvalidArgument("c must be float32 or a's element type");
  }
  if (a_dims.size() < 2 || a_dims.size() != b_dims.size() || a_dims.size() > DNNL_MAX_NDIMS) {
    return ffi::Error::InvalidArgument("a has shape " + DimsString(a_dims) + " and b " + DimsString(b_dims) +
                                       "; expected the same rank, from 2 to " + std::to_string(DNNL_MAX_NDIMS));
  }
  result.a_dims = std::move(a_dims);
  result.b_dims = std::move(b_dims);
  const size_t rank = result.rank();
  const int64_t k_of_b = result.b_dims[rank - (transpose_b ? 1 : 2)];
  bool batches_agree = true;
  for (size_t i = 0; i + 2 < rank; ++i) {
    const int64_t a = result.a_dims[i], b = result.b_dims[i];
    batches_agree &= a == b || a == 1 || b == 1;
  }
  if (result.k() != k_of_b || !batches_agree) {
    return ffi::Error::InvalidArgument(
        "a has shape " + DimsString(result.a_dims) + (transpose_a ? " (transposed)" : "") + " and b " +
        DimsString(result.b_dims) + (transpose_b ? " (transposed)" : "") +
        "; expected equal contracted dimensions and batch dimensions that are equal or 1");
  }
  *shape = std::move(result);
  return ffi::Error::Success();
}

// The descriptor of the logical [..., rows, cols] operand stored row-major as [..., rows, cols], or as
// [..., cols, rows] where `transposed`.
dnnl::memory::desc OperandDesc(const std::vector<int64_t>& stored, bool transposed, dt type) {
  const size_t rank = stored.size();
  dnnl::memory::dims dims(stored.begin(), stored.end()), strides(rank);
  int64_t stride = 1;
  for (size_t i = rank; i-- > 0;) {
    strides[i] = stride;
    stride *= stored[i];
  }
  if (transposed) {
    std::swap(dims[rank - 2], dims[rank - 1]);
    std::swap(strides[rank - 2], strides[rank - 1]);
  }
  return dnnl::memory::desc(dims, type, strides);
}

std::shared_ptr<const MatmulPlan> MakePlan(const MatmulShape& shape) {
  auto plan = std::make_shared<MatmulPlan>();
  if (shape.strides.empty()) {
    plan->a = OperandDesc(shape.a_dims, shape.transpose_a, shape.data_type);
    plan->b = OperandDesc(shape.b_dims, shape.transpose_b, shape.data_type);
    plan->c = OperandDesc(shape.c_dims(), false, shape.out_type);
  } else {
    const std::vector<int64_t>& s = shape.strides;
    const int64_t m = shape.m(), k = shape.k(), n = shape.n();
    plan->a = dnnl::memory::desc({m, k}, shape.data_type, {s[0], s[1]});
    plan->b = dnnl::memory::desc({k, n}, shape.data_type, {s[2], s[3]});
    plan->c = dnnl::memory::desc({m, n}, shape.out_type, {s[4], s[5]});
  }
  dnnl::primitive_attr attr;
  // As the RNN primitives (plan.cc): each call brings its scratchpad, so that one primitive serves every thread.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (shape.accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  if (shape.packed_rows > 0) {
    // The layout the primitive picks for its weights (format `any`) where it is free to: blocked for its kernels,
    // so that it reads them as they are instead of copying b into that layout at every call (brgemm's copy_B).
    const int64_t k = shape.k(), n = shape.n();
    dnnl::matmul::primitive_desc choice(Engine(), dnnl::memory::desc({shape.packed_rows, k}, shape.data_type, {k, 1}),
                                        dnnl::memory::desc({k, n}, shape.data_type, dnnl::memory::format_tag::any),
                                        dnnl::memory::desc({shape.packed_rows, n}, dt::f32, {n, 1}), attr);
    const dnnl::memory::desc plain = plan->b;
    plan->b = choice.weights_desc();
    plan->pack = Reorder::Make(plain, plan->b);
  }
  dnnl::matmul::primitive_desc pd(Engine(), plan->a, plan->b, plan->c, attr);
  plan->scratchpad_bytes = pd.scratchpad_desc().get_size();
  plan->implementation = pd.impl_info_str();
  plan->primitive = dnnl::matmul(pd);
  return plan;
}

// Least recently used plans are evicted; a plan is immutable and shared by concurrent calls.
class MatmulCache {
 public:
  std::shared_ptr<const MatmulPlan> Get(const MatmulShape& shape) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = index_.find(shape);
      if (it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
      }
    }
    std::shared_ptr<const MatmulPlan> plan = MakePlan(shape);  // outside the lock: building JIT-compiles kernels
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(shape);
    if (it != index_.end()) return it->second->second;
    order_.emplace_front(shape, plan);
    index_[shape] = order_.begin();
    while (order_.size() > kMatmulCacheCapacity) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return plan;
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return order_.size();
  }

 private:
  using Entry = std::pair<MatmulShape, std::shared_ptr<const MatmulPlan>>;
  std::mutex mutex_;
  std::list<Entry> order_;
  std::unordered_map<MatmulShape, std::list<Entry>::iterator, MatmulShapeHash> index_;
};

MatmulCache& Cache() {
  static MatmulCache* cache = new MatmulCache();  // never destroyed: calls may still run while the process exits
  return *cache;
}

std::vector<int64_t> DimsOf(const ffi::AnyBuffer& buffer) {
  auto dims = buffer.dimensions();
  return std::vector<int64_t>(dims.begin(), dims.end());
}

ffi::Error MatmulImpl(ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> c, MatmulAttrs attrs) {
  return Guarded("jax_cudnn_rnn_onednn_matmul", [&]() -> ffi::Error {
    MatmulShape shape;
    JCR_RETURN_IF_ERROR(DecodeShape(DimsOf(a), DimsOf(b), a.element_type(), b.element_type(), c->element_type(),
                                    attrs.transpose_a, attrs.transpose_b, &shape));
    JCR_RETURN_IF_ERROR(CheckBuffer("c", *c, c->element_type(), shape.c_dims()));
    if (c->element_count() == 0) return ffi::Error::Success();
    if (shape.k() == 0) {  // oneDNN refuses an empty contraction; its sum is zero
      std::fill_n(static_cast<char*>(c->untyped_data()), c->size_bytes(), 0);
      return ffi::Error::Success();
    }
    std::shared_ptr<const MatmulPlan> plan = Cache().Get(shape);
    ScratchLease scratch = TakeScratch(plan->scratchpad_bytes);
    AdviseHugePages(c->untyped_data(), c->size_bytes());  // a new buffer per call: no fault per 4 KiB (pages.h)
    return RunOnednn([&](dnnl::stream& stream) -> ffi::Error {
      RunMatmul(*plan, stream, a.untyped_data(), b.untyped_data(), c->untyped_data(), scratch.data());
      stream.wait();
      return ffi::Error::Success();
    });
  });
}

// The shape of a product of `rows` rows with packed weights (`attrs`) of element type `dtype`, checked.
ffi::Error DecodePacked(const PackedAttrs& attrs, ffi::DataType dtype, int64_t rows, MatmulShape* shape) {
  std::vector<int64_t> b_dims(attrs.b_shape.begin(), attrs.b_shape.end());
  if (b_dims.size() != 2 || attrs.rows < 1) {
    return ffi::Error::InvalidArgument("packed weights have b_shape " + DimsString(b_dims) + " for " +
                                       std::to_string(attrs.rows) + " rows; expected 2 dimensions and rows >= 1");
  }
  const int64_t k = b_dims[attrs.transpose_b ? 1 : 0];
  JCR_RETURN_IF_ERROR(
      DecodeShape({rows, k}, std::move(b_dims), dtype, dtype, ffi::DataType::F32, false, attrs.transpose_b, shape));
  shape->packed_rows = attrs.rows;
  return ffi::Error::Success();
}

// Element-wise offsets (in batch entries) of a broadcast operand's batch dimensions `dims` within `batch` (row-major).
int64_t BroadcastIndex(ffi::Span<const int64_t> dims, const std::vector<int64_t>& batch, int64_t flat) {
  int64_t index = 0, stride = 1;
  for (size_t i = batch.size(); i-- > 0;) {
    const int64_t position = flat % batch[i];
    flat /= batch[i];
    if (dims[i] != 1) index += position * stride;
    stride *= dims[i];
  }
  return index;
}

ffi::Error PackImpl(ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> packed, PackedAttrs attrs) {
  return Guarded("jax_cudnn_rnn_onednn_matmul_pack", [&]() -> ffi::Error {
    MatmulShape shape;
    JCR_RETURN_IF_ERROR(DecodePacked(attrs, b.element_type(), attrs.rows, &shape));
    const auto dims = b.dimensions();
    std::vector<int64_t> batch(dims.begin(), dims.end() - std::min<size_t>(dims.size(), 2));
    std::vector<int64_t> expected = batch;
    expected.insert(expected.end(), shape.b_dims.begin(), shape.b_dims.end());
    JCR_RETURN_IF_ERROR(CheckBuffer("b", b, b.element_type(), expected));
    std::shared_ptr<const MatmulPlan> plan = Cache().Get(shape);
    const size_t bytes = plan->b.get_size(), b_bytes = shape.k() * shape.n() * (shape.data_type == dt::bf16 ? 2 : 4);
    std::vector<int64_t> packed_dims = batch;
    packed_dims.push_back(static_cast<int64_t>(bytes));
    JCR_RETURN_IF_ERROR(CheckBuffer("packed", *packed, ffi::DataType::U8, packed_dims));
    int64_t count = 1;
    for (int64_t d : batch) count *= d;
    ScratchLease scratch = TakeScratch(plan->pack.scratchpad_bytes);
    AdviseHugePages(packed->untyped_data(), packed->size_bytes());
    return RunOnednn([&](dnnl::stream& stream) -> ffi::Error {
      for (int64_t i = 0; i < count; ++i) {
        char* from = static_cast<char*>(b.untyped_data()) + i * b_bytes;
        char* to = static_cast<char*>(packed->untyped_data()) + i * bytes;
        if (plan->pack.needed) plan->pack.Run(stream, from, to, scratch.data());
        else std::copy_n(from, bytes, to);  // the primitive reads the plain layout as it is
      }
      stream.wait();
      return ffi::Error::Success();
    });
  });
}

ffi::Error MatmulPackedImpl(ffi::AnyBuffer a, ffi::AnyBuffer packed, ffi::Result<ffi::AnyBuffer> c, PackedAttrs attrs) {
  return Guarded("jax_cudnn_rnn_onednn_matmul_packed", [&]() -> ffi::Error {
    const auto a_dims = a.dimensions(), p_dims = packed.dimensions(), c_dims = c->dimensions();
    if (a_dims.size() < 2 || p_dims.size() + 1 != a_dims.size() || c_dims.size() != a_dims.size()) {
      return ffi::Error::InvalidArgument("a has shape " + ShapeString(a_dims) + ", packed " + ShapeString(p_dims) +
                                         " and c " + ShapeString(c_dims) +
                                         "; expected a [..., M, K], packed [..., bytes] and c [..., M, N]");
    }
    const size_t batch_rank = a_dims.size() - 2;
    const int64_t m = a_dims[batch_rank];
    MatmulShape one;  // one product of m rows, to check the operands against
    JCR_RETURN_IF_ERROR(DecodePacked(attrs, a.element_type(), m, &one));
    std::vector<int64_t> batch(batch_rank);
    bool folds = true;  // every row reads the same weights: one product over all of them
    int64_t count = 1;
    for (size_t i = 0; i < batch_rank; ++i) {
      batch[i] = std::max(a_dims[i], p_dims[i]);
      if ((a_dims[i] != batch[i] && a_dims[i] != 1) || (p_dims[i] != batch[i] && p_dims[i] != 1)) {
        return ffi::Error::InvalidArgument("a has shape " + ShapeString(a_dims) + " and packed " + ShapeString(p_dims) +
                                           "; expected batch dimensions that are equal or 1");
      }
      folds &= p_dims[i] == 1 && a_dims[i] == batch[i];
      count *= batch[i];
    }
    std::vector<int64_t> expected_c = batch;
    expected_c.push_back(m);
    expected_c.push_back(one.n());
    JCR_RETURN_IF_ERROR(CheckBuffer("c", *c, ffi::DataType::F32, expected_c));
    if (a_dims.back() != one.k()) {
      return ffi::Error::InvalidArgument("a has shape " + ShapeString(a_dims) + "; expected K = " +
                                         std::to_string(one.k()) + " columns, as the packed weights");
    }
    MatmulShape shape = one;
    if (folds) shape.a_dims[0] = m * count;
    std::shared_ptr<const MatmulPlan> plan = Cache().Get(shape);
    const size_t bytes = plan->b.get_size();
    if (p_dims.back() != static_cast<int64_t>(bytes) || packed.element_type() != ffi::DataType::U8) {
      return ffi::Error::InvalidArgument("packed has shape " + ShapeString(p_dims) + "; expected uint8 [..., " +
                                         std::to_string(bytes) + "] from jax_cudnn_rnn_onednn_matmul_pack");
    }
    if (c->element_count() == 0) return ffi::Error::Success();
    ScratchLease scratch = TakeScratch(plan->scratchpad_bytes);
    const size_t a_bytes = m * one.k() * (one.data_type == dt::bf16 ? 2 : 4), c_bytes = m * one.n() * 4;
    return RunOnednn([&](dnnl::stream& stream) -> ffi::Error {
      const int64_t products = folds ? 1 : count;
      for (int64_t i = 0; i < products; ++i) {
        RunMatmul(*plan, stream, static_cast<char*>(a.untyped_data()) + BroadcastIndex(a_dims, batch, i) * a_bytes,
                  static_cast<char*>(packed.untyped_data()) + BroadcastIndex(p_dims, batch, i) * bytes,
                  static_cast<char*>(c->untyped_data()) + i * c_bytes, scratch.data());
      }
      stream.wait();
      return ffi::Error::Success();
    });
  });
}

}  // namespace

std::shared_ptr<const MatmulPlan> ProductPlan(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                                              ffi::DataType dtype, ffi::DataType out_dtype, bool transpose_a,
                                              bool transpose_b) {
  MatmulShape shape;
  ffi::Error error = DecodeShape(a_dims, b_dims, dtype, dtype, out_dtype, transpose_a, transpose_b, &shape);
  if (error.failure()) throw std::invalid_argument(error.message());
  return Cache().Get(shape);
}

std::shared_ptr<const MatmulPlan> StridedProductPlan(int64_t m, int64_t k, int64_t n, const Strides& a_strides,
                                                     const Strides& b_strides, const Strides& c_strides,
                                                     ffi::DataType dtype, ffi::DataType out_dtype, bool accumulate) {
  MatmulShape shape;
  ffi::Error error = DecodeShape({m, k}, {k, n}, dtype, dtype, out_dtype, false, false, &shape);
  if (error.failure()) throw std::invalid_argument(error.message());
  shape.strides = {a_strides[0], a_strides[1], b_strides[0], b_strides[1], c_strides[0], c_strides[1]};
  shape.accumulate = accumulate;
  return Cache().Get(shape);
}

std::string MatmulImplementation(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                                 ffi::DataType dtype, ffi::DataType out_dtype, bool transpose_a, bool transpose_b) {
  return ProductPlan(a_dims, b_dims, dtype, out_dtype, transpose_a, transpose_b)->implementation;
}

void RunMatmul(const MatmulPlan& plan, const dnnl::stream& stream, const void* a, const void* b, void* c,
               void* scratchpad) {
  const dnnl::engine& engine = Engine();
  // oneDNN's memory objects take non-const pointers; a product only reads a and b.
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(plan.a, engine, const_cast<void*>(a))},
                                             {DNNL_ARG_WEIGHTS, dnnl::memory(plan.b, engine, const_cast<void*>(b))},
                                             {DNNL_ARG_DST, dnnl::memory(plan.c, engine, c)}};
  if (plan.scratchpad_bytes > 0) {
    const dnnl::memory::desc bytes({static_cast<dnnl::memory::dim>(plan.scratchpad_bytes)}, dt::u8,
                                   dnnl::memory::format_tag::a);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(bytes, engine, scratchpad));
  }
  plan.primitive.execute(stream, args);
}

std::shared_ptr<const MatmulPlan> PackedProductPlan(int64_t rows, int64_t packed_rows, int64_t k, int64_t n,
                                                    ffi::DataType dtype, bool transpose_b) {
  MatmulShape shape;
  std::vector<int64_t> b_shape = transpose_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
  const PackedAttrs attrs{packed_rows, ffi::Span<const int64_t>(b_shape.data(), b_shape.size()), transpose_b};
  ffi::Error error = DecodePacked(attrs, dtype, rows, &shape);
  if (error.failure()) throw std::invalid_argument(error.message());
  return Cache().Get(shape);
}

size_t PackedBytes(int64_t rows, const std::vector<int64_t>& b_shape, ffi::DataType dtype, bool transpose_b) {
  MatmulShape shape;
  const PackedAttrs attrs{rows, ffi::Span<const int64_t>(b_shape.data(), b_shape.size()), transpose_b};
  ffi::Error error = DecodePacked(attrs, dtype, rows, &shape);
  if (error.failure()) throw std::invalid_argument(error.message());
  return Cache().Get(shape)->b.get_size();
}

size_t CachedMatmulCount() { return Cache().size(); }

XLA_FFI_DEFINE_HANDLER_SYMBOL(Matmul, MatmulImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // a
                                  .Arg<ffi::AnyBuffer>()  // b
                                  .Ret<ffi::AnyBuffer>()  // c
                                  .Attrs<MatmulAttrs>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(MatmulPack, PackImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // b
                                  .Ret<ffi::AnyBuffer>()  // packed
                                  .Attrs<PackedAttrs>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(MatmulPacked, MatmulPackedImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // a
                                  .Arg<ffi::AnyBuffer>()  // packed
                                  .Ret<ffi::AnyBuffer>()  // c
                                  .Attrs<PackedAttrs>());

}  // namespace jax_cudnn_rnn::onednn
