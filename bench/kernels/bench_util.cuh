#pragma once
// kernel_bench's helpers, shared by its translation units (kernel_bench.cu, gemv_bench.cu,
// decode_attn_bench.cu, prefill_attn_bench.cu): device
// buffers, random bf16 fills, the figure table, bf16 download and relative error.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/model/half.h"
#include "kernels/cuda_check.h"

namespace servelab::kernels::bench {

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b) : bytes(b) { CUDA_CHECK(cudaMalloc(&p, b ? b : 16)); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  template <typename T = void>
  T* get() const { return static_cast<T*>(p); }
};

static __global__ void fill_random_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t h = (uint64_t(i) + seed) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    p[i] = __float2bfloat16(((h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale);
  }
}
static __global__ void fill_random_f32_kernel(float* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t h = (uint64_t(i) + seed) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    p[i] = ((h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
  }
}
inline void fill_random(void* p, int64_t n, uint64_t seed, float scale = 1.0f) {
  fill_random_kernel<<<4096, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale);
  CUDA_CHECK_LAUNCH();
}

struct Row {
  std::string name, shape, unit, ceiling_name;
  double value, ceiling;
};
inline std::vector<Row> rows;  ///< every recorded figure, written to the JSON at the end
inline void record(const std::string& name, const std::string& shape, double value, const std::string& unit,
            const std::string& ceiling_name, double ceiling) {
  rows.push_back({name, shape, unit, ceiling_name, value, ceiling});
  std::printf("  %-26s %-40s %10.1f %-8s (%.2f of %s)\n", name.c_str(), shape.c_str(), value, unit.c_str(),
              ceiling > 0 ? value / ceiling : 0.0, ceiling_name.c_str());
}

inline std::vector<float> to_float_bf16(const Buf& b, size_t n) {
  std::vector<uint16_t> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), b.p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = bf16_to_f32(h[i]);
  return f;
}

inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

/// The skinny GEMM against gemm_ref on an awkward shape (gemv_bench.cu).
bool validate_gemv();
/// llama2-7b's decode products at M = 1 and 8: gemv, cuBLASLt and the mix (gemv_bench.cu).
void bench_gemv(int64_t l2, double copy_gbs);
/// llama2-7b's decode products over FP8 and INT4 weights (quant_gemv) beside bf16 through Gemm.
void bench_quant_gemv(int64_t l2, double copy_gbs);
/// The FP8 W8A8 prefill path against its reference (fp8_gemm_bench.cu).
bool validate_fp8_gemm();
/// FP8 GEMM 8192^3 and llama2-7b prefill products beside bf16, activation quantization (fp8_gemm_bench.cu).
void bench_fp8_gemm(double gemm_tflops, double copy_gbs);

struct DecodeBenchOptions {
  bool quick = false;  ///< batches 1 and 32 at context 4k only
  bool sweep = false;  ///< the comparison columns (decode_attn_bench.cu)
  std::string only;    ///< one shape, e.g. "b1 ctx1024 gqa4"; "" every shape
};
/// Paged decode attention over the shape grid beside the copy ceiling (decode_attn_bench.cu).
void bench_decode_attention(const DecodeBenchOptions& opt, std::mt19937_64& rng, int n_sms, int64_t l2, double copy_gbs);
/// Decode attention over an FP8 KV cache (decode_attention_fp8) beside bf16 KV on the same
/// tables: GQA 1 / 4 / 8, batches 1 / 32 / 128, contexts 1k / 4k (decode_fp8_bench.cu).
enum class ArenaOrder;
void bench_decode_attention_fp8(std::mt19937_64& rng, int n_sms, int64_t l2, double copy_gbs, const std::string& only,
                                ArenaOrder order);
/// Verification attention: decode_attention_rows beside the one-row transform (decode_rows_bench.cu).
void bench_decode_rows(std::mt19937_64& rng, int n_sms, double copy_gbs);
/// 1k / 4k causal prefill attention on four KV layouts beside the GEMM ceiling (prefill_attn_bench.cu).
void bench_prefill_attention(bool quick, std::mt19937_64& rng, int n_sms, double gemm_tflops);

}  // namespace servelab::kernels::bench
