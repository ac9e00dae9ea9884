#include "small_products.h"

#include <algorithm>
#include <cstring>

#include "oneapi/dnnl/dnnl.h"

namespace jax_cudnn_rnn::onednn {

namespace {

#define JCR_INLINE inline __attribute__((always_inline))

// 16 floats: a zmm register (GCC's vector extensions). The tiles are compiled for AVX-512 alone: the same source for
// AVX2 (two ymm a vector) ran 10-40x slower than the AVX-512 tiles and than the plain loops further down, which GCC
// vectorizes for each instruction set (a C++ micro-benchmark, [4, 128] x [128, 384], 2026-12-01).
typedef float V __attribute__((vector_size(64)));
typedef int Lanes __attribute__((vector_size(64)));
typedef uint16_t Half __attribute__((vector_size(32)));
typedef uint32_t Wide __attribute__((vector_size(64)));
constexpr int kLanes = 16;

JCR_INLINE V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// 16 weights as floats: bfloat16's bits are a float's upper half.
template <typename W>
JCR_INLINE V LoadWeights(const W* p) {
  if constexpr (sizeof(W) == 4) {
    return Load(p);
  } else {
    Half h;
    std::memcpy(&h, p, sizeof(Half));
    const Wide bits = __builtin_convertvector(h, Wide) << 16;
    V v;
    std::memcpy(&v, &bits, sizeof(V));
    return v;
  }
}

template <typename W>
JCR_INLINE float Weight(const W* p) {
  if constexpr (sizeof(W) == 4) {
    return *p;
  } else {
    const uint32_t bits = static_cast<uint32_t>(*p) << 16;
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }
}

JCR_INLINE void Store(float* p, V v, bool accumulate) {
  if (accumulate) v += Load(p);
  std::memcpy(p, &v, sizeof(V));
}

JCR_INLINE void Put(float* p, float v, bool accumulate) { *p = accumulate ? *p + v : v; }

// R rows times 2 vectors of columns (32): 2R accumulators, each weight vector loaded once for the R rows.
template <int R, typename W>
JCR_INLINE void ColumnsTile(const float* __restrict a, int64_t lda, int64_t K, const W* __restrict w, int64_t ldw,
                            float* __restrict out, int64_t ldo, bool accumulate) {
  V acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = V{};
  for (int64_t k = 0; k < K; ++k) {
    const V w0 = LoadWeights(w + k * ldw), w1 = LoadWeights(w + k * ldw + kLanes);
    for (int r = 0; r < R; ++r) {
      const V s = V{} + a[r * lda + k];
      acc[r][0] += s * w0;
      acc[r][1] += s * w1;
    }
  }
  for (int r = 0; r < R; ++r) {
    Store(out + r * ldo, acc[r][0], accumulate);
    Store(out + r * ldo + kLanes, acc[r][1], accumulate);
  }
}

template <typename W>
JCR_INLINE void Columns(const float* a, int64_t lda, int64_t rows, int64_t K, const W* w, int64_t ldw, int64_t n,
                        float* out, int64_t ldo, bool accumulate) {
  int64_t j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) ColumnsTile<4>(a + r * lda, lda, K, w + j, ldw, out + r * ldo + j, ldo, accumulate);
    for (; r < rows; ++r) ColumnsTile<1>(a + r * lda, lda, K, w + j, ldw, out + r * ldo + j, ldo, accumulate);
  }
  for (int64_t r = 0; r < rows && j < n; ++r) {  // the last columns, fewer than 32
    for (int64_t c = j; c < n; ++c) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += a[r * lda + k] * Weight(w + k * ldw + c);
      Put(out + r * ldo + c, sum, accumulate);
    }
  }
}

// The sums of the lanes of v[0..3], into out[0], out[1], out[2], out[3]: halves added pairwise, so that four sums cost
// four shuffles and adds rather than 60 scalar adds.
JCR_INLINE void Sums(const V* v, float* out, bool accumulate) {
  const Lanes low{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  const Lanes high{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
  const V x = __builtin_shuffle(v[0], v[1], low) + __builtin_shuffle(v[0], v[1], high);  // v0's 8, v1's 8
  const V y = __builtin_shuffle(v[2], v[3], low) + __builtin_shuffle(v[2], v[3], high);
  const V z = __builtin_shuffle(x, y, Lanes{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27}) +
              __builtin_shuffle(x, y, Lanes{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31});
  const V u = z + __builtin_shuffle(z, Lanes{2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
  const V s = u + __builtin_shuffle(u, Lanes{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14});
  for (int j = 0; j < 4; ++j) Put(out + j, s[4 * j], accumulate);
}

// R rows times 4 weight rows: 4R accumulators over K in vectors, the rest of K (fewer than 16) added after the sums.
template <int R, typename W>
JCR_INLINE void RowsTile(const float* __restrict a, int64_t lda, int64_t K, const W* __restrict w, int64_t ldw,
                         float* __restrict out, int64_t ldo, bool accumulate) {
  V acc[R][4];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = V{};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    V wv[4];
    for (int j = 0; j < 4; ++j) wv[j] = LoadWeights(w + j * ldw + k);
    for (int r = 0; r < R; ++r) {
      const V av = Load(a + r * lda + k);
      for (int j = 0; j < 4; ++j) acc[r][j] += av * wv[j];
    }
  }
  for (int r = 0; r < R; ++r) {
    float sums[4];
    Sums(acc[r], sums, false);
    for (int j = 0; j < 4; ++j) {
      for (int64_t i = k; i < K; ++i) sums[j] += a[r * lda + i] * Weight(w + j * ldw + i);
      Put(out + r * ldo + j, sums[j], accumulate);
    }
  }
}

template <typename W>
JCR_INLINE void Rows(const float* a, int64_t lda, int64_t rows, int64_t K, const W* w, int64_t ldw, int64_t n,
                     float* out, int64_t ldo, bool accumulate) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    int64_t r = 0;
    for (; r + 2 <= rows; r += 2)
      RowsTile<2>(a + r * lda, lda, K, w + j * ldw, ldw, out + r * ldo + j, ldo, accumulate);
    for (; r < rows; ++r) RowsTile<1>(a + r * lda, lda, K, w + j * ldw, ldw, out + r * ldo + j, ldo, accumulate);
  }
  for (int64_t r = 0; r < rows && j < n; ++r) {  // the last weight rows, fewer than 4
    for (int64_t c = j; c < n; ++c) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += a[r * lda + k] * Weight(w + c * ldw + k);
      Put(out + r * ldo + c, sum, accumulate);
    }
  }
}

