"""How fast one int8 matrix the size of the 0.5B shape's tied head (151,936 x 896, 136 MB: far past the caches)
streams through an AVX-512 matrix-vector product like matvec_int8's, with the weight fetched D bytes ahead of the sums
(D = 0: the hardware prefetcher alone), against a plain read of the same bytes (XOR of every 64-byte line) and torch's
f32 product over the float matrix. Two threads, one per core; each figure the mean of 20 calls after 2.

    .venv/bin/python results/int8-kernel/stream.py   (builds a scratch extension; nothing else may run)"""

import time

import torch
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <ATen/ATen.h>
#include <torch/library.h>
#include <immintrin.h>
#include <omp.h>
#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((target("avx512f"), always_inline)) static inline
INLINE __m512 widen(const int8_t* p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p))); }
AVX512 static void products(const float* x, const int8_t* w, float* y, int64_t K, int64_t n0, int64_t n1, int64_t ahead) {
  for (int64_t n = n0; n < n1; ++n) {
    const int8_t* r = w + n * K;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < K; i += 64) {
      if (ahead) _mm_prefetch((const char*)(r + i + ahead), _MM_HINT_T0);
      s0 = _mm512_fmadd_ps(widen(r + i), _mm512_loadu_ps(x + i), s0);
      s1 = _mm512_fmadd_ps(widen(r + i + 16), _mm512_loadu_ps(x + i + 16), s1);
      s2 = _mm512_fmadd_ps(widen(r + i + 32), _mm512_loadu_ps(x + i + 32), s2);
      s3 = _mm512_fmadd_ps(widen(r + i + 48), _mm512_loadu_ps(x + i + 48), s3);
    }
    y[n] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  }
}
AVX512 static void read(const int8_t* w, float* y, int64_t b0, int64_t b1) {
  __m512i s = _mm512_setzero_si512();
  for (int64_t i = b0; i < b1; i += 64) s = _mm512_xor_si512(s, _mm512_loadu_si512(w + i));
  y[0] += (float)_mm512_reduce_add_epi32(s);
}
at::Tensor stream(const at::Tensor& x, const at::Tensor& w, int64_t ahead) {  // ahead < 0: the plain read
  const int64_t K = x.size(1), N = w.size(0);
  at::Tensor y = at::zeros({1, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const int8_t* wp = w.data_ptr<int8_t>();
  float* yp = y.data_ptr<float>();
  #pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    if (ahead < 0) read(wp, yp + t, N * K * t / T / 64 * 64, N * K * (t + 1) / T / 64 * 64);
    else products(xp, wp, yp, K, N * t / T, N * (t + 1) / T, ahead);
  }
  return y;
}
TORCH_LIBRARY(int8_stream, m) { m.def("stream(Tensor x, Tensor w, int ahead) -> Tensor"); }
TORCH_LIBRARY_IMPL(int8_stream, CPU, m) { m.impl("stream", stream); }
"""


def mean_seconds(call, calls=20):
    call(), call()
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls


def main():
    load_inline("int8_stream", cpp_sources=[SOURCE], extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"],
                is_python_module=False)  # fmt: skip
    n, k = 151936, 896
    w, x = torch.randint(-127, 128, (n, k), dtype=torch.int8), torch.randn(1, k)
    floats = w.float()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {torch.get_num_threads()} threads, [{n}, {k}]")
    for round_ in (1, 2):
        for ahead in (-1, 0, 256, 1024, 2048, 4096, 8192):
            seconds = mean_seconds(lambda: torch.ops.int8_stream.stream(x, w, ahead))
            what = "plain read of the int8 bytes" if ahead < 0 else f"int8 product, fetched {ahead:5d} bytes ahead"
            print(f"round {round_}  {what:42s} {seconds * 1e3:6.2f} ms  {n * k / seconds / 1e9:5.1f} GB/s", flush=True)
        seconds = mean_seconds(lambda: x @ floats.t())
        print(f"round {round_}  {'torch f32 product of the float matrix':42s} {seconds * 1e3:6.2f} ms  "
              f"{4 * n * k / seconds / 1e9:5.1f} GB/s")  # fmt: skip


if __name__ == "__main__":
    main()
