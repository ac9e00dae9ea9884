// Products of a few rows (a step of a small batch) in the handlers' own loops: out [rows, n] (+)= a [rows, K] times
// a block of weights, float32 or bfloat16, as it lies. oneDNN's matmul costs a dispatch to the threads and more per
// call (about 5 us for a [4, 128] x [128, 128] product on 2 threads where this takes 2; Intel Emerald Rapids,
// 2026-12-01), which a step of a frontend's per-gate blocks pays 6-8 times. Register tiles of AVX-512 vectors where
// the CPU has them (TiledProducts), plain vectorized loops elsewhere; on the calling thread: the caller splits the
// work between threads.
#ifndef JAX_CUDNN_RNN_ONEDNN_SMALL_PRODUCTS_H_
#define JAX_CUDNN_RNN_ONEDNN_SMALL_PRODUCTS_H_

#include <cstdint>

namespace jax_cudnn_rnn::onednn {

// Whether the products below run register tiles (the CPU has AVX-512 and oneDNN's kernels are not capped below it),
// not plain loops.
bool TiledProducts();

// out[r * ldo + j] (+)= sum_k a[r * lda + k] w[k * ldw + j] for r < rows, j < n, k < K: weights stored [K, n] (a
// Flax kernel, a canonical matrix read as its transpose). `accumulate`: add to out, else overwrite it.
void ProductColumns(bool bf16, const float* a, int64_t lda, int64_t rows, int64_t K, const void* w, int64_t ldw,
                    int64_t n, float* out, int64_t ldo, bool accumulate);
// out[r * ldo + j] (+)= sum_k a[r * lda + k] w[j * ldw + k]: weights stored [n, K] (a canonical matrix).
void ProductRows(bool bf16, const float* a, int64_t lda, int64_t rows, int64_t K, const void* w, int64_t ldw, int64_t n,
                 float* out, int64_t ldo, bool accumulate);

}  // namespace jax_cudnn_rnn::onednn

#endif  // JAX_CUDNN_RNN_ONEDNN_SMALL_PRODUCTS_H_
