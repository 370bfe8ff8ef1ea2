// Tensor-parallel benchmarks on 2 GPUs (issue 25): figures, no assertions.
// - allreduce: the in-place bf16 sum all-reduce through the backend, NCCL (all_reduce: nccl)
//   against ours (all_reduce: custom: the one-shot kernel over CUDA peer memory), each inside a CUDA
//   graph of 20 back-to-back calls per rank (how decode steps run them; median of 5 replays, slowest
//   rank), for llama2-13b's decode messages (batch x 5120 x 2 bytes, batch 1..256) and 4-16 MiB.
// - decode: a preset (default llama2-13b, random weights) decode step time at batch 1, 32 and 128
//   (256-token prompts, CUDA graphs), one GPU against tensor_parallel 2 with all_reduce nccl and
//   auto (ours for these messages), both unfused, and auto with the all-reduce fused with the
//   residual add and norm and the products pushing their rows (tp_fuse_all_reduce_norm,
//   tp_push_from_product: the defaults), and the communication share: 2 x n_layers all-reduces of the
//   step's message timed inside a CUDA graph on that backend, over its TP=2 step time (the LM
//   head's logits all-gather, one per step, is left out).
// - bound: a preset (default llama3-70b, random weights: the speed does not depend on them) on
//   tensor_parallel 2 at batch 1 against the two GPUs' bandwidth bound: weight bytes /
//   (2 x the copy bandwidth measured on each GPU first: cudaMemcpy of 2 GiB device to device,
//   read + write bytes over time, median of 5).
// - b1 (only when asked): batch-1 decode, TP=1 against TP=2 variants (host hand-offs, the fused
//   norm, gemv K splits), each its own backend in one process.
// - pool: the rank threads' host hand-off (RankPool::run of a task that does nothing), blocking
//   against spinning (CudaBackendOptions::tp_spin_us); needs no GPU.
// Lines start with "tp-pool" / "tp-allreduce" / "tp-decode" / "tp-bound" so scripts/gpu-tp-check.sh can
// tabulate them.
//   cmake --build build-gpu --target tp_bench && build-gpu/tp_bench [--model PRESET]
//     [--bound-model PRESET] [--only pool|allreduce|decode|bound|b1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/step_input.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/tp_backend.h"
#include "engine/backend/cuda/tp_rank_pool.h"
#include "engine/kv/kv_manager.h"
#include "kernels/cuda_check.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}


void all_reduce_nccl_vs_ours() {
  const int64_t hidden = preset("llama2-13b").hidden_size;
  std::vector<int64_t> sizes;
  for (int b : {1, 2, 4, 8, 16, 32, 64, 128, 256}) sizes.push_back(int64_t(b) * hidden * 2);
  for (int64_t mb : {4, 8, 16}) sizes.push_back(mb << 20);
  std::vector<AllReduceTiming> nccl, ours;
  {
    CudaBackendOptions o;
    o.tp_all_reduce = TpAllReduce::nccl;
    auto tp = TpCudaBackend::random(preset("tiny"), 1, 2, o);
    std::printf("%s\n", tp->describe().c_str());
    nccl = tp->all_reduce_timings(sizes, 20, /*in_graph=*/true);
  }
  {
    CudaBackendOptions o;
    o.tp_all_reduce = TpAllReduce::custom;
    o.tp_all_reduce_max_bytes = int64_t(16) << 20;
    auto tp = TpCudaBackend::random(preset("tiny"), 1, 2, o);
    std::printf("%s\n", tp->describe().c_str());
    ours = tp->all_reduce_timings(sizes, 20, /*in_graph=*/true);
  }
  std::printf("tp-allreduce %12s %12s %12s %9s %12s\n", "bytes", "nccl_us", "ours_us", "speedup", "ours_busbw");
  for (size_t i = 0; i < sizes.size(); ++i)
    std::printf("tp-allreduce %12lld %12.2f %12.2f %8.2fx %12.1f\n", static_cast<long long>(sizes[i]),
                nccl[i].seconds * 1e6, ours[i].seconds * 1e6, nccl[i].seconds / ours[i].seconds, ours[i].bus_gb_s);
}

