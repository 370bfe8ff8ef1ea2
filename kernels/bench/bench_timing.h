#pragma once
// Event timing shared by the benchmarks (kernel_bench, engine_bench): the median of repeats after
// warm-up, eagerly or replayed from one CUDA graph. Host code on the CUDA runtime API only.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/cuda_check.h"

namespace servelab::kernels::bench {

/// Median milliseconds of fn(i) over `reps` timed calls after `warm` untimed ones.
inline double time_ms(const std::function<void(int)>& fn, int reps, int warm = 3) {
  for (int i = 0; i < warm; ++i) fn(i);
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a));
    fn(warm + i);
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// Median milliseconds per call of fn(i, stream), replayed from one CUDA graph of `per_graph`
/// calls (i = 0 .. per_graph - 1, so inputs rotate), after a warm-up call and warm-up replays
/// worth at least kGraphWarmMs of GPU time (a shape timed right after its inputs were built on
/// the host otherwise ran ~8% slower than the same shape timed again later: the GPU had idled).
/// The graph removes host launch gaps, as the engine's decode graphs do; the peer script times
/// PyTorch the same way.
/// GPU time of the warm-up replays before a graph is timed.
inline constexpr float kGraphWarmMs = 25.0f;

inline double time_graph_ms(const std::function<void(int, cudaStream_t)>& fn, int per_graph, int reps) {
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  fn(0, st);  // lazy initialization (function attributes, workspaces) stays out of the capture
  CUDA_CHECK(cudaStreamSynchronize(st));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < per_graph; ++i) fn(i, st);
  CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaEventRecord(a, st));
  CUDA_CHECK(cudaGraphLaunch(exec, st));
  CUDA_CHECK(cudaEventRecord(b, st));
  CUDA_CHECK(cudaEventSynchronize(b));
  float first = 0;
  CUDA_CHECK(cudaEventElapsedTime(&first, a, b));
  const int warm = std::clamp(int(kGraphWarmMs / std::max(first, 1e-3f)), 1, 2000);
  for (int w = 0; w < warm; ++w) CUDA_CHECK(cudaGraphLaunch(exec, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(a, st));
    CUDA_CHECK(cudaGraphLaunch(exec, st));
    CUDA_CHECK(cudaEventRecord(b, st));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / per_graph);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(st));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace servelab::kernels::bench
