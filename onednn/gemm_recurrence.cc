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
#include "matmul.h"
#include "pages.h"
#include "plan.h"
#include "rnn_config.h"
#include "scratch.h"
#include "threading.h"

namespace jax_cudnn_rnn::onednn {
// The handlers' attributes (jax_cudnn_rnn/backends/onednn/kernels.py `gemm_forward`, `gemm_backward`).
struct RecurrenceAttrs {
  RnnConfigAttrs config;
  bool reverse;
  bool training;
  int64_t rows;
  std::string_view weights_dtype;
};
}  // namespace jax_cudnn_rnn::onednn

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(::jax_cudnn_rnn::onednn::RecurrenceAttrs, JCR_RNN_CONFIG_ATTRS,
                                      ::xla::ffi::StructMember<bool>("reverse"),
                                      ::xla::ffi::StructMember<bool>("training"),
                                      ::xla::ffi::StructMember<int64_t>("rows"),
                                      ::xla::ffi::StructMember<std::string_view>("weights_dtype"));

namespace jax_cudnn_rnn::onednn {

namespace ffi = ::xla::ffi;

namespace {

using Result = ffi::Result<ffi::AnyBuffer>;

// One call's recurrence: the cell, the sizes and the weights' element type.
struct Recurrence {
  Mode mode = Mode::kLstm;
  int64_t steps = 0, batch = 0, units = 0, gates = 0, rows = 0;
  bool reverse = false, training = false;
  ffi::DataType weights_type = ffi::DataType::F32;

  int64_t width() const { return gates * units; }  // G*H
  bool bf16() const { return weights_type == ffi::DataType::BF16; }
  size_t weights_bytes() const { return bf16() ? 2 : 4; }
  // The time of the `s`-th step in processing order, and whether it is the first one.
  int64_t time(int64_t s) const { return reverse ? steps - 1 - s : s; }
};

template <typename Fn>
ffi::Error Guarded(const char* handler, Fn&& body) {
  try {
    return body();
  } catch (const dnnl::error& e) {
    return ffi::Error::Internal(std::string(handler) + ": oneDNN failed: " + e.what() + " (dnnl_status_t " +
                                std::to_string(static_cast<int>(e.status)) + ")");
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string(handler) + " failed: " + e.what());
  }
}

// The recurrence of a call from its attributes and the shape of its [T, B, width] array `steps_array` (xp, gates).
ffi::Error DecodeRecurrence(const RecurrenceAttrs& attrs, const char* name, const ffi::AnyBuffer& steps_array,
                            Recurrence* recurrence) {
  RnnConfig config;
  JCR_RETURN_IF_ERROR(DecodeRnnConfig(attrs.config, &config));
  if (config.num_layers != 1 || config.num_directions != 1 || config.proj_size != 0 || config.cell_clip != 0 ||
      config.skip_input) {
    return ffi::Error::InvalidArgument(
        "the recurrence runs one layer and direction without projection, clipping or skip input");
  }
  Recurrence r;
  r.mode = config.mode;
  r.units = config.num_units;
  r.gates = config.num_gates();
  r.reverse = attrs.reverse;
  r.training = attrs.training;
  r.rows = attrs.rows;
  if (attrs.weights_dtype == "bfloat16") r.weights_type = ffi::DataType::BF16;
  else if (attrs.weights_dtype != "float32") {
    return ffi::Error::InvalidArgument("weights_dtype is '" + std::string(attrs.weights_dtype) +
                                       "'; expected float32 or bfloat16");
  }
  const auto dims = steps_array.dimensions();
  if (dims.size() != 3 || dims[2] != r.width()) {
    return ffi::Error::InvalidArgument(std::string(name) + " has shape " + ShapeString(dims) + "; expected [T, B, " +
                                       std::to_string(r.width()) + "]");
  }
  r.steps = dims[0];
  r.batch = dims[1];
  JCR_RETURN_IF_ERROR(CheckBuffer(name, steps_array, ffi::DataType::F32, {r.steps, r.batch, r.width()}));
  *recurrence = r;
  return ffi::Error::Success();
}

// The packed recurrent weights: a uint8 buffer of exactly the plan's packed size.
ffi::Error CheckPacked(const ffi::AnyBuffer& packed, const MatmulPlan& plan) {
  return CheckBuffer("packed", packed, ffi::DataType::U8, {static_cast<int64_t>(plan.b.get_size())});
}

// y's element type: float32, or the weights' (a network's last layer in bfloat16).
ffi::Error CheckOutputType(const char* name, const ffi::AnyBuffer& buffer, const Recurrence& r) {
  if (buffer.element_type() != ffi::DataType::F32 && buffer.element_type() != r.weights_type) {
    return ffi::Error::InvalidArgument(std::string(name) + " must be float32 or the weights' element type");
  }
  return CheckBuffer(name, buffer, buffer.element_type(), {r.steps, r.batch, r.units});
}

// Row `b` of step `t` of a [T, B, width] array of `bytes`-byte elements (t = -1: none).
template <typename T>
T* Row(void* base, const Recurrence& r, int64_t t, int64_t b, int64_t width, size_t bytes) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + ((t * r.batch + b) * width) * bytes);
}

