#include "gemm_recurrence.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ffi_args.h"
#include "gemm_cells.h"
#include "guarded.h"
#include "matmul.h"
#include "pages.h"
#include "plan.h"
#include "recurrence_operands.h"
#include "rnn_config.h"
#include "scratch.h"
#include "small_products.h"
#include "threading.h"

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    ::jax_cudnn_rnn::onednn::RecurrenceAttrs, JCR_RNN_CONFIG_ATTRS, ::xla::ffi::StructMember<bool>("reverse"),
    ::xla::ffi::StructMember<bool>("training"), ::xla::ffi::StructMember<int64_t>("rows"),
    ::xla::ffi::StructMember<std::string_view>("weights_dtype"), ::xla::ffi::StructMember<bool>("has_lengths"),
    ::xla::ffi::StructMember<::xla::ffi::Span<const int64_t>>("blocks"),
    ::xla::ffi::StructMember<bool>("params_gradient"), ::xla::ffi::StructMember<int64_t>("b_in_offset"),
    ::xla::ffi::StructMember<int64_t>("b_rec_offset"));

namespace jax_cudnn_rnn::onednn {

namespace ffi = ::xla::ffi;

namespace {

using Result = ffi::Result<ffi::AnyBuffer>;

// x as the input product reads it, in the weights' type: x itself where it has that type, else rounded into `buffer`.
const void* InputOperand(const Recurrence& r, const ffi::AnyBuffer& x, void* buffer, int64_t chunks) {
  if (x.element_type() == r.weights_type) return x.untyped_data();
  const int64_t count = r.steps * r.batch;
  ParallelFor(count, chunks, [&](int64_t, int64_t begin, int64_t end) {
    StoreRow(r.bf16(), static_cast<const float*>(x.untyped_data()) + begin * r.inputs,
             static_cast<char*>(buffer) + begin * r.inputs * r.weights_bytes(), (end - begin) * r.inputs);
  });
  return buffer;
}

// One product with the layer's weights, or with a block of them: `plan` over b at `b`, its result at column `column`
// of the [rows, G*H] products (a block's first gate's).
struct Product {
  std::shared_ptr<const MatmulPlan> plan;
  const void* b = nullptr;
  int64_t column = 0;
  const WeightBlock* block = nullptr;  // in place: the block b is
  // The plan writes the product's transpose, b times a's transpose, into scratch ([n, rows]; TransposedBytes): a rows
  // block read as it lies. As the transposed operand of a b^T oneDNN 3.2's matmul runs its generic "gemm:jit:f32" on
  // it, as the first operand its brgemm kernels ("brg:avx512_core"): per step of a lax.scan of one-step calls at B=64,
  // H=512 the named GRU and LSTM and Equinox's took 1.23-1.31x Flax's cell's forward before, 1.02-1.18x after
  // (2026-12-01, Emerald Rapids, 2 cores).
  bool transposed = false;
};

// From how many rows a rows block's product is transposed: below, the brgemm kernel's few columns and the pass that
// transposes them cost more than the generic kernel saves (same scan, H=512: at B=4 1.60-1.72x Flax's cell's forward
// transposed, 1.18-1.24x not; at B=8 1.09-1.25x and 1.07-1.08x; at B=16 0.90x and 1.82-1.84x).
constexpr int64_t kTransposedProductRows = 16;

// Scratch bytes for the transposed products of `products` over `rows` rows, one after another.
size_t TransposedBytes(const std::vector<Product>& products, int64_t rows, int64_t units) {
  size_t bytes = 0;
  for (const Product& p : products) {
    if (p.transposed) bytes += static_cast<size_t>(p.block->gates * units * rows * 4);
  }
  return bytes;
}

// The weights operands of a call: `packed`, then the trailing `pieces` (in place), which the blocks index.
std::vector<const ffi::AnyBuffer*> WeightsOperands(const ffi::AnyBuffer& packed,
                                                   const std::vector<std::optional<ffi::AnyBuffer>>& pieces) {
  std::vector<const ffi::AnyBuffer*> operands = {&packed};
  for (const auto& piece : pieces) operands.push_back(&*piece);
  return operands;
}

// The trailing `pieces` arguments of a call in place whose blocks read more operands than `packed`.
ffi::Error TakePieces(OptionalBuffers<ffi::RemainingArgs>& args, const Recurrence& r,
                      std::vector<std::optional<ffi::AnyBuffer>>* pieces) {
  pieces->resize(std::max<int64_t>(r.operands - 1, 0));
  for (auto& piece : *pieces) JCR_RETURN_IF_ERROR(args.Take(true, "piece", &piece));
  return ffi::Error::Success();
}

// Products of so few rows that a oneDNN call per block costs more than the product itself (a frontend's kernels are a
// block per gate: 6-8 calls for a step, each a dispatch to the threads): written by the handlers' own register-tiled
// loops (small_products.h), every block in one parallel pass, reading each block where it lies. Up to 2 rows always; up
// to 16 where the tiles run (AVX-512) and the layer's weights fit in 2 MiB (H <= 256). Per step of a lax.scan of 200
// one-step calls, ours / Flax's cell, forward, the drop-in and the named modules, GRU and LSTM: at B=4, H=128 2.43-3.76
// on oneDNN's products, 1.42-2.15 on these loops; at B=16, H=128 1.87-2.27 and 1.40-1.87; at B=4, H=256 0.86-1.74 and
// 0.63-1.47. At H=512 neither won throughout (the drop-in's GRU forward 0.74-0.82 on oneDNN's products, 1.06-1.21 on
// the loops, the named modules' the other way), so there oneDNN's products stay (Intel Emerald Rapids, 2 cores,
// 2026-12-01).
constexpr int64_t kSmallProductRows = 2, kTiledProductRows = 16;
constexpr int64_t kTiledProductBytes = int64_t{2} << 20;

bool SmallProducts(const Recurrence& r, int64_t rows) {
  if (!r.in_place || rows > kTiledProductRows) return false;
  if (rows <= kSmallProductRows) return true;
  if (!TiledProducts()) return false;  // the plain loops, measured only up to 2 rows
  int64_t bytes = 0;
  for (const WeightBlock& block : r.blocks) bytes += r.depth(block) * block.gates * r.units * r.weights_bytes();
  return bytes <= kTiledProductBytes;
}

// The forward's products: w_in's over every step's rows (none for skip input), w_rec's over one step's. In place, one
// per block, each where it lies; else w_in its own argument and w_rec packed.
ffi::Error ForwardProducts(const Recurrence& r, const std::vector<const ffi::AnyBuffer*>& operands,
                           const std::optional<ffi::AnyBuffer>& w_in, std::vector<Product>* in,
                           std::vector<Product>* rec) {
  const int64_t TB = r.steps * r.batch, B = r.batch, H = r.units, W = r.width(), I = r.inputs;
  const auto wtype = r.weights_type, F32 = ffi::DataType::F32;
  if (!r.in_place) {
    rec->push_back({PackedProductPlan(B, r.rows, H, W, wtype, true), operands[0]->untyped_data(), 0});
    JCR_RETURN_IF_ERROR(CheckPacked(*operands[0], *rec->back().plan));
    if (w_in && TB > 0) in->push_back({ProductPlan({TB, I}, {W, I}, wtype, F32, false, true), w_in->untyped_data(), 0});
    return ffi::Error::Success();
  }
  JCR_RETURN_IF_ERROR(CheckInPlace(operands, r));
  for (const WeightBlock& block : r.blocks) {
    const int64_t rows = block.matrix == 0 ? TB : B, K = r.depth(block), n = block.gates * H;
    if (rows == 0) continue;
    // x W^T or h W^T: the block, [n, K] as it lies, read as its transpose [K, n] (a columns block), or the product's
    // transpose W x^T (a rows block); no plan where the handlers' own loops write the products (SmallProducts)
    Product product{nullptr, At(*operands[block.operand], r, block), block.gate0 * H, &block};
    if (!SmallProducts(r, rows)) {
      product.transposed = !block.columns() && rows >= kTransposedProductRows;
      product.plan =
          product.transposed
              ? StridedProductPlan(n, K, rows, {block.row_stride, block.col_stride}, {1, K}, {rows, 1}, wtype, F32)
              : StridedProductPlan(rows, K, n, {K, 1}, {block.col_stride, block.row_stride}, {W, 1}, wtype, F32);
    }
    (block.matrix == 0 ? in : rec)->push_back(std::move(product));
  }
  return ffi::Error::Success();
}

// c [rows, W] (float32) at each product's columns = a [rows, K] (wdtype) times its block, transposed: the forward's
// products. Parallel over the blocks' rows, each a dot product (rows form) or a run of them (columns form).
void SmallForward(const Recurrence& r, int64_t rows, const void* a, int64_t K, const std::vector<Product>& products,
                  float* c) {
  const int64_t W = r.width();
  const size_t bytes = r.weights_bytes();
  std::vector<float> a_rows(rows * K);
  LoadRow(r.bf16(), a, a_rows.data(), rows * K);
  std::vector<int64_t> first(products.size() + 1, 0);
  for (size_t i = 0; i < products.size(); ++i) first[i + 1] = first[i] + products[i].block->gates * r.units;
  ParallelFor(first.back(), ParallelThreads(), [&](int64_t, int64_t begin, int64_t end) {
    for (size_t i = 0; i < products.size(); ++i) {
      const int64_t lo = std::max(begin, first[i]) - first[i], hi = std::min(end, first[i + 1]) - first[i];
      const WeightBlock& block = *products[i].block;
      const auto* w = static_cast<const char*>(products[i].b);
      float* rows_out = c + products[i].column;
      if (lo >= hi) continue;
      if (block.columns()) {
        ProductColumns(r.bf16(), a_rows.data(), K, rows, K, w + lo * bytes, block.col_stride, hi - lo, rows_out + lo, W,
                       false);
      } else {
        ProductRows(r.bf16(), a_rows.data(), K, rows, K, w + lo * block.row_stride * bytes, block.row_stride, hi - lo,
                    rows_out + lo, W, false);
      }
    }
  });
}

// c [rows, W] (float32) at each product's columns = a [rows, K] times its weights: the handlers' own loops where the
// rows are few (SmallProducts), else oneDNN's products, waited for; the transposed ones written one after another into
// `transposed` (TransposedBytes) and from there, in one parallel pass, into their columns.
void RunForwardProducts(const Recurrence& r, dnnl::stream& stream, int64_t rows, const void* a, int64_t K,
                        const std::vector<Product>& products, float* c, void* scratchpad, float* transposed) {
  if (SmallProducts(r, rows)) return SmallForward(r, rows, a, K, products, c);
  std::vector<const float*> written(products.size(), nullptr);
  float* next = transposed;
  for (size_t i = 0; i < products.size(); ++i) {
    const Product& product = products[i];
    if (!product.transposed) {
      RunMatmul(*product.plan, stream, a, product.b, c + product.column, scratchpad);
      continue;
    }
    RunMatmul(*product.plan, stream, product.b, a, next, scratchpad);
    written[i] = next;
    next += product.block->gates * r.units * rows;
  }
  stream.wait();
  if (next == transposed) return;
  const int64_t W = r.width();
  ParallelFor(rows, ParallelThreads(), [&](int64_t, int64_t begin, int64_t end) {
    for (size_t p = 0; p < products.size(); ++p) {
      if (written[p] == nullptr) continue;
      const int64_t n = products[p].block->gates * r.units;
      for (int64_t i = begin; i < end; ++i) {
        float* out = c + i * W + products[p].column;
        for (int64_t j = 0; j < n; ++j) out[j] = written[p][j * rows + i];
      }
    }
  });
}

ffi::Error GemmForwardImpl(ffi::AnyBuffer x, ffi::AnyBuffer packed, ffi::AnyBuffer b_in, ffi::AnyBuffer b_rec,
                           ffi::AnyBuffer h0, ffi::RemainingArgs optional_args, Result y, Result h_n,
                           ffi::RemainingRets optional_rets, RecurrenceAttrs attrs) {
  return Guarded("jax_cudnn_rnn_onednn_gemm_forward", [&]() -> ffi::Error {
    Recurrence r;
    JCR_RETURN_IF_ERROR(DecodeRecurrence(attrs, x, &r));
    const bool lstm = r.mode == Mode::kLstm, gru = r.mode == Mode::kGru, training = r.training;
    const int64_t T = r.steps, B = r.batch, H = r.units, W = r.width(), I = r.inputs;
    std::optional<ffi::AnyBuffer> w_in, c0;
    OptionalBuffers args(optional_args, "argument");
    JCR_RETURN_IF_ERROR(args.Take(!r.skip_input && !r.in_place, "w_in", &w_in));
    JCR_RETURN_IF_ERROR(args.Take(lstm, "c0", &c0));
    JCR_RETURN_IF_ERROR(TakeLengths(args, attrs.has_lengths, &r));
    std::vector<std::optional<ffi::AnyBuffer>> pieces;
    JCR_RETURN_IF_ERROR(TakePieces(args, r, &pieces));
    JCR_RETURN_IF_ERROR(args.CheckAllTaken());
    std::optional<Result> c_n, gates, aux, h_prev, h_gemm;
    OptionalBuffers rets(optional_rets, "result");
    JCR_RETURN_IF_ERROR(rets.Take(lstm, "c_n", &c_n));
    JCR_RETURN_IF_ERROR(rets.Take(training, "gates", &gates));
    JCR_RETURN_IF_ERROR(rets.Take(training && (lstm || gru), "aux", &aux));
    JCR_RETURN_IF_ERROR(rets.Take(training && gru, "h_prev", &h_prev));
    JCR_RETURN_IF_ERROR(rets.Take(training, "h_gemm", &h_gemm));
    JCR_RETURN_IF_ERROR(rets.CheckAllTaken());
    const auto F32 = ffi::DataType::F32;
    if (w_in) JCR_RETURN_IF_ERROR(CheckBuffer("w_in", *w_in, r.weights_type, {W, I}));
    JCR_RETURN_IF_ERROR(CheckBuffer("b_in", b_in, F32, {W}));
    JCR_RETURN_IF_ERROR(CheckBuffer("b_rec", b_rec, F32, {W}));
    JCR_RETURN_IF_ERROR(CheckBuffer("h0", h0, F32, {B, H}));
    JCR_RETURN_IF_ERROR(CheckBuffer("h_n", *h_n, F32, {B, H}));
    JCR_RETURN_IF_ERROR(CheckOutputType("y", *y, r));
    if (lstm) {
      JCR_RETURN_IF_ERROR(CheckBuffer("c0", *c0, F32, {B, H}));
      JCR_RETURN_IF_ERROR(CheckBuffer("c_n", **c_n, F32, {B, H}));
    }
    if (training) {
      JCR_RETURN_IF_ERROR(CheckBuffer("gates", **gates, F32, {T, B, W}));
      if (aux) JCR_RETURN_IF_ERROR(CheckBuffer("aux", **aux, F32, {T, B, H}));
      if (h_prev) JCR_RETURN_IF_ERROR(CheckBuffer("h_prev", **h_prev, F32, {T, B, H}));
      JCR_RETURN_IF_ERROR(CheckBuffer("h_gemm", **h_gemm, r.weights_type, {T, B, H}));
    }
    std::vector<Product> in, rec;
    JCR_RETURN_IF_ERROR(ForwardProducts(r, WeightsOperands(packed, pieces), w_in, &in, &rec));
    size_t scratchpad_bytes = 0;
    for (const auto* products : {&in, &rec}) {
      for (const Product& product : *products) {
        if (product.plan) scratchpad_bytes = std::max(scratchpad_bytes, product.plan->scratchpad_bytes);
      }
    }

    // The input product of every step and what each step reads and writes come from the extension's pool: buffers
    // XLA allocated would be new pages to fault in at every call.
    RegionAllocator layout;
    const Region xp = layout.Add(T * B * W * 4), x_operand = layout.Add(T * B * I * r.weights_bytes()),
                 hp = layout.Add(B * W * 4), state[2] = {layout.Add(B * H * 4), layout.Add(B * H * 4)},
                 cell[2] = {layout.Add(B * H * 4), layout.Add(B * H * 4)},
                 operand = layout.Add(B * H * r.weights_bytes()), step_gates = layout.Add(B * W * 4),
                 step_aux = layout.Add(B * H * 4), scratchpad = layout.Add(scratchpad_bytes),
                 transposed = layout.Add(std::max(TransposedBytes(in, T * B, H), TransposedBytes(rec, B, H)));
    ScratchLease lease = TakeScratch(layout.total());
    void* work = lease.data();
    // XLA allocates the outputs anew for every call: huge pages spare a fault per 4 KiB (pages.h).
    for (std::optional<Result>* saved : {&gates, &aux, &h_prev, &h_gemm}) {
      if (*saved) AdviseHugePages((**saved)->untyped_data(), (**saved)->size_bytes());
    }
    AdviseHugePages(y->untyped_data(), y->size_bytes());
    const bool y_bf16 = y->element_type() == ffi::DataType::BF16;
    const auto* xp_data = reinterpret_cast<const float*>(xp.in(work));
    const auto* b_in_data = static_cast<const float*>(b_in.untyped_data());
    const auto* b_rec_data = static_cast<const float*>(b_rec.untyped_data());

    return RunOnednn([&](dnnl::stream& stream) -> ffi::Error {
      const int64_t chunks = Chunks(B);
      if (!in.empty()) {  // W x for every step at once
        const void* x_rows = InputOperand(r, x, x_operand.in(work), chunks);
        auto* xp_out = reinterpret_cast<float*>(xp.in(work));
        RunForwardProducts(r, stream, T * B, x_rows, I, in, xp_out, scratchpad.in(work),
                           reinterpret_cast<float*>(transposed.in(work)));
      } else if (T * B > 0 && r.skip_input) {  // skip input: x itself enters every gate
        ParallelFor(T * B, chunks, [&](int64_t, int64_t begin, int64_t end) {
          for (int64_t row = begin; row < end; ++row) {
            float* out = reinterpret_cast<float*>(xp.in(work)) + row * W;
            LoadRow(x.element_type() == ffi::DataType::BF16,
                    static_cast<const char*>(x.untyped_data()) + row * I * (x.element_type() == F32 ? 4 : 2), out, I);
            for (int64_t g = 1; g < r.gates; ++g) std::copy_n(out, H, out + g * H);
          }
        });
      }
      float* h = reinterpret_cast<float*>(state[0].in(work));
      float* h_next = reinterpret_cast<float*>(state[1].in(work));
      float* c = reinterpret_cast<float*>(cell[0].in(work));
      float* c_next = reinterpret_cast<float*>(cell[1].in(work));
      std::memcpy(h, h0.untyped_data(), B * H * 4);
      if (lstm) std::memcpy(c, c0->untyped_data(), B * H * 4);
      for (int64_t s = 0; s < T && B > 0; ++s) {
        const int64_t t = r.time(s);
        // The product's operand: h rounded to the weights' type (kept for the weight gradient in training).
        void* a = training ? Row<char>((*h_gemm)->untyped_data(), r, t, 0, H, r.weights_bytes()) : operand.in(work);
        const bool rounds = training || r.bf16();
        ParallelFor(B, chunks, [&](int64_t, int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end && rounds; ++b) {
            StoreRow(r.bf16(), h + b * H, static_cast<char*>(a) + b * H * r.weights_bytes(), H);
          }
          if (h_prev) {
            std::memcpy(Row<float>((*h_prev)->untyped_data(), r, t, begin, H, 4), h + begin * H, (end - begin) * H * 4);
          }
        });
        auto* products = reinterpret_cast<float*>(hp.in(work));
        RunForwardProducts(r, stream, B, rounds ? a : h, H, rec, products, scratchpad.in(work),
                           reinterpret_cast<float*>(transposed.in(work)));
        ParallelFor(B, chunks, [&](int64_t, int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            float* row_gates = training ? Row<float>((*gates)->untyped_data(), r, t, b, W, 4)
                                        : reinterpret_cast<float*>(step_gates.in(work)) + b * W;
            float* row_aux = aux && gru ? Row<float>((*aux)->untyped_data(), r, t, b, H, 4)
                                        : reinterpret_cast<float*>(step_aux.in(work)) + b * H;
            char* row_y = Row<char>(y->untyped_data(), r, t, b, H, y_bf16 ? 2 : 4);
            if (r.padding(t, b)) {  // the state as it was, the output zero
              std::memcpy(h_next + b * H, h + b * H, H * 4);
              if (lstm) std::memcpy(c_next + b * H, c + b * H, H * 4);
              std::memset(row_y, 0, H * (y_bf16 ? 2 : 4));
              // The backward reads no gates here, but they are outputs XLA sees: written, as zeros.
              std::memset(row_gates, 0, W * 4);
              if (gru) std::memset(row_aux, 0, H * 4);
            } else {
              ForwardRow(r.mode, H, xp_data + (t * B + b) * W, products + b * W, b_in_data, b_rec_data, h + b * H,
                         c + b * H, h_next + b * H, c_next + b * H, row_gates, row_aux);
              StoreRow(y_bf16, h_next + b * H, row_y, H);
            }
            if (aux && lstm) std::memcpy(Row<float>((*aux)->untyped_data(), r, t, b, H, 4), c_next + b * H, H * 4);
          }
        });
        std::swap(h, h_next);
        std::swap(c, c_next);
      }
      std::memcpy(h_n->untyped_data(), h, B * H * 4);
      if (lstm) std::memcpy((*c_n)->untyped_data(), c, B * H * 4);
      return ffi::Error::Success();
    });
  });
}

