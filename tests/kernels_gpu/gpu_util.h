#pragma once
// Helpers for the GPU kernel tests: skip without a device, RAII device buffers, bf16 and fp16
// transfers, poisoned outputs (0xFF bytes: NaN in bf16, fp16 and fp32, so an unwritten element
// fails the check), and the storage types every kernel test runs in (kStorageTypes).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model/half.h"
#include "kernels/attention.h"
#include "kernels/cuda_check.h"
#include "tests/kernels/kv_fixture.h"

namespace servelab::kernels::testing {

inline bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!::servelab::kernels::testing::gpu_available()) GTEST_SKIP() << "no CUDA device"

/// Work captured once into a CUDA graph on its own non-blocking stream; replay() launches the
/// graph and waits for it. The graph and the stream go with the object.
class CapturedGraph {
 public:
  template <class Enqueue>  // enqueue(cudaStream_t): the launches to capture
  explicit CapturedGraph(Enqueue&& enqueue) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    enqueue(stream_);
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph_));
    CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~CapturedGraph() {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
    cudaStreamDestroy(stream_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  /// Launches after everything queued before it on any stream (the tests' cudaMemcpy / memset on
  /// the legacy stream return before a device-to-device copy lands, and this non-blocking stream
  /// does not wait for them: run beside other GPU work, a replay read the previous queries), then
  /// waits for the replay.
  void replay() {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

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
/// fp16 storage: 11 bits of mantissa, about 5e-4 relative per element.
constexpr double kF16Tolerance = 5e-3;

/// The storage types the kernel tests run in (value-parameterized suites, see dtype_name).
inline const ScalarType kStorageTypes[] = {ScalarType::bf16, ScalarType::f16};

/// "bf16" / "f16": the test-name suffix of a value-parameterized suite.
inline std::string dtype_name(const ::testing::TestParamInfo<ScalarType>& info) {
  return info.param == ScalarType::bf16 ? "bf16" : "f16";
}

/// Relative-error bound of one 16-bit storage rounding of the output.
inline double tolerance(ScalarType t) { return t == ScalarType::bf16 ? kBf16Tolerance : kF16Tolerance; }

/// Rounds through the storage type (the references' `round` argument).
inline float (*rounding(ScalarType t))(float) { return t == ScalarType::bf16 ? round_bf16 : round_f16; }

/// Rounds every value through the storage type: what a kernel reading `v` in `t` sees.
inline std::vector<float> rounded(ScalarType t, std::vector<float> v) {
  for (float& x : v) x = rounding(t)(x);
  return v;
}

/// random_bf16's values rounded through `t` too, so a kernel storing in `t` sees exactly these.
inline std::vector<float> random16(ScalarType t, size_t n, std::mt19937_64& rng, float sigma = 1.0f) {
  return rounded(t, random_bf16(n, rng, sigma));
}

/// Uploads floats in the storage type (exact for values from random_bf16 in the normal range).
inline DeviceBuffer upload16(ScalarType t, const std::vector<float>& v) {
  if (t == ScalarType::bf16) return upload_bf16(v);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_f16(v[i]);
  return upload(h);
}

/// Downloads n values stored in `t` as floats.
inline std::vector<float> download16(ScalarType t, const DeviceBuffer& b, size_t n) {
  if (t == ScalarType::bf16) return download_bf16(b, n);
  const std::vector<uint16_t> h = download<uint16_t>(b, n);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = f16_to_f32(h[i]);
  return v;
}

}  // namespace servelab::kernels::testing
