#pragma once
// RAII holders for the CUDA backend's memory: device buffers that grow on demand, and mapped
// pinned host buffers (the kernels read and write them directly; copies to them are async).
// Every CUDA call is checked (kernels/cuda_check.h: throws std::runtime_error naming the call).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda_check.h"

namespace servelab::cuda {

/// Device memory; grow() reallocates (contents lost) when more bytes are asked for.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const char* what = "buffer") { grow(bytes, what); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Ensures at least `bytes` (rounded up to 256); says what failed to allocate on error.
  void grow(size_t bytes, const char* what = "buffer") {
    if (bytes <= bytes_ && ptr_) return;
    reset();
    const size_t n = ((bytes ? bytes : 1) + 255) / 256 * 256;
    const cudaError_t e = cudaMalloc(&ptr_, n);
    if (e != cudaSuccess) {
      ptr_ = nullptr;
      (void)cudaGetLastError();
      throw std::runtime_error("CudaBackend: cannot allocate " + std::to_string(n) + " bytes of GPU memory for " +
                               what + " (" + cudaGetErrorString(e) + ")");
    }
    bytes_ = n;
  }
  void reset() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Pinned host memory mapped into the device's address space (cudaHostAllocMapped): a kernel
/// may read or write it through device_ptr(), and async copies to and from it overlap.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  /// Ensures at least `bytes`; contents lost when it reallocates.
  void grow(size_t bytes) {
    if (bytes <= bytes_ && ptr_) return;
    reset();
    const size_t n = std::max<size_t>(bytes, 4096);
    CUDA_CHECK(cudaHostAlloc(&ptr_, n, cudaHostAllocMapped));
    CUDA_CHECK(cudaHostGetDevicePointer(&device_, ptr_, 0));
    bytes_ = n;
  }
  void reset() {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = device_ = nullptr;
    bytes_ = 0;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(ptr_); }
  template <typename T = void>
  T* device_ptr() const { return static_cast<T*>(device_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  void* device_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace servelab::cuda
