#pragma once
// Device helpers shared by the kernels: 16-byte vectors of 8 bf16/fp16 values, conversions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <utility>

#include "kernels/cuda_check.h"
#include "kernels/ops.h"

namespace servelab::kernels {

/// 8 16-bit values moved as one 16-byte access.
using Vec8 = uint4;

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

/// Unpacks 8 values of a 16-byte vector into floats.
template <typename T>
__device__ __forceinline__ void unpack8(const Vec8& v, float (&f)[8]) {
  const T* h = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_float<T>(h[i]);
}

/// Packs 8 floats (rounded to nearest) into a 16-byte vector.
template <typename T>
__device__ __forceinline__ Vec8 pack8(const float (&f)[8]) {
  Vec8 v;
  T* h = reinterpret_cast<T*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = from_float<T>(f[i]);
  return v;
}

/// Read-only 16-byte load that does not allocate in L1 (streamed data such as the KV cache).
__device__ __forceinline__ Vec8 load_stream(const void* p) {
  Vec8 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// load_stream with the L2::256B prefetch-size hint: a miss fetches the aligned 256 bytes around
/// the address, so the next loads of a streamed row (weights, K/V) find it in L2.
__device__ __forceinline__ Vec8 load_stream_256(const void* p) {
  Vec8 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// Runs BF16_CALL for bf16, F16_CALL for fp16. The fp16 variants are compiled unless the build
/// turns SERVELAB_KERNELS_FP16 off (kernels/CMakeLists.txt); then fp16 throws, naming the option.
#if defined(SERVELAB_KERNELS_FP16)
#define SERVELAB_DISPATCH_16(t, BF16_CALL, F16_CALL) \
  do {                                               \
    if ((t) == ScalarType::bf16) BF16_CALL;          \
    else F16_CALL;                                   \
  } while (0)
#else
#define SERVELAB_DISPATCH_16(t, BF16_CALL, F16_CALL)                                                     \
  do {                                                                                                   \
    if ((t) != ScalarType::bf16) throw std::invalid_argument("fp16 kernels not built (SERVELAB_KERNELS_FP16=OFF)"); \
    BF16_CALL;                                                                                           \
  } while (0)
#endif

/// Programmatic dependent launch (PDL, sm_90): a kernel launched by launch_pdl() may start while
/// the kernel before it on the stream is still running (inside CUDA graphs too). Rules for such a
/// kernel: before pdl_wait() it may only read memory no earlier kernel of the step writes (weights)
/// and write nothing; every block calls pdl_wait() before it exits (so that its completion implies
/// its predecessor's, and a chain of PDL kernels stays ordered). pdl_launch_dependents() lets the
/// next PDL kernel's blocks start (after every block of this one has called it or exited).
/// Both are no-ops in a kernel launched without the attribute.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// Launches kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-stream-
/// serialization attribute when `allow` and pdl_enabled() (the kernel must follow pdl_wait()'s rules).
template <typename... Params, typename... Args>
void launch_pdl_if(bool allow, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = allow && pdl_enabled() ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

/// launch_pdl_if(true, ...).
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_pdl_if(true, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

inline int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace servelab::kernels
