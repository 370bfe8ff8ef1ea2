// Tensor-parallel benchmarks on 2 GPUs (issue 25): figures, no assertions.
// - all-reduce: the in-place bf16 sum all-reduce of a step's messages (batch × hidden × 2 bytes
//   for llama2-13b's hidden 5120, batch 1..256) and of large messages (64 MB .. 1 GB, the best
//   large-message figure NCCL reaches in the same run), time per all-reduce (mean of 20 back to
//   back, slowest rank) and bus bandwidth.
// - decode: a preset (default llama2-13b, random weights) decode step time at batch 1, 32 and 128
//   (256-token prompts, CUDA graphs), one GPU against tensor_parallel 2, and the communication
//   share: 2 × n_layers all-reduces of the step's message, timed alone, over the TP=2 step time
//   (the LM head's logits all-gather is left out: one per step, batch × vocab × 4 bytes).
// Lines start with "tp-allreduce" / "tp-decode" so scripts/gpu-tp-check.sh can tabulate them.
//   cmake --build build-gpu --target tp_bench && build-gpu/tp_bench [--model PRESET] [--only allreduce|decode]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/step_input.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/tp_backend.h"
#include "engine/kv/kv_manager.h"
#include "tests/backend/backend_test_util.h"

namespace servelab {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// A small model on 2 ranks: enough for the communicators (the benchmark buffers are its own).
std::unique_ptr<TpCudaBackend> small_tp2() { return TpCudaBackend::random(preset("tiny"), 1, 2); }

void all_reduce_bus_bandwidth() {
  auto tp = small_tp2();
  const int64_t hidden = preset("llama2-13b").hidden_size;
  std::vector<int64_t> sizes;
  for (int b : {1, 2, 4, 8, 16, 32, 64, 128, 256}) sizes.push_back(int64_t(b) * hidden * 2);
  for (int64_t mb : {64, 256, 1024}) sizes.push_back(mb << 20);
  const std::vector<AllReduceTiming> t = tp->all_reduce_timings(sizes, 20);
  double best = 0.0;
  for (const AllReduceTiming& x : t) best = std::max(best, x.bus_gb_s);
  std::printf("%s\n", tp->describe().c_str());
  std::printf("tp-allreduce %12s %10s %12s %10s\n", "bytes", "us", "busbw_GB/s", "of_best");
  for (const AllReduceTiming& x : t)
    std::printf("tp-allreduce %12lld %10.2f %12.2f %9.1f%%\n", static_cast<long long>(x.bytes), x.seconds * 1e6,
                x.bus_gb_s, best > 0 ? 100.0 * x.bus_gb_s / best : 0.0);
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

void decode_step_tp2_vs_tp1(const std::string& model) {
  const ModelConfig config = preset(model);
  const int batches[] = {1, 32, 128};
  std::vector<double> one_s, two_s;
  {
    auto one = CudaBackend::random(config, 1);
    for (int b : batches) one_s.push_back(decode_step_s(*one, b, config.vocab_size));
  }
  std::vector<AllReduceTiming> ar;
  {
    auto two = TpCudaBackend::random(config, 1, 2);
    std::printf("%s, %s\n", config.name.c_str(), two->describe().c_str());
    for (int b : batches) two_s.push_back(decode_step_s(*two, b, config.vocab_size));
    std::vector<int64_t> sizes;
    for (int b : batches) sizes.push_back(int64_t(b) * config.hidden_size * 2);
    ar = two->all_reduce_timings(sizes, 20);
  }
  std::printf("tp-decode %6s %10s %10s %8s %12s %10s\n", "batch", "tp1_ms", "tp2_ms", "speedup", "comm_ms", "comm_share");
  for (size_t i = 0; i < std::size(batches); ++i) {
    const double comm = 2.0 * config.n_layers * ar[i].seconds;
    std::printf("tp-decode %6d %10.3f %10.3f %7.2fx %12.3f %9.1f%%\n", batches[i], one_s[i] * 1e3, two_s[i] * 1e3,
                one_s[i] / two_s[i], comm * 1e3, 100.0 * comm / two_s[i]);
  }
}

}  // namespace
}  // namespace servelab

int main(int argc, char** argv) {
  std::string model = "llama2-13b", only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: tp_bench [--model PRESET] [--only allreduce|decode]\n");
      return 2;
    }
  }
  if (servelab::cuda_device_count() < 2) {
    std::fprintf(stderr, "tp_bench: needs 2 CUDA devices\n");
    return 1;
  }
  if (!servelab::tp_nccl_available()) {
    std::fprintf(stderr, "tp_bench: servelab was built without NCCL\n");
    return 1;
  }
  if (only.empty() || only == "allreduce") servelab::all_reduce_bus_bandwidth();
  if (only.empty() || only == "decode") servelab::decode_step_tp2_vs_tp1(model);
  return 0;
}
