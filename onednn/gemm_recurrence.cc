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
#include "threading.h"

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(
    ::jax_cudnn_rnn::onednn::RecurrenceAttrs, JCR_RNN_CONFIG_ATTRS, ::xla::ffi::StructMember<bool>("reverse"),
    ::xla::ffi::StructMember<bool>("training"), ::xla::ffi::StructMember<int64_t>("rows"),
    ::xla::ffi::StructMember<std::string_view>("weights_dtype"), ::xla::ffi::StructMember<bool>("has_lengths"),
    ::xla::ffi::StructMember<bool>("in_place"), ::xla::ffi::StructMember<int64_t>("w_in_offset"),
    ::xla::ffi::StructMember<int64_t>("w_rec_offset"), ::xla::ffi::StructMember<bool>("params_gradient"),
    ::xla::ffi::StructMember<int64_t>("b_in_offset"), ::xla::ffi::StructMember<int64_t>("b_rec_offset"));

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

// Where a handler reads the weights and the plan of its recurrent product: w_rec packed (`packed`) and w_in its own
// argument, or both where they lie in the parameter buffer (`in_place`: `packed` is the buffer). The forward's
// product is h w_rec^T, the backward's d_hp w_rec.
struct Weights {
  std::shared_ptr<const MatmulPlan> plan;  // null for an empty batch in place
  const void* w_rec = nullptr;
  const void* w_in = nullptr;  // null for skip input
};