// Pieces of the batch for ParallelFor: at most one per thread, the same for every call of a given size.
int64_t Chunks(int64_t batch) { return std::max<int64_t>(1, std::min(batch, ParallelThreads())); }

ffi::Error GemmForwardImpl(ffi::AnyBuffer xp, ffi::AnyBuffer packed, ffi::AnyBuffer b_in, ffi::AnyBuffer b_rec,
                           ffi::AnyBuffer h0, ffi::RemainingArgs optional_args, Result y, Result h_n,
                           ffi::RemainingRets optional_rets, RecurrenceAttrs attrs) {
  return Guarded("jax_cudnn_rnn_onednn_gemm_forward", [&]() -> ffi::Error {
    Recurrence r;
    JCR_RETURN_IF_ERROR(DecodeRecurrence(attrs, "xp", xp, &r));
    const bool lstm = r.mode == Mode::kLstm, gru = r.mode == Mode::kGru, training = r.training;
    const int64_t T = r.steps, B = r.batch, H = r.units, W = r.width();
    std::optional<ffi::AnyBuffer> c0;
    OptionalBuffers args(optional_args, "argument");
    JCR_RETURN_IF_ERROR(args.Take(lstm, "c0", &c0));
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
    std::shared_ptr<const MatmulPlan> plan = PackedProductPlan(B, r.rows, H, W, r.weights_type, true);
    JCR_RETURN_IF_ERROR(CheckPacked(packed, *plan));

    RegionAllocator layout;
    const Region hp = layout.Add(B * W * 4), state[2] = {layout.Add(B * H * 4), layout.Add(B * H * 4)},
                 cell[2] = {layout.Add(B * H * 4), layout.Add(B * H * 4)},
                 operand = layout.Add(B * H * r.weights_bytes()), step_gates = layout.Add(B * W * 4),
                 step_aux = layout.Add(B * H * 4), scratchpad = layout.Add(plan->scratchpad_bytes);
    ScratchLease lease = TakeScratch(layout.total());
    void* work = lease.data();
    // XLA allocates the outputs anew for every call: huge pages spare a fault per 4 KiB (pages.h).
    for (std::optional<Result>* saved : {&gates, &aux, &h_prev, &h_gemm}) {
      if (*saved) AdviseHugePages((**saved)->untyped_data(), (**saved)->size_bytes());
    }
    AdviseHugePages(y->untyped_data(), y->size_bytes());
    const bool y_bf16 = y->element_type() == ffi::DataType::BF16;
    const auto* xp_data = static_cast<const float*>(xp.untyped_data());
    const auto* b_in_data = static_cast<const float*>(b_in.untyped_data());
    const auto* b_rec_data = static_cast<const float*>(b_rec.untyped_data());

    return RunOnednn([&](dnnl::stream& stream) -> ffi::Error {
      float* h = reinterpret_cast<float*>(state[0].in(work));
      float* h_next = reinterpret_cast<float*>(state[1].in(work));
      float* c = reinterpret_cast<float*>(cell[0].in(work));
      float* c_next = reinterpret_cast<float*>(cell[1].in(work));
      std::memcpy(h, h0.untyped_data(), B * H * 4);
      if (lstm) std::memcpy(c, c0->untyped_data(), B * H * 4);
      const int64_t chunks = Chunks(B);
      for (int64_t s = 0; s < T && B > 0; ++s) {
        const int64_t t = r.time(s);
        // The product's operand: h rounded to the weights' type (kept for the weight gradient in training).
        void* a = training ? Row<char>((*h_gemm)->untyped_data(), r, t, 0, H, r.weights_bytes()) : operand.in(work);
        const bool rounds = training || r.bf16();
        ParallelFor(B, chunks, [&](int64_t, int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end && rounds; ++b) {
            StoreRow(r.bf16(), h + b * H, static_cast<char*>(a) + b * H * r.weights_bytes(), H);
          }
          if (h_prev)
            std::memcpy(Row<float>((*h_prev)->untyped_data(), r, t, begin, H, 4), h + begin * H, (end - begin) * H * 4);
        });
        auto* products = reinterpret_cast<float*>(hp.in(work));
        RunMatmul(*plan, stream, rounds ? a : h, packed.untyped_data(), products, scratchpad.in(work));
        stream.wait();
        ParallelFor(B, chunks, [&](int64_t, int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            float* row_gates = training ? Row<float>((*gates)->untyped_data(), r, t, b, W, 4)
                                        : reinterpret_cast<float*>(step_gates.in(work)) + b * W;
            float* row_aux = aux && gru ? Row<float>((*aux)->untyped_data(), r, t, b, H, 4)
                                        : reinterpret_cast<float*>(step_aux.in(work)) + b * H;
            ForwardRow(r.mode, H, xp_data + (t * B + b) * W, products + b * W, b_in_data, b_rec_data, h + b * H,
                       c + b * H, h_next + b * H, c_next + b * H, row_gates, row_aux);
            StoreRow(y_bf16, h_next + b * H, Row<char>(y->untyped_data(), r, t, b, H, y_bf16 ? 2 : 4), H);
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

ffi::Error GemmBackwardImpl(ffi::AnyBuffer packed, ffi::AnyBuffer dy, ffi::AnyBuffer dh_n, ffi::AnyBuffer gates,
                            ffi::RemainingArgs optional_args, Result d_xp, Result d_bias, Result dh0,
                            ffi::RemainingRets optional_rets, RecurrenceAttrs attrs) {
  return Guarded("jax_cudnn_rnn_onednn_gemm_backward", [&]() -> ffi::Error {
    Recurrence r;
    JCR_RETURN_IF_ERROR(DecodeRecurrence(attrs, "gates", gates, &r));
    const bool lstm = r.mode == Mode::kLstm, gru = r.mode == Mode::kGru;
    const int64_t T = r.steps, B = r.batch, H = r.units, W = r.width();
    std::optional<ffi::AnyBuffer> aux, h_prev, c0, dc_n;
    OptionalBuffers args(optional_args, "argument");
    JCR_RETURN_IF_ERROR(args.Take(lstm || gru, "aux", &aux));
    JCR_RETURN_IF_ERROR(args.Take(gru, "h_prev", &h_prev));
    JCR_RETURN_IF_ERROR(args.Take(lstm, "c0", &c0));
    JCR_RETURN_IF_ERROR(args.Take(lstm, "dc_n", &dc_n));
    JCR_RETURN_IF_ERROR(args.CheckAllTaken());
    std::optional<Result> d_hp, d_bias_rec, dc0;
    OptionalBuffers rets(optional_rets, "result");
    JCR_RETURN_IF_ERROR(rets.Take(gru, "d_hp", &d_hp));
    JCR_RETURN_IF_ERROR(rets.Take(gru, "d_bias_rec", &d_bias_rec));
    JCR_RETURN_IF_ERROR(rets.Take(lstm, "dc0", &dc0));
    JCR_RETURN_IF_ERROR(rets.CheckAllTaken());
    const auto F32 = ffi::DataType::F32;
    JCR_RETURN_IF_ERROR(CheckOutputType("dy", dy, r));
    JCR_RETURN_IF_ERROR(CheckBuffer("dh_n", dh_n, F32, {B, H}));
    JCR_RETURN_IF_ERROR(CheckBuffer("d_xp", *d_xp, r.weights_type, {T, B, W}));
    JCR_RETURN_IF_ERROR(CheckBuffer("d_bias", *d_bias, F32, {W}));
    JCR_RETURN_IF_ERROR(CheckBuffer("dh0", *dh0, F32, {B, H}));
    if (aux) JCR_RETURN_IF_ERROR(CheckBuffer("aux", *aux, F32, {T, B, H}));
    if (gru) {
      JCR_RETURN_IF_ERROR(CheckBuffer("h_prev", *h_prev, F32, {T, B, H}));
      JCR_RETURN_IF_ERROR(CheckBuffer("d_hp", **d_hp, r.weights_type, {T, B, W}));
      JCR_RETURN_IF_ERROR(CheckBuffer("d_bias_rec", **d_bias_rec, F32, {W}));
    }
    if (lstm) {
      for (const auto& [name, buffer] : {std::pair{"c0", &*c0}, std::pair{"dc_n", &*dc_n}}) {
        JCR_RETURN_IF_ERROR(CheckBuffer(name, *buffer, F32, {B, H}));
      }
      JCR_RETURN_IF_ERROR(CheckBuffer("dc0", **dc0, F32, {B, H}));
    }
    std::shared_ptr<const MatmulPlan> plan = PackedProductPlan(B, r.rows, W, H, r.weights_type, false);
    JCR_RETURN_IF_ERROR(CheckPacked(packed, *plan));

    const int64_t chunks = Chunks(B);
    RegionAllocator layout;
    const Region dh = layout.Add(B * H * 4), dc = layout.Add(B * H * 4), dh_new = layout.Add(B * H * 4),
                 d_pre = layout.Add(B * W * 4), d_rec = layout.Add(B * W * 4), direct = layout.Add(B * H * 4),
                 products = layout.Add(B * H * 4), sums = layout.Add(chunks * W * 4),
                 sums_rec = layout.Add(chunks * W * 4), scratchpad = layout.Add(plan->scratchpad_bytes);
    ScratchLease lease = TakeScratch(layout.total());
    void* work = lease.data();
    AdviseHugePages(d_xp->untyped_data(), d_xp->size_bytes());  // as the forward's outputs
    if (d_hp) AdviseHugePages((*d_hp)->untyped_data(), (*d_hp)->size_bytes());
    const bool dy_bf16 = dy.element_type() == ffi::DataType::BF16;
    auto f32 = [&](Region region) { return reinterpret_cast<float*>(region.in(work)); };

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
            LoadRow(dy_bf16, Row<char>(dy.untyped_data(), r, t, b, H, dy_bf16 ? 2 : 4), dh_row, H);
            const float* carried = f32(dh) + b * H;
            for (int64_t j = 0; j < H; ++j) dh_row[j] += carried[j];
            float* pre = f32(d_pre) + b * W;
            float* rec = f32(d_rec) + b * W;
            BackwardRow(r.mode, H, Row<const float>(gates.untyped_data(), r, t, b, W, 4),
                        aux ? Row<const float>(aux->untyped_data(), r, t, b, H, 4) : nullptr,
                        gru ? Row<const float>(h_prev->untyped_data(), r, t, b, H, 4) : nullptr,
                        lstm ? c_read + b * H : nullptr, dh_row, f32(dc) + b * H, pre, rec, f32(direct) + b * H);
            for (int64_t j = 0; j < W; ++j) sum[j] += pre[j];
            StoreRow(r.bf16(), pre, Row<char>(d_xp->untyped_data(), r, t, b, W, r.weights_bytes()), W);
            if (gru) {
              for (int64_t j = 0; j < W; ++j) sum_rec[j] += rec[j];
              StoreRow(r.bf16(), rec, Row<char>((*d_hp)->untyped_data(), r, t, b, W, r.weights_bytes()), W);
            }
          }
        });
        // dh w.r.t. the state the step read: through the recurrent product, plus (GRU) the direct part.
        void* operand = Row<char>(gru ? (*d_hp)->untyped_data() : d_xp->untyped_data(), r, t, 0, W, r.weights_bytes());
        RunMatmul(*plan, stream, operand, packed.untyped_data(), products.in(work), scratchpad.in(work));
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
      reduce(f32(sums), d_bias->untyped_data());
      if (gru) reduce(f32(sums_rec), (*d_bias_rec)->untyped_data());
      return ffi::Error::Success();
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GemmForward, GemmForwardImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // xp
                                  .Arg<ffi::AnyBuffer>()  // packed
                                  .Arg<ffi::AnyBuffer>()  // b_in
                                  .Arg<ffi::AnyBuffer>()  // b_rec
                                  .Arg<ffi::AnyBuffer>()  // h0
                                  .RemainingArgs()        // [c0]
                                  .Ret<ffi::AnyBuffer>()  // y
                                  .Ret<ffi::AnyBuffer>()  // h_n
                                  .RemainingRets()        // [c_n], [gates, [aux], [h_prev], h_gemm]
                                  .Attrs<RecurrenceAttrs>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(GemmBackward, GemmBackwardImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()  // packed
                                  .Arg<ffi::AnyBuffer>()  // dy
                                  .Arg<ffi::AnyBuffer>()  // dh_n
                                  .Arg<ffi::AnyBuffer>()  // gates
                                  .RemainingArgs()        // [aux], [h_prev], [c0, dc_n]
                                  .Ret<ffi::AnyBuffer>()  // d_xp
                                  .Ret<ffi::AnyBuffer>()  // d_bias
                                  .Ret<ffi::AnyBuffer>()  // dh0
                                  .RemainingRets()        // [d_hp, d_bias_rec], [dc0]
                                  .Attrs<RecurrenceAttrs>());

}  // namespace jax_cudnn_rnn::onednn