// Products over so few rows (T * B) that oneDNN's matmul is the slower way to write them: a weight gradient of one
// step, B=1, [1, 1536]^T [1, 512], took 0.6 ms on its `gemm:jit` where this loop writes the 3 MB in 0.09 (Zen 3).
constexpr int64_t kOuterProductRows = 2;

// One outer-product sum: out [M, N] (wdtype, rows `ldo` apart) = a^T b for a [rows, M] and b [rows, N] of wdtype
// (rows `lda` and `ldb` apart).
struct OuterProduct {
  int64_t M, N;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* out;
  int64_t ldo;
};

// `products` over rows <= kOuterProductRows: each row of each output written once, in one parallel pass over all of
// their rows (a dispatch per block would cost more than the products themselves at one row).
void OuterProducts(const Recurrence& r, int64_t rows, const std::vector<OuterProduct>& products) {
  std::vector<std::vector<float>> a_rows(products.size()), b_rows(products.size());
  std::vector<int64_t> first(products.size() + 1, 0);  // each product's first row among all of them
  int64_t widest = 0;
  for (size_t i = 0; i < products.size(); ++i) {
    const OuterProduct& p = products[i];
    a_rows[i].resize(rows * p.M);
    b_rows[i].resize(rows * p.N);
    for (int64_t k = 0; k < rows; ++k) {
      LoadRow(r.bf16(), static_cast<const char*>(p.a) + k * p.lda * r.weights_bytes(), a_rows[i].data() + k * p.M, p.M);
      LoadRow(r.bf16(), static_cast<const char*>(p.b) + k * p.ldb * r.weights_bytes(), b_rows[i].data() + k * p.N, p.N);
    }
    first[i + 1] = first[i] + p.M;
    widest = std::max(widest, p.N);
  }
  ParallelFor(first.back(), ParallelThreads(), [&](int64_t, int64_t begin, int64_t end) {
    std::vector<float> row(widest);
    size_t i = std::upper_bound(first.begin(), first.end(), begin) - first.begin() - 1;
    for (int64_t g = begin; g < end; ++g) {
      while (g >= first[i + 1]) ++i;
      const OuterProduct& p = products[i];
      const int64_t m = g - first[i];
      std::fill_n(row.begin(), p.N, 0.0f);
      for (int64_t k = 0; k < rows; ++k) {
        const float scale = a_rows[i][k * p.M + m];
        const float* from = b_rows[i].data() + k * p.N;
        for (int64_t n = 0; n < p.N; ++n) row[n] += scale * from[n];
      }
      StoreRow(r.bf16(), row.data(), static_cast<char*>(p.out) + m * p.ldo * r.weights_bytes(), p.N);
    }
  });
}

