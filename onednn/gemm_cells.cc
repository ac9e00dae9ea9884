#include "gemm_cells.h"

#include <algorithm>
#include <cstring>

namespace jax_cudnn_rnn::onednn {

namespace {

// The loops below are written to vectorize: branch-free element functions, inlined. Each entry point is compiled for
// AVX-512, AVX2 and the baseline and picks the best the CPU has when the module loads (GCC's target_clones), so that
// the wheel runs on every x86-64 CPU and uses wide vectors where there are some.
#define JCR_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
// Inlined into each clone, so that they are compiled for its instruction set. The rows' arrays never overlap
// (gemm_recurrence.cc), which __restrict tells the vectorizer.
#define JCR_INLINE inline __attribute__((always_inline))

JCR_INLINE uint32_t FloatToBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

JCR_INLINE float BitsToFloat(int32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// exp(x) for x in [-18, 0], to about 2 ulp: x = n ln 2 + r with |r| <= ln 2 / 2, exp(r) by Cephes' degree-6
// polynomial, 2^n by the exponent's bits. n is rounded by adding and subtracting 1.5 * 2^23 (no call to floorf, which
// the baseline instruction set lacks).
JCR_INLINE float ExpOfNegative(float x) {
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return (p * r * r + r + 1.0f) * BitsToFloat((static_cast<int32_t>(n) + 127) << 23);
}

// tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2 min(|x|, 9)): within 1e-7 of it everywhere (relative where
// |x| > 0.5; tanh(9) rounds to 1 in float32 anyway), NaN for NaN. The selects are on the bits, as integers: a float
// comparison keeps GCC from vectorizing the loop (it may trap), an integer one does not, and signed ones exist in every
// instruction set.
JCR_INLINE float Tanh(float x) {
  const int32_t bits = static_cast<int32_t>(FloatToBits(x)), magnitude = bits & 0x7FFFFFFF, sign = bits ^ magnitude;
  const int32_t clamped = magnitude < 0x41100000 ? magnitude : 0x41100000;  // 9.0f
  const float e = ExpOfNegative(-2.0f * BitsToFloat(clamped));
  const int32_t result = static_cast<int32_t>(FloatToBits((1.0f - e) / (1.0f + e))) | sign;
  return BitsToFloat(magnitude > 0x7F800000 ? bits : result);
}

// max(x, 0), NaN for NaN (as jax.nn.relu), by the bits as Tanh.
JCR_INLINE float Relu(float x) {
  const int32_t bits = static_cast<int32_t>(FloatToBits(x));
  return BitsToFloat(bits < 0 && (bits & 0x7FFFFFFF) <= 0x7F800000 ? 0 : bits);
}

// dh where the ReLU's output h is positive, else 0.
JCR_INLINE float ReluGradient(float h, float dh) {
  return BitsToFloat(static_cast<int32_t>(FloatToBits(h)) > 0 ? static_cast<int32_t>(FloatToBits(dh)) : 0);
}

// The package's sigmoid (jax_cudnn_rnn/cells/spec.py): one tanh.
JCR_INLINE float Sigmoid(float x) { return 0.5f * Tanh(0.5f * x) + 0.5f; }

JCR_INLINE void LstmForward(int64_t H, const float* __restrict xp, const float* __restrict hp,
                            const float* __restrict b_in, const float* __restrict b_rec, const float* __restrict c,
                            float* __restrict h_out, float* __restrict c_out, float* __restrict gates) {
  for (int64_t j = 0; j < H; ++j) {
    const float i = Sigmoid(xp[j] + b_in[j] + hp[j] + b_rec[j]);
    const float f = Sigmoid(xp[H + j] + b_in[H + j] + hp[H + j] + b_rec[H + j]);
    const float g = Tanh(xp[2 * H + j] + b_in[2 * H + j] + hp[2 * H + j] + b_rec[2 * H + j]);
    const float o = Sigmoid(xp[3 * H + j] + b_in[3 * H + j] + hp[3 * H + j] + b_rec[3 * H + j]);
    const float c_new = f * c[j] + i * g;
    gates[j] = i;
    gates[H + j] = f;
    gates[2 * H + j] = g;
    gates[3 * H + j] = o;
    c_out[j] = c_new;
    h_out[j] = o * Tanh(c_new);
  }
}

JCR_INLINE void GruForward(int64_t H, const float* __restrict xp, const float* __restrict hp,
                           const float* __restrict b_in, const float* __restrict b_rec, const float* __restrict h,
                           float* __restrict h_out, float* __restrict gates, float* __restrict aux) {
  for (int64_t j = 0; j < H; ++j) {
    const float r = Sigmoid(xp[j] + b_in[j] + hp[j] + b_rec[j]);
    const float z = Sigmoid(xp[H + j] + b_in[H + j] + hp[H + j] + b_rec[H + j]);
    const float hn = hp[2 * H + j] + b_rec[2 * H + j];
    const float n = Tanh(xp[2 * H + j] + b_in[2 * H + j] + r * hn);
    gates[j] = r;
    gates[H + j] = z;
    gates[2 * H + j] = n;
    aux[j] = hn;
    h_out[j] = (1.0f - z) * n + z * h[j];
  }
}

JCR_INLINE void ElmanForward(bool relu, int64_t H, const float* __restrict xp, const float* __restrict hp,
                             const float* __restrict b_in, const float* __restrict b_rec, float* __restrict h_out,
                             float* __restrict gates) {
  for (int64_t j = 0; j < H; ++j) {
    const float pre = xp[j] + b_in[j] + hp[j] + b_rec[j];
    const float h_new = relu ? Relu(pre) : Tanh(pre);
    gates[j] = h_new;
    h_out[j] = h_new;
  }
}

JCR_INLINE void LstmBackward(int64_t H, const float* __restrict gates, const float* __restrict c_new,
                             const float* __restrict c, const float* __restrict dh, float* __restrict dc,
                             float* __restrict d_pre) {
  for (int64_t j = 0; j < H; ++j) {
    const float i = gates[j], f = gates[H + j], g = gates[2 * H + j], o = gates[3 * H + j];
    const float tanh_c = Tanh(c_new[j]);
    const float dc_total = dc[j] + dh[j] * o * (1.0f - tanh_c * tanh_c);
    d_pre[j] = dc_total * g * i * (1.0f - i);
    d_pre[H + j] = dc_total * c[j] * f * (1.0f - f);
    d_pre[2 * H + j] = dc_total * i * (1.0f - g * g);
    d_pre[3 * H + j] = dh[j] * tanh_c * o * (1.0f - o);
    dc[j] = dc_total * f;
  }
}

JCR_INLINE void GruBackward(int64_t H, const float* __restrict gates, const float* __restrict hn,
                            const float* __restrict h, const float* __restrict dh, float* __restrict d_xp,
                            float* __restrict d_hp, float* __restrict dh_direct) {
  for (int64_t j = 0; j < H; ++j) {
    const float r = gates[j], z = gates[H + j], n = gates[2 * H + j];
    const float d_n = dh[j] * (1.0f - z) * (1.0f - n * n);
    const float d_r = d_n * hn[j] * r * (1.0f - r);
    const float d_z = dh[j] * (h[j] - n) * z * (1.0f - z);
    d_xp[j] = d_hp[j] = d_r;
    d_xp[H + j] = d_hp[H + j] = d_z;
    d_xp[2 * H + j] = d_n;
    d_hp[2 * H + j] = d_n * r;
    dh_direct[j] = dh[j] * z;
  }
}

JCR_INLINE void ElmanBackward(bool relu, int64_t H, const float* __restrict h_new, const float* __restrict dh,
                              float* __restrict d_pre) {
  for (int64_t j = 0; j < H; ++j) {
    d_pre[j] = relu ? ReluGradient(h_new[j], dh[j]) : dh[j] * (1.0f - h_new[j] * h_new[j]);
  }
}

}  // namespace

JCR_VECTOR_CLONES
void ForwardRow(Mode mode, int64_t units, const float* xp, const float* hp, const float* b_in, const float* b_rec,
                const float* h, const float* c, float* h_out, float* c_out, float* gates, float* aux) {
  switch (mode) {
    case Mode::kLstm:
      return LstmForward(units, xp, hp, b_in, b_rec, c, h_out, c_out, gates);
    case Mode::kGru:
      return GruForward(units, xp, hp, b_in, b_rec, h, h_out, gates, aux);
    case Mode::kRnnTanh:
    case Mode::kRnnRelu:
      return ElmanForward(mode == Mode::kRnnRelu, units, xp, hp, b_in, b_rec, h_out, gates);
  }
}

JCR_VECTOR_CLONES
void BackwardRow(Mode mode, int64_t units, const float* gates, const float* aux, const float* h, const float* c,
                 const float* dh, float* dc, float* d_xp, float* d_hp, float* dh_direct) {
  switch (mode) {
    case Mode::kLstm:
      return LstmBackward(units, gates, aux, c, dh, dc, d_xp);
    case Mode::kGru:
      return GruBackward(units, gates, aux, h, dh, d_xp, d_hp, dh_direct);
    case Mode::kRnnTanh:
    case Mode::kRnnRelu:
      return ElmanBackward(mode == Mode::kRnnRelu, units, gates, dh, d_xp);
  }
}

JCR_VECTOR_CLONES
void StoreRow(bool bf16, const float* src, void* dst, int64_t n) {
  if (!bf16) {
    std::copy_n(src, n, static_cast<float*>(dst));
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t bits = FloatToBits(src[j]);
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;  // to nearest even
    out[j] = static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? (bits >> 16) | 0x40u : rounded);  // NaN stays
  }
}

JCR_VECTOR_CLONES
void LoadRow(bool bf16, const void* src, float* dst, int64_t n) {
  if (!bf16) {
    std::copy_n(static_cast<const float*>(src), n, dst);
    return;
  }
  const auto* in = static_cast<const uint16_t*>(src);
  for (int64_t j = 0; j < n; ++j) dst[j] = BitsToFloat(static_cast<int32_t>(static_cast<uint32_t>(in[j]) << 16));
}

}  // namespace jax_cudnn_rnn::onednn
