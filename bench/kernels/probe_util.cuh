#pragma once
// Host pieces of the standalone probes (kv_read_probe.cu, kv_ring_probe.cu: built by nvcc alone,
// without the project's libraries): a checked CUDA call, the device-to-device copy ceiling, and the
// best of 5 timings of 10 launches.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

/// Milliseconds a launch takes: the best of 5 rounds of 10 back-to-back launches (after one
/// checked warm-up launch).
template <typename Launch>
float probe_best_ms(Launch&& launch) {
  static cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (!e0) {
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    CK(cudaEventRecord(e0));
    for (int r = 0; r < 10; ++r) launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    best = std::min(best, t / 10);
  }
  return best;
}

/// The device-to-device copy of 2 GiB in GB/s, counting bytes read and written (kernel_bench's
/// d2d_copy), printed with the device's name.
inline double probe_copy_gbs() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t bytes = size_t(2) << 30;
  uint8_t *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  const float ms = probe_best_ms([&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
  const double gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  std::printf("%s, %d SMs; d2d copy %.0f GB/s (read + write)\n", prop.name, prop.multiProcessorCount, gbs);
  CK(cudaFree(a));
  CK(cudaFree(b));
  return gbs;
}