// The rest of the weights operands' gradients (`params_gradient`) beside the blocks the products write: the biases'
// sums rounded into their slots of the first, zeros wherever a rows operand holds nothing of this layer (OperandSlots;
// CheckInPlace: no two overlap, and a columns operand's blocks cover it).
void FinishParamsGradient(const Recurrence& r, const float* d_b_in, const float* d_b_rec,
                          const std::vector<ffi::AnyBuffer*>& gradients) {
  const size_t bytes = r.weights_bytes();
  auto* first = static_cast<char*>(gradients[0]->untyped_data());
  for (const auto& [offset, sums] : {std::pair{r.b_in_offset, d_b_in}, std::pair{r.b_rec_offset, d_b_rec}}) {
    if (offset != -1) StoreRow(r.bf16(), sums, first + offset * bytes, r.width());
  }
  for (int64_t o = 0; o < r.operands; ++o) {
    bool columns = false;
    for (const WeightBlock& block : r.blocks) columns |= block.operand == o && block.columns();
    if (columns) continue;
    auto* d = static_cast<char*>(gradients[o]->untyped_data());
    const int64_t size = static_cast<int64_t>(gradients[o]->element_count());
    std::vector<Slot> slots = OperandSlots(r, o);
    std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.offset < b.offset; });
    int64_t done = 0;
    for (const Slot& slot : slots) {
      if (slot.offset > done) std::memset(d + done * bytes, 0, (slot.offset - done) * bytes);
      done = std::max(done, slot.offset + slot.size);
    }
    if (size > done) std::memset(d + done * bytes, 0, (size - done) * bytes);
  }
}

