#pragma once
// Helpers for the GPU kernel tests: skip without a device, RAII device buffers, bf16 transfers,
// poisoned outputs (0xFF bytes: NaN in bf16 and fp32, so an unwritten element fails the check).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/half.h"
#include "kernels/cuda_check.h"

namespace servelab::kernels::testing {

inline bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!::servelab::kernels::testing::gpu_available()) GTEST_SKIP() << "no CUDA device"

/// Device memory owned by the test.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) { CUDA_CHECK(cudaMalloc(&ptr_, bytes ? bytes : 16)); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  void poison() { CUDA_CHECK(cudaMemset(ptr_, 0xFF, bytes_)); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Uploads a plain array as is.
template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  if (!v.empty()) CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

/// Uploads floats as bf16 (exact when the floats came from random_bf16).
inline DeviceBuffer upload_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  return upload(h);
}

template <typename T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (n) CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

inline std::vector<float> download_bf16(const DeviceBuffer& b, size_t n) {
  const std::vector<uint16_t> h = download<uint16_t>(b, n);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = bf16_to_f32(h[i]);
  return v;
}

/// bf16 storage of the output: 8 bits of mantissa, so about 4e-3 relative per element.
constexpr double kBf16Tolerance = 1e-2;

}  // namespace servelab::kernels::testing
