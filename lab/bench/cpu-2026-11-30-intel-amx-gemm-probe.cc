// A bfloat16 GEMM on AMX tiles, c[M, N] (float32) = a[M, K] b[K, N], to measure what the products of a large
// bfloat16 RNN forward could run at on an AMX CPU next to oneDNN 3.2's matmul (issue 61). A probe, not part of the
// package: lab/bench/cpu-2026-11-30-intel-amx-gemm-probe.md has the numbers and what mattered.
//
//   g++ -O2 -std=c++17 -o amx_gemm_probe cpu-2026-11-30-intel-amx-gemm-probe.cc -lpthread
//   ./amx_gemm_probe M MC [threads] [repeats]     (K = 1024, N = 4096; M a multiple of 32; MC row blocks per chunk)
//
// a is read where it lies (row-major, tile loads at its row stride); b is packed once into 32-column panels, each
// [K/32][2 tiles][16 K-pairs][16 columns x 2] (AMX's VNNI layout); each thread takes a share of the row blocks (or,
// where there are fewer than 4 per thread, of the panels), and for each chunk of MC row blocks (kept in L2)
// sweeps every panel: a 2x2 block of 16x16 accumulator tiles over the whole K. Every buffer 4 KiB-aligned.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

template <class T>
T* Aligned(size_t n) {
  return static_cast<T*>(std::aligned_alloc(4096, (n * sizeof(T) + 4095) / 4096 * 4096));
}

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

float FromBf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void PackB(const uint16_t* b, int64_t K, int64_t N, uint16_t* out) {
  for (int64_t p = 0; p < N / 32; ++p)
    for (int64_t kb = 0; kb < K / 32; ++kb)
      for (int t = 0; t < 2; ++t)
        for (int r = 0; r < 16; ++r)
          for (int c = 0; c < 16; ++c)
            for (int q = 0; q < 2; ++q)
              out[(((p * (K / 32) + kb) * 2 + t) * 16 + r) * 32 + c * 2 + q] = b[(kb * 32 + 2 * r + q) * N + p * 32 + t * 16 + c];
}

// Row blocks [m0, m1) (32 rows each) times panels [p0, p1).
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void Blocks(const uint16_t* a, const uint16_t* packed, float* c,
                                                               int64_t K, int64_t N, int64_t m0, int64_t m1,
                                                               int64_t p0, int64_t p1) {
  TileConfig config;
  for (int i = 0; i < 8; ++i) config.rows[i] = 16, config.colsb[i] = 64;
  asm volatile("" ::: "memory");  // GCC 12 may sink the config's stores below ldtilecfg otherwise
  _tile_loadconfig(&config);
  const int64_t KB = K / 32;
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* panel = packed + p * KB * 1024;
    for (int64_t m = m0; m < m1; ++m) {
      const uint16_t* rows = a + m * 32 * K;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t kb = 0; kb < KB; ++kb) {
        _tile_loadd(4, rows + kb * 32, K * 2);
        _tile_loadd(6, panel + kb * 1024, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, panel + kb * 1024 + 512, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, rows + 16 * K + kb * 32, K * 2);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        // the next panel into L2, a few lines per step
        const char* next = reinterpret_cast<const char*>(panel + KB * 1024) + (((m - m0) * KB + kb) * 8 % 1024) * 64;
        for (int i = 0; i < 8; ++i) _mm_prefetch(next + i * 64, _MM_HINT_T1);
      }
      float* out = c + m * 32 * N + p * 32;
      _tile_stored(0, out, N * 4);
      _tile_stored(1, out + 16, N * 4);
      _tile_stored(2, out + 16 * N, N * 4);
      _tile_stored(3, out + 16 * N + 16, N * 4);
    }
  }
  _tile_release();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    std::fprintf(stderr, "usage: amx_gemm_probe M MC [threads] [repeats], on a CPU with AMX-BF16\n");
    return 2;
  }
  const int64_t M = std::atol(argv[1]), MC = std::atol(argv[2]), K = 1024, N = 4096;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2, repeats = argc > 4 ? std::atoi(argv[4]) : 20;
  uint16_t *a = Aligned<uint16_t>(M * K), *b = Aligned<uint16_t>(K * N), *packed = Aligned<uint16_t>(K * N);
  float* c = Aligned<float>(M * N);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < M * K; ++i) a[i] = ToBf16(normal(rng));
  for (int64_t i = 0; i < K * N; ++i) b[i] = ToBf16(0.03f * normal(rng));
  PackB(b, K, N, packed);
  const int64_t MB = M / 32, P = N / 32;
  auto work = [&](int t) {
    for (int i = 0; i < repeats; ++i) {
      if (MB >= 4 * threads) {  // many row blocks: a share each; few (one step's rows): a share of the panels
        for (int64_t m = MB * t / threads; m < MB * (t + 1) / threads; m += MC)
          Blocks(a, packed, c, K, N, m, std::min(m + MC, MB * (t + 1) / threads), 0, P);
      } else {
        Blocks(a, packed, c, K, N, 0, MB, P * t / threads, P * (t + 1) / threads);
      }
    }
  };
  double best = 1e30;
  for (int round = 0; round < 4; ++round) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
    for (auto& thread : pool) thread.join();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
                              repeats);
  }
  double error = 0;  // against a float64 sum of the same bfloat16 operands, at 200 random entries
  for (int s = 0; s < 200; ++s) {
    const int64_t i = rng() % M, j = rng() % N;
    double want = 0;
    for (int64_t k = 0; k < K; ++k) want += double(FromBf16(a[i * K + k])) * FromBf16(b[k * N + j]);
    error = std::max(error, std::fabs(want - c[i * N + j]));
  }
  std::printf("M %ld K %ld N %ld, MC %ld, %d threads: %.3f ms, %.0f GFLOP/s, max abs error %.1e\n", M, K, N, MC,
              threads, best, 2.0 * M * K * N / best / 1e6, error);
  return error < 1e-3 ? 0 : 1;
}