// Where a block's gradient goes: its first element and its strides (a block of an operand's gradient where the backward
// gives the operands' whole gradients, else of the dense [G*H, K] gradient of its matrix).
struct GradientBlock {
  WeightBlock block;
  const void* weights = nullptr;  // the block where it lies (dx's and dh's products read it)
  char* out = nullptr;
  int64_t row_stride = 0, col_stride = 0;
};

// Zero gradients of row `b` at time `t`, a padding step: its gates' (and a GRU's recurrent product's) in the arrays
// the products read, and x's where x enters every gate (skip input: no product writes dx).
void PaddingRowGradients(const Recurrence& r, int64_t t, int64_t b, void* d_hp, void* d_xp, ffi::AnyBuffer& dx) {
  const int64_t W = r.width();
  std::memset(Row<char>(d_xp, r, t, b, W, r.weights_bytes()), 0, W * r.weights_bytes());
  if (d_hp != nullptr) std::memset(Row<char>(d_hp, r, t, b, W, r.weights_bytes()), 0, W * r.weights_bytes());
  if (r.skip_input) {
    const size_t bytes = dx.element_type() == ffi::DataType::BF16 ? 2 : 4;
    std::memset(Row<char>(dx.untyped_data(), r, t, b, r.inputs, bytes), 0, r.inputs * bytes);
  }
}

