#pragma once
// Every CUDA runtime call and every launch is checked: CUDA_CHECK throws std::runtime_error with
// the call, file and line; CUDA_CHECK_LAUNCH checks cudaGetLastError right after a launch.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace servelab::kernels {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                           ") at " + file + ":" + std::to_string(line) + ": " + what);
}

}  // namespace servelab::kernels

#define CUDA_CHECK(call)                                                                      \
  do {                                                                                        \
    const cudaError_t servelab_err_ = (call);                                                 \
    if (servelab_err_ != cudaSuccess)                                                         \
      ::servelab::kernels::throw_cuda_error(servelab_err_, #call, __FILE__, __LINE__);         \
  } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