/// Mean decode step seconds of `backend` over batches of `batch` sequences with 256-token prompts.
template <typename B>
double decode_step_s(B& backend, int batch, int vocab) {
  constexpr int kPrompt = 256, kDecode = 12, kChunk = 16;
  KvConfig kc;
  kc.prefix_caching = false;
  kc.max_model_len = kPrompt + kDecode + 8;
  const int64_t n_slots = int64_t(batch) * (kPrompt + kDecode + 16);
  backend.init_kv(n_slots);
  auto kv = make_kv_manager(kc, n_slots);
  std::vector<Sequence> seqs(batch);
  for (int i = 0; i < batch; ++i) {
    seqs[i] = testing::make_sequence(i + 1, testing::random_tokens(kPrompt, vocab, 100 + i));
    seqs[i].sampling.max_tokens = kDecode + 4;
    kv->allocate(seqs[i], kPrompt);
  }
  for (int first = 0; first < batch; first += kChunk) {  // prefill, kChunk sequences a step
    Batch prefill;
    for (int i = first; i < std::min(batch, first + kChunk); ++i) prefill.entries.push_back({&seqs[i], kPrompt, true});
    const StepOutput r = run_batch(backend, prefill, *kv);
    for (size_t k = 0; k < prefill.entries.size(); ++k) {
      seqs[first + k].n_computed = kPrompt;
      seqs[first + k].tokens.push_back(r.tokens[k]);
    }
  }
  double total = 0.0;
  for (int step = 0; step < kDecode; ++step) {
    Batch b;
    for (Sequence& s : seqs) {
      kv->grow(s, s.n_tokens());
      b.entries.push_back({&s, 1, true});
    }
    const auto t0 = std::chrono::steady_clock::now();
    const StepOutput r = run_batch(backend, b, *kv);
    if (step >= 3) total += seconds_since(t0);  // eager warm-up, capture, first replay
    for (int i = 0; i < batch; ++i) {
      seqs[i].n_computed += 1;
      seqs[i].tokens.push_back(r.tokens[i]);
    }
  }
  return total / (kDecode - 3);
}

/// One TP=2 backend's decode steps and the in-graph time of its step's all-reduces.
struct Tp2Run {
  std::vector<double> step_s, comm_s;
};

Tp2Run run_tp2(const ModelConfig& config, TpAllReduce mode, const std::vector<int>& batches, bool fuse_norm = false,
               int spin_us = CudaBackendOptions{}.tp_spin_us) {
  CudaBackendOptions o;
  o.tp_all_reduce = mode;
  o.tp_fuse_all_reduce_norm = fuse_norm;
  o.tp_push_from_product = fuse_norm;  // fused: as the defaults (the products' pushes too)
  o.tp_spin_us = spin_us;
  auto two = TpCudaBackend::random(config, 1, 2, o);
  std::printf("%s, %s\n", config.name.c_str(), two->describe().c_str());
  Tp2Run r;
  for (int b : batches) r.step_s.push_back(decode_step_s(*two, b, config.vocab_size));
  std::vector<int64_t> sizes;
  for (int b : batches) sizes.push_back(int64_t(b) * config.hidden_size * 2);
  for (const AllReduceTiming& t : two->all_reduce_timings(sizes, 2 * config.n_layers, /*in_graph=*/true))
    r.comm_s.push_back(2.0 * config.n_layers * t.seconds);
  return r;
}