// out [rows, K] (float32) = the sum over `blocks` of d [rows, W] (wdtype) at the block's columns times the block: the
// backward's products (dh through w_rec, dx through w_in). Parallel over out's columns, each block's rows adding
// runs of them (rows form) or each column a dot product (columns form).
void SmallBackward(const Recurrence& r, int64_t rows, const void* d, const std::vector<const GradientBlock*>& blocks,
                   int64_t K, float* out) {
  const int64_t W = r.width();
  const size_t bytes = r.weights_bytes();
  std::vector<float> d_rows(rows * W);
  LoadRow(r.bf16(), d, d_rows.data(), rows * W);
  ParallelFor(K, ParallelThreads(), [&](int64_t, int64_t k0, int64_t k1) {
    for (int64_t b = 0; b < rows; ++b) std::fill(out + b * K + k0, out + b * K + k1, 0.0f);
    for (const GradientBlock* g : blocks) {
      const WeightBlock& block = g->block;
      const auto* w = static_cast<const char*>(g->weights);
      const int64_t n = block.gates * r.units, column = block.gate0 * r.units;
      if (block.columns()) {  // out[b, k] += sum_j d[b, column + j] w[k * col_stride + j]
        ProductRows(r.bf16(), d_rows.data() + column, W, rows, n, w + k0 * block.col_stride * bytes, block.col_stride,
                    k1 - k0, out + k0, K, true);
      } else {  // out[b, k] += sum_j d[b, column + j] w[j * row_stride + k]
        ProductColumns(r.bf16(), d_rows.data() + column, W, rows, n, w + k0 * bytes, block.row_stride, k1 - k0,
                       out + k0, K, true);
      }
    }
  });
}

// Whether the backward's products over `rows` rows through `blocks` (dh's through w_rec's, dx's through w_in's) are
// computed transposed, as the forward's of a rows block (Product::transposed): from kTransposedProductRows rows where
// every block is a columns block (a Flax kernel, [K, n] as it lies). d times such a block, read as its transpose, runs
// oneDNN 3.2's generic "gemm:jit:f32"; the block times d's transpose, d transposed into scratch first, its brgemm
// kernels. One step of the drop-in LSTM at B=16, H=512 spent 0.81 ms in the first (8 products) where the named
// modules' products, the same arithmetic on rows blocks, took 0.23 (AMD Zen 5, 2 cores, 2026-12-01).
bool TransposedBackward(const Recurrence& r, const std::vector<const GradientBlock*>& blocks, int64_t rows) {
  if (!r.in_place || blocks.empty() || rows < kTransposedProductRows || SmallProducts(r, rows)) return false;
  return std::all_of(blocks.begin(), blocks.end(), [](const GradientBlock* g) { return g->block.columns(); });
}

// to [cols, rows] = from [rows, cols] (elements of `bytes` bytes, from's rows `ld` elements apart), in parallel over
// to's rows.
void Transpose(const void* from, int64_t rows, int64_t cols, int64_t ld, size_t bytes, void* to) {
  auto run = [&](auto element) {
    using E = decltype(element);
    const auto* src = static_cast<const E*>(from);
    auto* dst = static_cast<E*>(to);
    ParallelFor(cols, ParallelThreads(), [&](int64_t, int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        for (int64_t i = 0; i < rows; ++i) dst[j * rows + i] = src[i * ld + j];
      }
    });
  };
  if (bytes == 2) run(uint16_t{});
  else run(uint32_t{});
}