// The same products as plain loops, as "onednn:gemm" wrote its products of up to 2 rows before the tiles: a dot product
// per output (rows form) or a run of outputs per input (columns form), each a call compiled for the instruction set at
// hand, whose loop GCC vectorizes.
template <typename W>
JCR_INLINE float DotOf(const float* __restrict v, const W* __restrict w, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += v[i] * Weight(w + i);
  return sum;
}

template <typename W>
JCR_INLINE void AxpyOf(float s, const W* __restrict w, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += s * Weight(w + i);
}

// GCC vectorizes a float sum only where it may reassociate it: the order of Dot's sum is the vectorizer's.
__attribute__((optimize("associative-math", "no-signed-zeros", "no-trapping-math")))
__attribute__((target_clones("avx2", "default"))) float
Dot(bool bf16, const float* v, const void* w, int64_t n) {
  return bf16 ? DotOf(v, static_cast<const uint16_t*>(w), n) : DotOf(v, static_cast<const float*>(w), n);
}

__attribute__((target_clones("avx2", "default"))) void Axpy(bool bf16, float s, const void* w, float* out, int64_t n) {
  if (bf16) AxpyOf(s, static_cast<const uint16_t*>(w), out, n);
  else AxpyOf(s, static_cast<const float*>(w), out, n);
}

void PlainColumns(bool bf16, const float* a, int64_t lda, int64_t rows, int64_t K, const void* w, int64_t ldw,
                  int64_t n, float* out, int64_t ldo, bool accumulate) {
  const size_t bytes = bf16 ? 2 : 4;
  for (int64_t r = 0; r < rows && !accumulate; ++r) std::fill_n(out + r * ldo, n, 0.0f);
  for (int64_t k = 0; k < K; ++k) {
    const char* run = static_cast<const char*>(w) + k * ldw * bytes;
    for (int64_t r = 0; r < rows; ++r) Axpy(bf16, a[r * lda + k], run, out + r * ldo, n);
  }
}

void PlainRows(bool bf16, const float* a, int64_t lda, int64_t rows, int64_t K, const void* w, int64_t ldw, int64_t n,
               float* out, int64_t ldo, bool accumulate) {
  const size_t bytes = bf16 ? 2 : 4;
  for (int64_t j = 0; j < n; ++j) {
    const char* row = static_cast<const char*>(w) + j * ldw * bytes;
    for (int64_t r = 0; r < rows; ++r) Put(out + r * ldo + j, Dot(bf16, a + r * lda, row, K), accumulate);
  }
}

__attribute__((target("avx512f"))) void TiledColumns(bool bf16, const float* a, int64_t lda, int64_t rows, int64_t K,
                                                     const void* w, int64_t ldw, int64_t n, float* out, int64_t ldo,
                                                     bool accumulate) {
  if (bf16) Columns(a, lda, rows, K, static_cast<const uint16_t*>(w), ldw, n, out, ldo, accumulate);
  else Columns(a, lda, rows, K, static_cast<const float*>(w), ldw, n, out, ldo, accumulate);
}

__attribute__((target("avx512f"))) void TiledRows(bool bf16, const float* a, int64_t lda, int64_t rows, int64_t K,
                                                  const void* w, int64_t ldw, int64_t n, float* out, int64_t ldo,
                                                  bool accumulate) {
  if (bf16) Rows(a, lda, rows, K, static_cast<const uint16_t*>(w), ldw, n, out, ldo, accumulate);
  else Rows(a, lda, rows, K, static_cast<const float*>(w), ldw, n, out, ldo, accumulate);
}

}  // namespace

bool TiledProducts() {
  // The CPU's AVX-512, and oneDNN's kernels on it: ONEDNN_MAX_CPU_ISA=AVX2 (.ci/onednn_caps) runs the AVX2 class's
  // products throughout, as on a CPU of that class
  static const bool tiled = __builtin_cpu_supports("avx512f") &&
                            (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  return tiled;
}

void ProductColumns(bool bf16, const float* a, int64_t lda, int64_t rows, int64_t K, const void* w, int64_t ldw,
                    int64_t n, float* out, int64_t ldo, bool accumulate) {
  if (TiledProducts()) TiledColumns(bf16, a, lda, rows, K, w, ldw, n, out, ldo, accumulate);
  else PlainColumns(bf16, a, lda, rows, K, w, ldw, n, out, ldo, accumulate);
}

void ProductRows(bool bf16, const float* a, int64_t lda, int64_t rows, int64_t K, const void* w, int64_t ldw, int64_t n,
                 float* out, int64_t ldo, bool accumulate) {
  if (TiledProducts()) TiledRows(bf16, a, lda, rows, K, w, ldw, n, out, ldo, accumulate);
  else PlainRows(bf16, a, lda, rows, K, w, ldw, n, out, ldo, accumulate);
}

}  // namespace jax_cudnn_rnn::onednn