void decode_step_tp2_vs_tp1(const std::string& model) {
  const ModelConfig config = preset(model);
  const std::vector<int> batches = {1, 32, 128};
  std::vector<double> one_s;
  {
    auto one = CudaBackend::random(config, 1);
    for (int b : batches) one_s.push_back(decode_step_s(*one, b, config.vocab_size));
  }
  const Tp2Run nccl = run_tp2(config, TpAllReduce::nccl, batches);
  const Tp2Run ours = run_tp2(config, TpAllReduce::auto_select, batches);
  const Tp2Run fused = run_tp2(config, TpAllReduce::auto_select, batches, /*fuse_norm=*/true);
  const Tp2Run blocking = run_tp2(config, TpAllReduce::auto_select, batches, false, /*spin_us=*/0);
  std::printf("tp-decode %6s %9s | %9s %8s %9s %7s | %9s %8s %9s %7s\n", "batch", "tp1_ms", "nccl_ms", "speedup",
              "comm_ms", "share", "ours_ms", "speedup", "comm_ms", "share");
  for (size_t i = 0; i < batches.size(); ++i)
    std::printf("tp-decode %6d %9.3f | %9.3f %7.2fx %9.3f %6.1f%% | %9.3f %7.2fx %9.3f %6.1f%%\n", batches[i],
                one_s[i] * 1e3, nccl.step_s[i] * 1e3, one_s[i] / nccl.step_s[i], nccl.comm_s[i] * 1e3,
                100.0 * nccl.comm_s[i] / nccl.step_s[i], ours.step_s[i] * 1e3, one_s[i] / ours.step_s[i],
                ours.comm_s[i] * 1e3, 100.0 * ours.comm_s[i] / ours.step_s[i]);
  std::printf("tp-decode %6s %9s | %12s %8s  (ours fused with the residual add and norm, the products pushing: "
              "the default; the columns above unfused)\n",
              "batch", "tp1_ms", "ours_fused_ms", "speedup");
  for (size_t i = 0; i < batches.size(); ++i)
    std::printf("tp-decode %6d %9.3f | %12.3f %7.2fx\n", batches[i], one_s[i] * 1e3, fused.step_s[i] * 1e3,
                one_s[i] / fused.step_s[i]);
  std::printf("tp-decode %6s %9s | %12s %8s  (ours with blocking host hand-offs: tp_spin_us 0, the default %d)\n",
              "batch", "tp1_ms", "ours_block_ms", "speedup", CudaBackendOptions{}.tp_spin_us);
  for (size_t i = 0; i < batches.size(); ++i)
    std::printf("tp-decode %6d %9.3f | %12.3f %7.2fx\n", batches[i], one_s[i] * 1e3, blocking.step_s[i] * 1e3,
                one_s[i] / blocking.step_s[i]);
}

/// Batch-1 decode step of `model`, TP=1 against TP=2 variants, each its own backend in this process:
/// the defaults (the fused all-reduce + norm, the O and down products pushing their rows
/// themselves), blocking host hand-offs (tp_spin_us 0), unfused (all-reduce, then add_rms_norm),
/// fused without the pushes, and gemv K splits (decode.gemv_waves 1..3; 0, never, is the default).
void batch1_variants(const std::string& model) {
  const ModelConfig config = preset(model);
  struct Variant {
    const char* name;
    int tp;
    std::function<void(CudaBackendOptions&)> set;
  };
  const std::vector<Variant> variants = {
      {"tp1", 1, [](CudaBackendOptions&) {}},
      {"tp1 gemv_waves 2", 1, [](CudaBackendOptions& o) { o.decode.gemv_waves = 2; }},
      {"tp2", 2, [](CudaBackendOptions&) {}},  // the defaults: fused all-reduce + norm, the products' pushes
      {"tp2 spin 0", 2, [](CudaBackendOptions& o) { o.tp_spin_us = 0; }},
      {"tp2 unfused", 2,
       [](CudaBackendOptions& o) {
         o.tp_fuse_all_reduce_norm = false;
         o.tp_push_from_product = false;
       }},
      {"tp2 fused, no push", 2, [](CudaBackendOptions& o) { o.tp_push_from_product = false; }},
      {"tp2 gemv_waves 1", 2, [](CudaBackendOptions& o) { o.decode.gemv_waves = 1; }},
      {"tp2 gemv_waves 2", 2, [](CudaBackendOptions& o) { o.decode.gemv_waves = 2; }},
      {"tp2 gemv_waves 3", 2, [](CudaBackendOptions& o) { o.decode.gemv_waves = 3; }},
      {"tp2", 2, [](CudaBackendOptions&) {}},  // the default again: the run's drift
      {"tp2 unfused", 2,
       [](CudaBackendOptions& o) {
         o.tp_fuse_all_reduce_norm = false;
         o.tp_push_from_product = false;
       }},
  };
  double tp1 = 0.0;
  for (const Variant& v : variants) {
    CudaBackendOptions o;
    v.set(o);
    double s = 0.0;
    if (v.tp == 1) {
      auto one = CudaBackend::random(config, 1, o);
      s = decode_step_s(*one, 1, config.vocab_size);
      if (tp1 == 0.0) tp1 = s;
    } else {
      auto two = TpCudaBackend::random(config, 1, 2, o);
      s = decode_step_s(*two, 1, config.vocab_size);
    }
    std::printf("tp-b1 %-18s %8.3f ms  %5.3fx the first tp1\n", v.name, s * 1e3, tp1 / s);
  }
}

