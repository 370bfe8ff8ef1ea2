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

/// One CUDA graph of `per_graph` calls of fn(i, stream) (i = 0 .. per_graph - 1), built once (an
/// eager call first, so lazy initialization stays out of the capture); replay_ms() times one replay
/// and returns milliseconds per call. time_rounds() replays several in turn, so that every
/// configuration of a shape is timed in the same GPU state: kernel_bench's decode variants (and the
/// peer script's SDPA backends, the same way) are timed so, after a single configuration timed
/// first in its shape read 7-8% slower than the same one timed last (H100, b1 x 1k decode).
class GraphTimer {
 public:
  GraphTimer(const std::function<void(int, cudaStream_t)>& fn, int per_graph) : per_graph_(per_graph) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
    fn(0, st_);
    CUDA_CHECK(cudaStreamSynchronize(st_));
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per_graph; ++i) fn(i, st_);
    CUDA_CHECK(cudaStreamEndCapture(st_, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec_, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaEventCreate(&a_));
    CUDA_CHECK(cudaEventCreate(&b_));
  }
  GraphTimer(const GraphTimer&) = delete;
  GraphTimer& operator=(const GraphTimer&) = delete;
  ~GraphTimer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
    cudaGraphExecDestroy(exec_);
    cudaStreamDestroy(st_);
  }
  /// Replays until about gpu_ms of GPU time has passed.
  void warm(float gpu_ms = kGraphWarmMs) {
    const double first = replay_ms() * per_graph_;
    const int n = std::clamp(int(gpu_ms / std::max(first, 1e-3)), 1, 2000);
    for (int w = 0; w < n; ++w) CUDA_CHECK(cudaGraphLaunch(exec_, st_));
    CUDA_CHECK(cudaStreamSynchronize(st_));
  }
  /// One timed replay: milliseconds per call.
  double replay_ms() {
    CUDA_CHECK(cudaEventRecord(a_, st_));
    CUDA_CHECK(cudaGraphLaunch(exec_, st_));
    CUDA_CHECK(cudaEventRecord(b_, st_));
    CUDA_CHECK(cudaEventSynchronize(b_));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a_, b_));
    return double(t) / per_graph_;
  }

 private:
  int per_graph_;
  cudaStream_t st_{};
  cudaGraphExec_t exec_{};
  cudaEvent_t a_{}, b_{};
};

/// Warms every timer, then `rounds` rounds of one replay of each (round r starts at timer r mod n,
/// so no timer is always first); returns each timer's median milliseconds per call.
inline std::vector<double> time_rounds(const std::vector<GraphTimer*>& timers, int rounds) {
  const size_t n = timers.size();
  for (GraphTimer* t : timers) t->warm();
  std::vector<std::vector<double>> ms(n);
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < n; ++k) {
      const size_t j = (k + size_t(r)) % n;
      ms[j].push_back(timers[j]->replay_ms());
    }
  std::vector<double> med(n);
  for (size_t j = 0; j < n; ++j) {
    std::sort(ms[j].begin(), ms[j].end());
    med[j] = ms[j][ms[j].size() / 2];
  }
  return med;
}

}  // namespace servelab::kernels::bench