ffi::Error TakeWeights(const Recurrence& r, const ffi::AnyBuffer& packed, const std::optional<ffi::AnyBuffer>& w_in,
                       bool forward, Weights* weights) {
  const int64_t B = r.batch, H = r.units, W = r.width();
  const auto wtype = r.weights_type, F32 = ffi::DataType::F32;
  weights->w_rec = packed.untyped_data();
  weights->w_in = w_in ? w_in->untyped_data() : nullptr;
  if (!r.in_place) {
    weights->plan =
        forward ? PackedProductPlan(B, r.rows, H, W, wtype, true) : PackedProductPlan(B, r.rows, W, H, wtype, false);
    return CheckPacked(packed, *weights->plan);
  }
  JCR_RETURN_IF_ERROR(CheckInPlace(packed, r));
  weights->w_rec = At(packed, r, r.w_rec_offset);
  if (!r.skip_input) weights->w_in = At(packed, r, r.w_in_offset);
  if (B > 0) {
    weights->plan = forward ? ProductPlan({B, H}, {W, H}, wtype, F32, false, true)
                            : ProductPlan({B, W}, {W, H}, wtype, F32, false, false);
  }
  return ffi::Error::Success();
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
    Weights weights;
    JCR_RETURN_IF_ERROR(TakeWeights(r, packed, w_in, true, &weights));
    const std::shared_ptr<const MatmulPlan>& plan = weights.plan;
    const void *w_rec_data = weights.w_rec, *w_in_data = weights.w_in;
    std::shared_ptr<const MatmulPlan> input_plan =
        w_in_data && T * B > 0 ? ProductPlan({T * B, I}, {W, I}, r.weights_type, F32, false, true) : nullptr;

    // The input product of every step and what each step reads and writes come from the extension's pool: buffers
    // XLA allocated would be new pages to fault in at every call.
    RegionAllocator layout;
    const Region xp = layout.Add(T * B * W * 4), x_operand = layout.Add(T * B * I * r.weights_bytes()),
                 hp = layout.Add(B * W * 4), state[2] = {layout.Add(B * H * 4), layout.Add(B * H * 4)},
                 cell[2] = {layout.Add(B * H * 4), layout.Add(B * H * 4)},
                 operand = layout.Add(B * H * r.weights_bytes()), step_gates = layout.Add(B * W * 4),
                 step_aux = layout.Add(B * H * 4),
                 scratchpad = layout.Add(
                     std::max(plan ? plan->scratchpad_bytes : 0, input_plan ? input_plan->scratchpad_bytes : 0));
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
      if (input_plan) {  // W x for every step at once
        RunMatmul(*input_plan, stream, InputOperand(r, x, x_operand.in(work), chunks), w_in_data, xp.in(work),
                  scratchpad.in(work));
        stream.wait();
      } else if (T * B > 0) {  // skip input: x itself enters every gate
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
        RunMatmul(*plan, stream, rounds ? a : h, w_rec_data, products, scratchpad.in(work));
        stream.wait();
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

// out [M, N] (wdtype) = a^T b for a [rows, M] and b [rows, N] of wdtype, rows <= kOuterProductRows: each row of the
// output written once, in parallel over the rows of out.
void OuterProducts(const Recurrence& r, int64_t rows, int64_t M, int64_t N, const void* a, const void* b, void* out) {
  std::vector<float> a_rows(rows * M), b_rows(rows * N);
  for (int64_t k = 0; k < rows; ++k) {
    LoadRow(r.bf16(), static_cast<const char*>(a) + k * M * r.weights_bytes(), a_rows.data() + k * M, M);
    LoadRow(r.bf16(), static_cast<const char*>(b) + k * N * r.weights_bytes(), b_rows.data() + k * N, N);
  }
  ParallelFor(M, ParallelThreads(), [&](int64_t, int64_t begin, int64_t end) {
    std::vector<float> row(N);
    for (int64_t m = begin; m < end; ++m) {
      std::fill(row.begin(), row.end(), 0.0f);
      for (int64_t k = 0; k < rows; ++k) {
        const float scale = a_rows[k * M + m];
        const float* from = b_rows.data() + k * N;
        for (int64_t n = 0; n < N; ++n) row[n] += scale * from[n];
      }
      StoreRow(r.bf16(), row.data(), static_cast<char*>(out) + m * N * r.weights_bytes(), N);
    }
  });
}

// The rest of the buffer's gradient (`params_gradient`) beside the weights' slots the products write: the biases'
// sums rounded into their slots, zeros wherever this layer has nothing (ParamsSlots; CheckInPlace: no two overlap).
void FinishParamsGradient(const Recurrence& r, const float* d_b_in, const float* d_b_rec, char* d_params,
                          int64_t size) {
  const size_t bytes = r.weights_bytes();
  for (const auto& [offset, sums] : {std::pair{r.b_in_offset, d_b_in}, std::pair{r.b_rec_offset, d_b_rec}}) {
    if (offset != -1) StoreRow(r.bf16(), sums, d_params + offset * bytes, r.width());
  }
  std::vector<Slot> slots = ParamsSlots(r);
  std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) { return a.offset < b.offset; });
  int64_t done = 0;
  for (const Slot& slot : slots) {
    if (slot.offset > done) std::memset(d_params + done * bytes, 0, (slot.offset - done) * bytes);
    done = std::max(done, slot.offset + slot.size);
  }
  if (size > done) std::memset(d_params + done * bytes, 0, (size - done) * bytes);
}

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
    JCR_RETURN_IF_ERROR(args.CheckAllTaken());
    std::optional<Result> dw_in, dc0;
    OptionalBuffers rets(optional_rets, "result");
    // With params_gradient the weights' gradients go to their slots of the buffer's gradient, `dw_rec` (d_params).
    const bool whole = r.params_gradient;
    JCR_RETURN_IF_ERROR(rets.Take(!r.skip_input && !whole, "dw_in", &dw_in));
    JCR_RETURN_IF_ERROR(rets.Take(lstm, "dc0", &dc0));
    JCR_RETURN_IF_ERROR(rets.CheckAllTaken());
    const auto F32 = ffi::DataType::F32, wtype = r.weights_type;
    JCR_RETURN_IF_ERROR(CheckOutputType("dy", dy, r));
    JCR_RETURN_IF_ERROR(CheckBuffer("dh_n", dh_n, F32, {B, H}));
    JCR_RETURN_IF_ERROR(CheckBuffer("gates", gates, F32, {T, B, W}));
    JCR_RETURN_IF_ERROR(CheckBuffer("h_gemm", h_gemm, wtype, {T, B, H}));
    JCR_RETURN_IF_ERROR(CheckBuffer("dx", *dx, x.element_type(), {T, B, I}));
    if (whole) {
      JCR_RETURN_IF_ERROR(CheckBuffer("d_params", *dw_rec, wtype, {static_cast<int64_t>(packed.element_count())}));
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
    Weights weights;
    JCR_RETURN_IF_ERROR(TakeWeights(r, packed, w_in, false, &weights));
    const std::shared_ptr<const MatmulPlan>& plan = weights.plan;
    const void *w_rec_data = weights.w_rec, *w_in_data = weights.w_in;
    char* d_params = whole ? static_cast<char*>(dw_rec->untyped_data()) : nullptr;
    void* dw_rec_out = whole ? d_params + r.w_rec_offset * r.weights_bytes() : dw_rec->untyped_data();
    void* dw_in_out = r.skip_input ? nullptr
                      : whole      ? d_params + r.w_in_offset * r.weights_bytes()
                                   : (*dw_in)->untyped_data();
    // After the steps, over all of them: dW_rec = d_hp^T h_gemm, dW_in = d_xp^T x, dx = d_xp W_in.
    const int64_t TB = T * B;
    std::shared_ptr<const MatmulPlan> rec_plan, in_plan, dx_plan;
    const bool outer = TB <= kOuterProductRows;  // the weights' gradients as OuterProducts
    if (TB > 0) {
      if (!outer) rec_plan = ProductPlan({TB, W}, {TB, H}, wtype, wtype, true, false);
      if (w_in_data) {
        if (!outer) in_plan = ProductPlan({TB, W}, {TB, I}, wtype, wtype, true, false);
        dx_plan = ProductPlan({TB, W}, {W, I}, wtype, x.element_type(), false, false);
      }
    }
    size_t scratchpad_bytes = plan ? plan->scratchpad_bytes : 0;
    for (const auto& p : {rec_plan, in_plan, dx_plan}) {
      if (p) scratchpad_bytes = std::max(scratchpad_bytes, p->scratchpad_bytes);
    }

    const int64_t chunks = Chunks(B);
    // The gate gradients of every step and what each step reads and writes come from the extension's pool.
    RegionAllocator layout;
    const Region d_xp = layout.Add(TB * W * r.weights_bytes()), d_hp = layout.Add(gru ? TB * W * r.weights_bytes() : 0),
                 x_operand = layout.Add(TB * I * r.weights_bytes()), dh = layout.Add(B * H * 4),
                 dc = layout.Add(B * H * 4), dh_new = layout.Add(B * H * 4), d_pre = layout.Add(B * W * 4),
                 d_rec = layout.Add(B * W * 4), direct = layout.Add(B * H * 4), products = layout.Add(B * H * 4),
                 skip = layout.Add(B * I * 4), sums = layout.Add(chunks * W * 4), sums_rec = layout.Add(chunks * W * 4),
                 scratchpad = layout.Add(scratchpad_bytes);
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
        RunMatmul(*plan, stream, Row<char>(d_rec_all, r, t, 0, W, r.weights_bytes()), w_rec_data, products.in(work),
                  scratchpad.in(work));
        stream.wait();
        const float* through = f32(products);
        const float* bypass = f32(direct);
        float* next = f32(dh);
        for (int64_t i = 0; i < B * H; ++i) next[i] = through[i] + bypass[i];
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
      // The weights' gradients and the input's, one product each over every step and row.
      if (TB == 0) {
        std::fill_n(static_cast<char*>(dw_rec->untyped_data()), dw_rec->size_bytes(), 0);
        if (dw_in) std::fill_n(static_cast<char*>((*dw_in)->untyped_data()), (*dw_in)->size_bytes(), 0);
        return ffi::Error::Success();
      }
      if (outer) {
        OuterProducts(r, TB, W, H, d_rec_all, h_gemm.untyped_data(), dw_rec_out);
      } else {
        RunMatmul(*rec_plan, stream, d_rec_all, h_gemm.untyped_data(), dw_rec_out, scratchpad.in(work));
      }
      if (w_in_data) {
        const void* x_rows = InputOperand(r, x, x_operand.in(work), chunks);
        if (outer) {
          OuterProducts(r, TB, W, I, d_xp.in(work), x_rows, dw_in_out);
        } else {
          RunMatmul(*in_plan, stream, d_xp.in(work), x_rows, dw_in_out, scratchpad.in(work));
        }
        RunMatmul(*dx_plan, stream, d_xp.in(work), w_in_data, dx->untyped_data(), scratchpad.in(work));
      }
      if (whole) {
        FinishParamsGradient(r, static_cast<const float*>(d_b_in->untyped_data()),
                             static_cast<const float*>(d_b_rec->untyped_data()), d_params, packed.element_count());
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