/// RankPool's round trip with a task that does nothing (the host hand-off a step pays on top of
/// its forward): blocking (spin 0) against spinning, median and p90 of 2,000 calls, microseconds.
void pool_round_trip() {
  for (int spin : {0, CudaBackendOptions{}.tp_spin_us}) {
    cuda::RankPool pool(2, spin);
    std::vector<double> t;
    const std::function<void(int)> nothing = [](int) {};
    for (int i = 0; i < 2200; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.run(nothing, 60.0);
      if (i >= 200) t.push_back(seconds_since(t0) * 1e6);
      // the engine's host work between steps, ~100 us
      for (auto w = std::chrono::steady_clock::now(); seconds_since(w) < 100e-6;) {
      }
    }
    std::sort(t.begin(), t.end());
    std::printf("tp-pool spin_us %5d: round trip median %.1f us, p90 %.1f us, max %.1f us\n", spin, t[t.size() / 2],
                t[t.size() * 9 / 10], t.back());
  }
}

/// Device-to-device copy bandwidth of `device` (read + write bytes / time), GB/s.
double copy_gb_s(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  CUDA_CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));  // warm-up
  std::vector<double> t;
  for (int k = 0; k < 5; ++k) {
    CUDA_CHECK(cudaEventRecord(e0));
    CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1e-3);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  CUDA_CHECK(cudaSetDevice(0));
  return 2.0 * double(bytes) / t[2] / 1e9;
}

void bound(const std::string& model) {
  const ModelConfig config = preset(model);
  const double bw[2] = {copy_gb_s(0), copy_gb_s(1)};
  std::printf("tp-bound copy bandwidth GB/s: device 0 %.0f, device 1 %.0f\n", bw[0], bw[1]);
  CudaBackendOptions o;
  auto two = TpCudaBackend::random(config, 1, 2, o);
  std::printf("%s (random weights), %s\n", config.name.c_str(), two->describe().c_str());
  const double rank_bytes = double(two->weight_bytes());  // the rank holding the most
  const double step = decode_step_s(*two, 1, config.vocab_size);
  const double bound_s = 2.0 * rank_bytes / (2.0 * std::min(bw[0], bw[1]) * 1e9);
  std::printf("tp-bound %s batch 1: step %.3f ms, weights %.2f GB (2 x %.2f GB), bound %.3f ms, "
              "fraction of the bound %.3f\n",
              config.name.c_str(), step * 1e3, 2.0 * rank_bytes / 1e9, rank_bytes / 1e9, bound_s * 1e3, bound_s / step);
}

}  // namespace
}  // namespace servelab

int main(int argc, char** argv) {
  std::string model = "llama2-13b", bound_model = "llama3-70b", only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (!std::strcmp(argv[i], "--bound-model") && i + 1 < argc) bound_model = argv[++i];
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: tp_bench [--model PRESET] [--bound-model PRESET] [--only pool|allreduce|decode|bound|b1]\n");
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a timeout
  if (only.empty() || only == "pool") servelab::pool_round_trip();  // host threads only: no GPU needed
  if (only == "pool") return 0;
  if (servelab::cuda_device_count() < 2) {
    std::fprintf(stderr, "tp_bench: needs 2 CUDA devices\n");
    return 1;
  }
  if (!servelab::tp_nccl_available()) {
    std::fprintf(stderr, "tp_bench: servelab was built without NCCL\n");
    return 1;
  }
  if (only.empty() || only == "allreduce") servelab::all_reduce_nccl_vs_ours();
  if (only.empty() || only == "decode") servelab::decode_step_tp2_vs_tp1(model);
  if (only.empty() || only == "bound") servelab::bound(bound_model);
  if (only == "b1") servelab::batch1_variants(model);
  return 0;
}
