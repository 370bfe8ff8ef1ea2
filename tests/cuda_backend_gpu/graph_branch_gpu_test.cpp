// What the LoRA side stream (cuda_ops.h LoraHook) relies on in a captured CUDA graph: a kernel
// forks a side stream (plain launches), the main stream goes on with a kernel launched with PDL,
// then joins the side stream before another PDL kernel that reads the side stream's output.
// Stream capture makes both of that kernel's incoming edges programmatic (the join's too: its
// blocks may start before the side stream's last kernel ends and wait for it in pdl_wait), and
// the graph, replayed many times, computes what the same launches compute eagerly, bit for bit.
// With SERVELAB_GPU_BENCH=1, what such a branch costs beside a product, enqueued before or after
// the product's launch (docs/lora.md, 2026-12-01). Names contain Gpu; every test skips
// without a CUDA device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda_check.h"
#include "kernels/ops.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace graph_branch_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

namespace k = kernels;

constexpr int kRows = 37, kD = 1040, kFfn = kD / 2;  // silu_then_mul: ffn a multiple of 8
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

/// The graph's edges' types (1: programmatic), printed for the log; returns the programmatic ones.
int programmatic_edges(cudaGraph_t g) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  CUDA_CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n));
  int p = 0;
  for (size_t i = 0; i < n; ++i) {
    std::printf("  edge %p -> %p type %d from_port %d\n", static_cast<void*>(from[i]), static_cast<void*>(to[i]),
                int(data[i].type), int(data[i].from_port));
    p += data[i].type == cudaGraphDependencyTypeProgrammatic;
  }
  return p;
}

TEST(GraphBranchGpu, CaptureMakesTheJoinIntoAPdlKernelProgrammaticAndTheGraphComputesTheSame) {
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
  // b = norm(a) -> the side's silu -> its mul (full edges: plain launches); b = norm(a) -> e = norm(b)
  // and e -> f = norm(c) (PDL after a kernel on its stream); the side's mul -> f: the join, made
  // programmatic by capture because f is launched with PDL
  EXPECT_EQ(programmatic_edges(graph), 3);
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

/// SERVELAB_GPU_BENCH=1: what a side branch beside a product costs in a graph, and whether
/// enqueueing it after the product's launch takes some of it back. kLayers times: a product-sized kernel on the main stream
/// (rms_norm over 2,048 x 4,096, launched with PDL), beside it two small plain kernels on a side
/// stream (as a LoRA shrink and expand), joined before a small PDL kernel that reads the side
/// stream's output. Replayed; microseconds a layer: no branch, the branch's launches enqueued
/// before the product's (as forked), after it.
TEST(GraphBranchGpu, BenchBranchCost) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const char* on = std::getenv("SERVELAB_GPU_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set SERVELAB_GPU_BENCH=1";
  constexpr int kLayers = 64, kBig = 2048, kWide = 4096, kSmall = 8;
  void *big_in = nullptr, *big_out = nullptr, *w = nullptr, *small_in = nullptr, *small_mid = nullptr, *small_out = nullptr;
  CUDA_CHECK(cudaMalloc(&big_in, size_t(kBig) * kWide * 2));
  CUDA_CHECK(cudaMalloc(&big_out, size_t(kBig) * kWide * 2));
  CUDA_CHECK(cudaMalloc(&w, size_t(kWide) * 2));
  CUDA_CHECK(cudaMalloc(&small_in, size_t(kSmall) * kWide * 2));
  CUDA_CHECK(cudaMalloc(&small_mid, size_t(kSmall) * kWide * 2));
  CUDA_CHECK(cudaMalloc(&small_out, size_t(kSmall) * kWide * 2));
  CUDA_CHECK(cudaMemset(big_in, 0, size_t(kBig) * kWide * 2));
  CUDA_CHECK(cudaMemset(w, 0, size_t(kWide) * 2));
  CUDA_CHECK(cudaMemset(small_in, 0, size_t(kSmall) * kWide * 2));
  cudaStream_t main = nullptr, side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr, t0 = nullptr, t1 = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreate(&t0));
  CUDA_CHECK(cudaEventCreate(&t1));
  auto time_graph = [&](bool branch, bool side_after) {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < kLayers; ++l) {
      auto side_work = [&] {
        CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
        k::silu_then_mul(k::ScalarType::bf16, small_in, small_mid, kSmall, kWide / 2, side);
        CUDA_CHECK(cudaEventRecord(join, side));
      };
      if (branch) CUDA_CHECK(cudaEventRecord(fork, main));
      if (branch && !side_after) side_work();
      k::rms_norm(k::ScalarType::bf16, big_in, w, big_out, kBig, kWide, kEps, main);
      if (branch && side_after) side_work();
      if (branch) CUDA_CHECK(cudaStreamWaitEvent(main, join, 0));
      k::rms_norm(k::ScalarType::bf16, small_mid, w, small_out, kSmall, kWide / 2, kEps, main);
    }
    CUDA_CHECK(cudaStreamEndCapture(main, &graph));
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 5; ++i) CUDA_CHECK(cudaGraphLaunch(exec, main));
    constexpr int kReplays = 50;
    CUDA_CHECK(cudaEventRecord(t0, main));
    for (int i = 0; i < kReplays; ++i) CUDA_CHECK(cudaGraphLaunch(exec, main));
    CUDA_CHECK(cudaEventRecord(t1, main));
    CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    std::printf("  %-32s %.2f us a layer\n",
                !branch ? "no branch" : side_after ? "branch after the product" : "branch before the product",
                1e3 * ms / kReplays / kLayers);
  };
  for (int rep = 0; rep < 2; ++rep) {
    time_graph(false, false);
    time_graph(true, false);
    time_graph(true, true);
  }
  for (void* p : {big_in, big_out, w, small_in, small_mid, small_out}) cudaFree(p);
  for (cudaEvent_t ev : {fork, join, t0, t1}) cudaEventDestroy(ev);
  for (cudaStream_t st : {main, side}) cudaStreamDestroy(st);
}

}  // namespace graph_branch_gpu_test
}  // namespace servelab
