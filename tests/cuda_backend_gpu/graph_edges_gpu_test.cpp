// engine/backend/cuda/graph_edges.h on a captured graph shaped like a LoRA decode layer's: a
// kernel forks a side stream (plain launches), the main stream goes on with a kernel launched
// with PDL, then joins the side stream before another PDL kernel that reads the side stream's
// output. The pass makes exactly that join programmatic, and the graph, replayed many times,
// computes what the same launches compute eagerly, bit for bit. Names contain Gpu; every test
// skips without a CUDA device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/graph_edges.h"
#include "kernels/cuda_check.h"
#include "kernels/ops.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace graph_edges_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

namespace k = kernels;

constexpr int kRows = 37, kD = 1032, kFfn = kD / 2;
constexpr float kEps = 1e-5f;

struct Buffers {
  void *a = nullptr, *w = nullptr, *b = nullptr, *c = nullptr, *e = nullptr, *f = nullptr;
  Buffers() {
    for (void** p : {&a, &w, &b, &c, &e, &f}) CUDA_CHECK(cudaMalloc(p, size_t(kRows) * kD * 2));
  }
  ~Buffers() {
    for (void* p : {a, w, b, c, e, f}) cudaFree(p);
  }
};

/// main: b = norm(a); side (forked after it, plain launches): c = silu(b[:, :ffn]) * b[:, ffn:];
/// main: e = norm(b) (PDL); join; main: f = norm(c) (PDL, width ffn).
void enqueue(const Buffers& m, cudaStream_t main, cudaStream_t side, cudaEvent_t fork, cudaEvent_t join) {
  k::rms_norm(k::ScalarType::bf16, m.a, m.w, m.b, kRows, kD, kEps, main);
  CUDA_CHECK(cudaEventRecord(fork, main));
  CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
  k::silu_then_mul(k::ScalarType::bf16, m.b, m.c, kRows, kFfn, side);
  CUDA_CHECK(cudaEventRecord(join, side));
  k::rms_norm(k::ScalarType::bf16, m.b, m.w, m.e, kRows, kD, kEps, main);
  CUDA_CHECK(cudaStreamWaitEvent(main, join, 0));
  k::rms_norm(k::ScalarType::bf16, m.c, m.w, m.f, kRows, kFfn, kEps, main);
}

std::vector<uint16_t> read(const void* p, size_t n) {
  std::vector<uint16_t> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

int count_programmatic(cudaGraph_t g) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  CUDA_CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n));
  int p = 0;
  for (const cudaGraphEdgeData& e : data) p += e.type == cudaGraphDependencyTypeProgrammatic;
  return p;
}

TEST(GraphEdgesGpu, TheJoinIntoAPdlKernelBecomesProgrammaticAndTheGraphComputesTheSame) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Buffers m;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<__nv_bfloat16> a(size_t(kRows) * kD), w(static_cast<size_t>(kD));
  for (auto& v : a) v = __float2bfloat16(normal(rng));
  for (auto& v : w) v = __float2bfloat16(1.f + 0.1f * normal(rng));
  CUDA_CHECK(cudaMemcpy(m.a, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(m.w, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  cudaStream_t main = nullptr, side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  enqueue(m, main, side, fork, join);  // eagerly: the expected bits
  CUDA_CHECK(cudaStreamSynchronize(main));
  const std::vector<uint16_t> want_e = read(m.e, size_t(kRows) * kD), want_f = read(m.f, size_t(kRows) * kFfn);

  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal));
  enqueue(m, main, side, fork, join);
  CUDA_CHECK(cudaStreamEndCapture(main, &graph));
  const int before = count_programmatic(graph);
  // the two PDL launches after a kernel on their own stream (e = norm(b) after b = norm(a), and
  // f = norm(c) after it): programmatic from capture
  EXPECT_EQ(before, 2);
  EXPECT_EQ(cuda::programmatic_joins(graph), 1) << "the side stream's last kernel into f = norm(c)";
  EXPECT_EQ(count_programmatic(graph), before + 1);
  EXPECT_EQ(cuda::programmatic_joins(graph), 0) << "a second pass finds nothing left";

  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 50; ++replay) {
    CUDA_CHECK(cudaMemsetAsync(m.b, 0xff, size_t(kRows) * kD * 2, main));  // NaNs unless recomputed
    CUDA_CHECK(cudaMemsetAsync(m.c, 0xff, size_t(kRows) * kFfn * 2, main));
    CUDA_CHECK(cudaMemsetAsync(m.f, 0, size_t(kRows) * kFfn * 2, main));
    CUDA_CHECK(cudaGraphLaunch(exec, main));
    CUDA_CHECK(cudaStreamSynchronize(main));
    ASSERT_EQ(read(m.f, size_t(kRows) * kFfn), want_f) << "replay " << replay;
    ASSERT_EQ(read(m.e, size_t(kRows) * kD), want_e) << "replay " << replay;
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  for (cudaEvent_t ev : {fork, join}) cudaEventDestroy(ev);
  for (cudaStream_t s : {main, side}) cudaStreamDestroy(s);
}

}  // namespace graph_edges_gpu_test
}  // namespace servelab