ffi::Error GemmBackwardImpl(ffi::AnyBuffer x, ffi::AnyBuffer packed, ffi::AnyBuffer dy, ffi::AnyBuffer dh_n,
                            ffi::AnyBuffer gates, ffi::AnyBuffer h_gemm, ffi::RemainingArgs optional_args, Result dx,
                            Result dw_rec, Result d_b_in, Result d_b_rec, Result dh0, ffi::RemainingRets optional_rets,
                            RecurrenceAttrs attrs) {
  return Guarded("jax_cudnn_rnn_onednn_gemm_backward", [&]() -> ffi::Error {
    Recurrence r;
    JCR_RETURN_IF_ERROR(DecodeRecurrence(attrs, x, &r));
    const bool lstm = r.mode == Mode::kLstm, gru = r.mode == Mode::kGru;
    const int64_t T = r.steps, B = r.batch, H = r.units, W = r.width(), I = r.inputs;
    std::optional<ffi::AnyBuffer> w_in, aux, h_prev, c0, dc_n;
    OptionalBuffers args(optional_args, "argument");
    JCR_RETURN_IF_ERROR(args.Take(!r.skip_input && !r.in_place, "w_in", &w_in));
    JCR_RETURN_IF_ERROR(args.Take(lstm || gru, "aux", &aux));
    JCR_RETURN_IF_ERROR(args.Take(gru, "h_prev", &h_prev));
    JCR_RETURN_IF_ERROR(args.Take(lstm, "c0", &c0));
    JCR_RETURN_IF_ERROR(args.Take(lstm, "dc_n", &dc_n));
    JCR_RETURN_IF_ERROR(TakeLengths(args, attrs.has_lengths, &r));
    std::vector<std::optional<ffi::AnyBuffer>> pieces;
    JCR_RETURN_IF_ERROR(TakePieces(args, r, &pieces));
    JCR_RETURN_IF_ERROR(args.CheckAllTaken());
    std::optional<Result> dw_in, dc0;
    OptionalBuffers rets(optional_rets, "result");
    // With params_gradient the weights' gradients go to their places in the weights operands' gradients: `dw_rec` is
    // packed's (d_params), each piece's follows dc0.
    const bool whole = r.params_gradient;
    JCR_RETURN_IF_ERROR(rets.Take(!r.skip_input && !whole, "dw_in", &dw_in));
    JCR_RETURN_IF_ERROR(rets.Take(lstm, "dc0", &dc0));
    std::vector<std::optional<Result>> d_pieces(whole ? pieces.size() : 0);
    for (auto& d_piece : d_pieces) JCR_RETURN_IF_ERROR(rets.Take(true, "d_piece", &d_piece));
    JCR_RETURN_IF_ERROR(rets.CheckAllTaken());
    const auto F32 = ffi::DataType::F32, wtype = r.weights_type;
    const size_t bytes = r.weights_bytes();
    JCR_RETURN_IF_ERROR(CheckOutputType("dy", dy, r));
    JCR_RETURN_IF_ERROR(CheckBuffer("dh_n", dh_n, F32, {B, H}));
    JCR_RETURN_IF_ERROR(CheckBuffer("gates", gates, F32, {T, B, W}));
    JCR_RETURN_IF_ERROR(CheckBuffer("h_gemm", h_gemm, wtype, {T, B, H}));
    JCR_RETURN_IF_ERROR(CheckBuffer("dx", *dx, x.element_type(), {T, B, I}));
    std::vector<ffi::AnyBuffer*> gradients;  // whole: each weights operand's
    if (whole) {
      auto dims = [](const ffi::AnyBuffer& b) {
        return std::vector<int64_t>(b.dimensions().begin(), b.dimensions().end());
      };
      JCR_RETURN_IF_ERROR(CheckBuffer("d_params", *dw_rec, wtype, dims(packed)));
      gradients.push_back(&*dw_rec);
      for (size_t i = 0; i < pieces.size(); ++i) {
        JCR_RETURN_IF_ERROR(CheckBuffer("d_piece", **d_pieces[i], wtype, dims(*pieces[i])));
        gradients.push_back(&**d_pieces[i]);
      }
    } else {
      JCR_RETURN_IF_ERROR(CheckBuffer("dw_rec", *dw_rec, wtype, {W * H}));
    }
    JCR_RETURN_IF_ERROR(CheckBuffer("d_b_in", *d_b_in, F32, {W}));
    JCR_RETURN_IF_ERROR(CheckBuffer("d_b_rec", *d_b_rec, F32, {W}));
    JCR_RETURN_IF_ERROR(CheckBuffer("dh0", *dh0, F32, {B, H}));
    if (w_in) JCR_RETURN_IF_ERROR(CheckBuffer("w_in", *w_in, wtype, {W, I}));
    if (dw_in) JCR_RETURN_IF_ERROR(CheckBuffer("dw_in", **dw_in, wtype, {W * I}));
    if (aux) JCR_RETURN_IF_ERROR(CheckBuffer("aux", *aux, F32, {T, B, H}));
    if (gru) JCR_RETURN_IF_ERROR(CheckBuffer("h_prev", *h_prev, F32, {T, B, H}));
    if (lstm) {
      for (const auto& [name, buffer] : {std::pair{"c0", &*c0}, std::pair{"dc_n", &*dc_n}}) {
        JCR_RETURN_IF_ERROR(CheckBuffer(name, *buffer, F32, {B, H}));
      }
      JCR_RETURN_IF_ERROR(CheckBuffer("dc0", **dc0, F32, {B, H}));
    }
    // dh = d_rec W_rec at every step (per block, adding up, or on packed), and where each block's gradient goes.
    std::vector<Product> rec;
    std::vector<GradientBlock> blocks;  // w_in's, then w_rec's
    if (!r.in_place) {
      rec.push_back({PackedProductPlan(B, r.rows, W, H, wtype, false), packed.untyped_data(), 0});
      JCR_RETURN_IF_ERROR(CheckPacked(packed, *rec.back().plan));
      if (w_in) {
        blocks.push_back(
            {{0, 0, 0, 0, r.gates, I, 1}, w_in->untyped_data(), static_cast<char*>((*dw_in)->untyped_data()), I, 1});
      }
      blocks.push_back({{1, 0, 0, 0, r.gates, H, 1}, nullptr, static_cast<char*>(dw_rec->untyped_data()), H, 1});
    } else {
      const std::vector<const ffi::AnyBuffer*> operands = WeightsOperands(packed, pieces);
      JCR_RETURN_IF_ERROR(CheckInPlace(operands, r));
      for (const WeightBlock& block : r.blocks) {
        const int64_t K = r.depth(block), n = block.gates * H;
        GradientBlock g{block, At(*operands[block.operand], r, block)};
        if (whole) {
          g.out = static_cast<char*>(gradients[block.operand]->untyped_data()) + block.offset * bytes;
          g.row_stride = block.row_stride;
          g.col_stride = block.col_stride;
        } else {
          void* dense = block.matrix == 0 ? (*dw_in)->untyped_data() : dw_rec->untyped_data();
          g.out = static_cast<char*>(dense) + block.gate0 * H * K * bytes;
          g.row_stride = K;
          g.col_stride = 1;
        }
        blocks.push_back(g);
      }
    }
    // After the steps, over all of them, per block: dW = d^T rows (d the gates' gradients, rows x or h_gemm) into
    // the block's gradient as it lies (its transpose for a columns block), and dx = the sum of d W over w_in's blocks
    // (in float32 scratch where several add up to a bfloat16 dx).
    const int64_t TB = T * B;
    const bool outer = TB <= kOuterProductRows;  // the weights' gradients as OuterProducts
    int64_t in_blocks = 0;
    for (const GradientBlock& g : blocks) in_blocks += g.block.matrix == 0;
    std::vector<const GradientBlock*> rec_blocks, in_block_list;  // for SmallBackward
    for (const GradientBlock& g : blocks) (g.block.matrix == 0 ? in_block_list : rec_blocks).push_back(&g);
    // dh's products per step: d's [B, n] block times the block as it lies, or transposed (TransposedBackward) the
    // block [H, n] times d's transpose, into dh's transpose
    const bool rec_transposed = TransposedBackward(r, rec_blocks, B);
    for (const GradientBlock* g : rec_blocks) {
      if (!r.in_place || B == 0 || SmallProducts(r, B)) break;  // the packed product, or the handlers' own loops
      const WeightBlock& block = g->block;
      const int64_t n = block.gates * H;
      rec.push_back({rec_transposed ? StridedProductPlan(H, n, B, {block.col_stride, block.row_stride}, {B, 1}, {B, 1},
                                                         wtype, F32, !rec.empty())
                                    : StridedProductPlan(B, n, H, {W, 1}, {block.row_stride, block.col_stride}, {H, 1},
                                                         wtype, F32, !rec.empty()),
                     g->weights, block.gate0 * H});
    }
    const bool small_dx = in_blocks > 0 && SmallProducts(r, TB);
    const bool dx_transposed = TransposedBackward(r, in_block_list, TB);
    const bool dx_scratch = (in_blocks > 1 || small_dx || dx_transposed) && x.element_type() != F32;
    std::vector<std::shared_ptr<const MatmulPlan>> gradient_plans(blocks.size()), dx_plans;
    size_t scratchpad_bytes = 0;
    for (const Product& product : rec) scratchpad_bytes = std::max(scratchpad_bytes, product.plan->scratchpad_bytes);
    for (size_t i = 0; i < blocks.size() && TB > 0; ++i) {
      const GradientBlock& g = blocks[i];
      const int64_t K = r.depth(g.block), n = g.block.gates * H;
      if (!outer) {
        gradient_plans[i] = g.col_stride == 1
                                ? StridedProductPlan(n, TB, K, {1, W}, {K, 1}, {g.row_stride, 1}, wtype, wtype)
                                : StridedProductPlan(K, TB, n, {1, K}, {W, 1}, {g.col_stride, 1}, wtype, wtype);
        scratchpad_bytes = std::max(scratchpad_bytes, gradient_plans[i]->scratchpad_bytes);
      }
      if (g.block.matrix == 0 && !small_dx) {
        dx_plans.push_back(dx_transposed
                               ? StridedProductPlan(I, n, TB, {g.block.col_stride, g.block.row_stride}, {TB, 1},
                                                    {TB, 1}, wtype, F32, !dx_plans.empty())
                               : StridedProductPlan(TB, n, I, {W, 1}, {g.block.row_stride, g.block.col_stride}, {I, 1},
                                                    wtype, dx_scratch ? F32 : x.element_type(), !dx_plans.empty()));
        scratchpad_bytes = std::max(scratchpad_bytes, dx_plans.back()->scratchpad_bytes);
      }
    }

    const int64_t chunks = Chunks(B);
    const int64_t d_t_rows = dx_transposed ? TB : rec_transposed ? B : 0;  // d transposed, [W, rows]
    // The gate gradients of every step and what each step reads and writes come from the extension's pool.
    RegionAllocator layout;
    const Region d_xp = layout.Add(TB * W * r.weights_bytes()), d_hp = layout.Add(gru ? TB * W * r.weights_bytes() : 0),
                 x_operand = layout.Add(TB * I * r.weights_bytes()), dh = layout.Add(B * H * 4),
                 dc = layout.Add(B * H * 4), dh_new = layout.Add(B * H * 4), d_pre = layout.Add(B * W * 4),
                 d_rec = layout.Add(B * W * 4), direct = layout.Add(B * H * 4), products = layout.Add(B * H * 4),
                 skip = layout.Add(B * I * 4), sums = layout.Add(chunks * W * 4), sums_rec = layout.Add(chunks * W * 4),
                 dx_sums = layout.Add(dx_scratch ? TB * I * 4 : 0), scratchpad = layout.Add(scratchpad_bytes),
                 d_t = layout.Add(W * d_t_rows * bytes), dx_t = layout.Add(dx_transposed ? I * TB * 4 : 0);
    ScratchLease lease = TakeScratch(layout.total());
    void* work = lease.data();
    AdviseHugePages(dx->untyped_data(), dx->size_bytes());  // as the forward's outputs
    AdviseHugePages(dw_rec->untyped_data(), dw_rec->size_bytes());
    if (dw_in) AdviseHugePages((*dw_in)->untyped_data(), (*dw_in)->size_bytes());
    const bool dy_bf16 = dy.element_type() == ffi::DataType::BF16, x_bf16 = x.element_type() == ffi::DataType::BF16;
    auto f32 = [&](Region region) { return reinterpret_cast<float*>(region.in(work)); };
    void* d_rec_all = gru ? d_hp.in(work) : d_xp.in(work);  // what the recurrent product's gradient reads

    return RunOnednn([&](dnnl::stream& stream) -> ffi::Error {
      std::memcpy(f32(dh), dh_n.untyped_data(), B * H * 4);
      if (lstm) std::memcpy(f32(dc), dc_n->untyped_data(), B * H * 4);
      std::fill_n(f32(sums), chunks * W, 0.0f);
      std::fill_n(f32(sums_rec), chunks * W, 0.0f);
      std::fill_n(f32(direct), B * H, 0.0f);
      for (int64_t s = T - 1; s >= 0 && B > 0; --s) {
        const int64_t t = r.time(s);
        // The cell state step t read: c0 at the forward's first step, else the c the step before it wrote.
        const float* c_read = !lstm    ? nullptr
                              : s == 0 ? static_cast<const float*>(c0->untyped_data())
                                       : Row<const float>(aux->untyped_data(), r, r.time(s - 1), 0, H, 4);
        ParallelFor(B, chunks, [&](int64_t chunk, int64_t begin, int64_t end) {
          float* sum = f32(sums) + chunk * W;
          float* sum_rec = f32(sums_rec) + chunk * W;
          for (int64_t b = begin; b < end; ++b) {
            float* dh_row = f32(dh_new) + b * H;
            const float* carried = f32(dh) + b * H;
            float* pre = f32(d_pre) + b * W;
            float* rec = f32(d_rec) + b * W;
            if (r.padding(t, b)) {  // the state passed unchanged: its gradients too, the gates' zero (y's is constant)
              std::copy_n(carried, H, f32(direct) + b * H);
              PaddingRowGradients(r, t, b, gru ? d_hp.in(work) : nullptr, d_xp.in(work), *dx);
              continue;
            }
            if (r.lengths != nullptr && !gru) std::fill_n(f32(direct) + b * H, H, 0.0f);  // a later padding step's
            LoadRow(dy_bf16, Row<char>(dy.untyped_data(), r, t, b, H, dy_bf16 ? 2 : 4), dh_row, H);
            for (int64_t j = 0; j < H; ++j) dh_row[j] += carried[j];
            BackwardRow(r.mode, H, Row<const float>(gates.untyped_data(), r, t, b, W, 4),
                        aux ? Row<const float>(aux->untyped_data(), r, t, b, H, 4) : nullptr,
                        gru ? Row<const float>(h_prev->untyped_data(), r, t, b, H, 4) : nullptr,
                        lstm ? c_read + b * H : nullptr, dh_row, f32(dc) + b * H, pre, rec, f32(direct) + b * H);
            for (int64_t j = 0; j < W; ++j) sum[j] += pre[j];
            StoreRow(r.bf16(), pre, Row<char>(d_xp.in(work), r, t, b, W, r.weights_bytes()), W);
            if (gru) {
              for (int64_t j = 0; j < W; ++j) sum_rec[j] += rec[j];
              StoreRow(r.bf16(), rec, Row<char>(d_hp.in(work), r, t, b, W, r.weights_bytes()), W);
            }
            if (r.skip_input) {  // x entered every gate: its gradient is the sum of theirs, in float32
              float* dx_row = f32(skip) + b * I;
              std::copy_n(pre, I, dx_row);
              for (int64_t g = 1; g < r.gates; ++g) {
                for (int64_t j = 0; j < I; ++j) dx_row[j] += pre[g * H + j];
              }
              StoreRow(x_bf16, dx_row, Row<char>(dx->untyped_data(), r, t, b, I, x_bf16 ? 2 : 4), I);
            }
          }
        });
        // dh w.r.t. the state the step read: through the recurrent product, plus (GRU) the direct part.
        if (SmallProducts(r, B)) {
          SmallBackward(r, B, Row<char>(d_rec_all, r, t, 0, W, bytes), rec_blocks, H, f32(products));
        } else if (rec_transposed) {  // products [H, B]
          Transpose(Row<char>(d_rec_all, r, t, 0, W, bytes), B, W, W, bytes, d_t.in(work));
          for (const Product& product : rec) {
            RunMatmul(*product.plan, stream, product.b, d_t.in(work) + product.column * B * bytes, products.in(work),
                      scratchpad.in(work));
          }
        } else {
          for (const Product& product : rec) {
            RunMatmul(*product.plan, stream, Row<char>(d_rec_all, r, t, 0, W, bytes) + product.column * bytes,
                      product.b, products.in(work), scratchpad.in(work));
          }
        }
        stream.wait();
        const float* through = f32(products);
        const float* bypass = f32(direct);
        float* next = f32(dh);
        if (rec_transposed) {
          for (int64_t b = 0; b < B; ++b) {
            for (int64_t j = 0; j < H; ++j) next[b * H + j] = through[j * B + b] + bypass[b * H + j];
          }
        } else {
          for (int64_t i = 0; i < B * H; ++i) next[i] = through[i] + bypass[i];
        }
      }
      std::memcpy(dh0->untyped_data(), f32(dh), B * H * 4);
      if (lstm) std::memcpy((*dc0)->untyped_data(), f32(dc), B * H * 4);
      auto reduce = [&](const float* partial, void* out) {
        auto* total = static_cast<float*>(out);
        std::fill_n(total, W, 0.0f);
        for (int64_t k = 0; k < chunks; ++k) {
          for (int64_t j = 0; j < W; ++j) total[j] += partial[k * W + j];
        }
      };
      reduce(f32(sums), d_b_in->untyped_data());
      reduce(gru ? f32(sums_rec) : f32(sums), d_b_rec->untyped_data());
      // The weights' gradients and the input's, products over every step and row.
      if (TB == 0) {
        std::fill_n(static_cast<char*>(dw_rec->untyped_data()), dw_rec->size_bytes(), 0);
        if (dw_in) std::fill_n(static_cast<char*>((*dw_in)->untyped_data()), (*dw_in)->size_bytes(), 0);
        for (ffi::AnyBuffer* gradient : gradients) {
          std::fill_n(static_cast<char*>(gradient->untyped_data()), gradient->size_bytes(), 0);
        }
        if (whole) {
          FinishParamsGradient(r, static_cast<const float*>(d_b_in->untyped_data()),
                               static_cast<const float*>(d_b_rec->untyped_data()), gradients);
        }
        return ffi::Error::Success();
      }
      const void* x_rows = in_blocks > 0 ? InputOperand(r, x, x_operand.in(work), chunks) : nullptr;
      void* dx_out = dx_scratch ? dx_sums.in(work) : dx->untyped_data();
      size_t dx_block = 0;
      std::vector<OuterProduct> outer_products;
      for (size_t i = 0; i < blocks.size(); ++i) {
        const GradientBlock& g = blocks[i];
        const bool input = g.block.matrix == 0;
        const void* rows = input ? x_rows : h_gemm.untyped_data();
        const int64_t K = r.depth(g.block), n = g.block.gates * H;
        const char* d = static_cast<const char*>(input ? d_xp.in(work) : d_rec_all) + g.block.gate0 * H * bytes;
        if (outer && g.col_stride == 1) outer_products.push_back({n, K, d, W, rows, K, g.out, g.row_stride});
        else if (outer) outer_products.push_back({K, n, rows, K, d, W, g.out, g.col_stride});
        else if (g.col_stride == 1) RunMatmul(*gradient_plans[i], stream, d, rows, g.out, scratchpad.in(work));
        else RunMatmul(*gradient_plans[i], stream, rows, d, g.out, scratchpad.in(work));
        if (input && !small_dx && !dx_transposed) {
          RunMatmul(*dx_plans[dx_block++], stream, d, g.weights, dx_out, scratchpad.in(work));
        }
      }
      if (dx_transposed) {  // dx's transpose [I, TB], then dx
        Transpose(d_xp.in(work), TB, W, W, bytes, d_t.in(work));
        for (const GradientBlock* g : in_block_list) {
          RunMatmul(*dx_plans[dx_block++], stream, g->weights, d_t.in(work) + g->block.gate0 * H * TB * bytes,
                    dx_t.in(work), scratchpad.in(work));
        }
        stream.wait();
        Transpose(dx_t.in(work), I, TB, TB, 4, dx_out);
      }
      if (small_dx) SmallBackward(r, TB, d_xp.in(work), in_block_list, I, static_cast<float*>(dx_out));
      if (!outer_products.empty()) OuterProducts(r, TB, outer_products);
      if (whole) {
        FinishParamsGradient(r, static_cast<const float*>(d_b_in->untyped_data()),
                             static_cast<const float*>(d_b_rec->untyped_data()), gradients);
      }
      if (dx_scratch) {
        stream.wait();
        StoreRow(true, static_cast<const float*>(dx_out), dx->untyped_data(), TB * I);
      }
      stream.wait();
      return ffi::Error::Success();
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GemmForward, GemmForwardImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // packed
                                  .Arg<ffi::AnyBuffer>()  // b_in
                                  .Arg<ffi::AnyBuffer>()  // b_rec
                                  .Arg<ffi::AnyBuffer>()  // h0
                                  .RemainingArgs()        // [w_in], [c0], [lengths]
                                  .Ret<ffi::AnyBuffer>()  // y
                                  .Ret<ffi::AnyBuffer>()  // h_n
                                  .RemainingRets()        // [c_n], [gates, [aux], [h_prev], h_gemm]
                                  .Attrs<RecurrenceAttrs>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(GemmBackward, GemmBackwardImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // packed
                                  .Arg<ffi::AnyBuffer>()  // dy
                                  .Arg<ffi::AnyBuffer>()  // dh_n
                                  .Arg<ffi::AnyBuffer>()  // gates
                                  .Arg<ffi::AnyBuffer>()  // h_gemm
                                  .RemainingArgs()        // [w_in], [aux], [h_prev], [c0, dc_n], [lengths]
                                  .Ret<ffi::AnyBuffer>()  // dx
                                  .Ret<ffi::AnyBuffer>()  // dw_rec
                                  .Ret<ffi::AnyBuffer>()  // d_b_in
                                  .Ret<ffi::AnyBuffer>()  // d_b_rec
                                  .Ret<ffi::AnyBuffer>()  // dh0
                                  .RemainingRets()        // [dw_in], [dc0]
                                  .Attrs<RecurrenceAttrs>());

}  // namespace jax_cudnn_rnn::onednn
