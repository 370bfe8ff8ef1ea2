// Throughput of E4M3 -> 16-bit pair conversions on one SM: cvt.rn.f16x2.e4m3x2 (two a word, SASS
// F2FP.F16.E4M3.UNPACK_B) against the shift/mask pairs of the FP8 KV decode kernels
// (kernels/attention_decode_fp8.cuh), each round's result fed back into the next. Standalone, on
// the GPU machine: nvcc -O3 -arch=sm_90a bench/kernels/e4m3_cvt_probe.cu -o /tmp/p && /tmp/p
// (results/gpu/quant/h200-2026-12-03-fp8kv-f16/).
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
__device__ __forceinline__ uint32_t cvt_pair(uint16_t h) {
  uint32_t r;
  asm volatile("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(h));
  return r;
}
__device__ __forceinline__ uint32_t lo_pair(uint32_t w) { return ((w << 4) & 0x07f007f0u) | ((w << 8) & 0x80008000u); }
__device__ __forceinline__ uint32_t hi_pair(uint32_t w) { return ((w >> 4) & 0x07f007f0u) | (w & 0x80008000u); }
template <int M>
__global__ void k(uint32_t* out, int iters, uint32_t seed) {
  uint32_t w[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) w[j] = seed * (threadIdx.x + 17 * j + 1);
  uint32_t acc = 0;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      uint32_t a, b;
      if (M == 0) {
        a = cvt_pair(uint16_t(w[j]));
        b = cvt_pair(uint16_t(w[j] >> 16));
      } else {
        a = lo_pair(w[j]);
        b = hi_pair(w[j]);
      }
      w[j] = a ^ b;  // feed back: the next round depends on this one
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) acc ^= w[j];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
int main() {
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int clk = 0; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
  uint32_t* out; cudaMalloc(&out, sms * 8 * 1024 * 4);
  const int iters = 4096;
  const char* names[2] = {"cvt.rn.f16x2.e4m3x2 x2", "shift/mask lo+hi"};
  float ms[2];
  for (int m = 0; m < 2; ++m) {
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int rep = 0; rep < 2; ++rep) {
      cudaEventRecord(a);
      if (m == 0) k<0><<<sms * 8, 256>>>(out, iters, 12345u);
      if (m == 1) k<1><<<sms * 8, 256>>>(out, iters, 12345u);
      cudaEventRecord(b); cudaEventSynchronize(b);
      cudaEventElapsedTime(&ms[m], a, b);
    }
    const double words = double(sms) * 8 * 256 * iters * 8;
    printf("%-26s %8.3f ms  %6.2f words/clk/SM  (clock %d MHz)\n", names[m], ms[m], words / (ms[m] * 1e-3 * clk * 1e3) / sms, clk / 1000);
  }
  printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
}
