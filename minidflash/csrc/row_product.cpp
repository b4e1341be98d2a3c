// y = x w^T for a few rows x (M, K) and a weight w (N, K), fp32, reading w once (row_product.py).
//
// Each output y[m, o] is one dot product of x[m] and w[o], summed the same way whatever M is
// and wherever row m sits: 8 lanes of fused multiply-adds along K, then the lanes added in a
// fixed order. So a row's result does not depend on the other rows of the call.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <immintrin.h>

namespace {

inline float add_lanes(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// R rows of x against output rows o0..o1 of w, O output rows at a time (R * O sums in
// registers), the next O rows of w fetched ahead while these are summed
template <int R>
void rows(const float* x, const float* w, float* y, int64_t K, int64_t N, int64_t o0, int64_t o1) {
  constexpr int O = R <= 2 ? 4 : R <= 4 ? 3 : 2;
  int64_t o = o0;
  for (; o + O <= o1; o += O) {
    __m256 acc[O][R];
    for (int a = 0; a < O; ++a)
      for (int r = 0; r < R; ++r) acc[a][r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < K; i += 8) {
      if (i % 16 == 0)
        for (int a = 0; a < O; ++a) _mm_prefetch((const char*)(w + (o + O + a) * K + i), _MM_HINT_T0);
      __m256 xv[R];
      for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * K + i);
      for (int a = 0; a < O; ++a) {
        __m256 wv = _mm256_loadu_ps(w + (o + a) * K + i);
        for (int r = 0; r < R; ++r) acc[a][r] = _mm256_fmadd_ps(wv, xv[r], acc[a][r]);
      }
    }
    for (int a = 0; a < O; ++a)
      for (int r = 0; r < R; ++r) y[r * N + o + a] = add_lanes(acc[a][r]);
  }
  for (; o < o1; ++o) {                       // the last few output rows, one at a time
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < K; i += 8) {
      __m256 wv = _mm256_loadu_ps(w + o * K + i);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * K + i), acc[r]);
    }
    for (int r = 0; r < R; ++r) y[r * N + o] = add_lanes(acc[r]);
  }
}

using Rows = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t);
constexpr Rows BY_COUNT[] = {rows<1>, rows<2>, rows<3>, rows<4>, rows<5>, rows<6>, rows<7>, rows<8>};

at::Tensor row_product(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "x (M, K) and w (N, K)");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "fp32 only");
  TORCH_CHECK(x.is_cpu() && w.is_cpu() && x.is_contiguous() && w.is_contiguous(), "contiguous, CPU");
  TORCH_CHECK(x.size(0) >= 1 && x.size(0) <= 8 && x.size(1) % 8 == 0, "1..8 rows, K a multiple of 8");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  at::Tensor y = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t share = (N + at::get_num_threads() - 1) / at::get_num_threads();
  at::parallel_for(0, N, share, [&](int64_t o0, int64_t o1) {   // one slice of w a thread
    BY_COUNT[M - 1](xp, wp, yp, K, N, o0, o1);
  });
  return y;
}

}  // namespace

TORCH_LIBRARY(minidflash, m) { m.def("row_product(Tensor x, Tensor w) -> Tensor", row_product); }
