// engine_bench: the cuda backend's whole steps on a real model shape (default llama2-7b, random
// bf16 weights drawn on the GPU), beside ceilings measured in the same run: a large
// device-to-device copy and a large cuBLASLt bf16 GEMM on random data (issue 8, items 1, 3b, 5).
//   engine_bench [--json FILE] [--commit SHA] [--preset NAME] [--kv-gb G] [--quick] [--prefill-only]
//   engine_bench --ncu-decode BATCH,CONTEXT [--graphs] [--variants V]   (one decode step, eager or a
//                                  graph replay, for ncu --profile-from-start off; V: a kMbuVariants name)
//   engine_bench --mbu [--variants V,V,...]   (decode MBU only, per decode-path variant, see kMbuVariants)
//   engine_bench --lora [--quick]   (multi-LoRA against no adapter: bench/engine_bench_lora.h)
//   engine_bench --lora --ncu-decode BATCH,CONTEXT [--lora-adapters K] [--variants V]   (one LoRA
//                                  decode step, a graph replay, for ncu; V: a LoRA decode variant)
//   engine_bench --kv-cache-dtype auto,fp8 [--quick]   (an FP8 KV cache beside bf16 KV: bench/engine_bench_fp8kv.h)
//   engine_bench --mixed-contexts [--preset P] [--quick] (decode steps of mixed context lengths: bench/engine_bench_mixed.h)
//   engine_bench --structured [--preset NAME] [--tokenizer DIR] [--repeats N]   (structured output at
//                                  batch 64 against unconstrained: bench/engine_bench_structured.h)
//   engine_bench --quantization F,F,...   (fp8, int4_awq, int4_gptq beside bf16, "fp8/4" quant_gemv to
//   4 rows, "fp8:a1" decode attention's PDL mode 1, "none:a1" bf16 so: decode at batch 1,
//                                  8, 16 and a 2048-token prefill, one backend after the other;
//                                  F/R: quant_gemv for products of up to R rows only)
// - decode, batch 1, 8, 32, 128, 256 x context 128 and 4096: tokens/s and model-bandwidth
//   utilization (MBU) = (weight bytes + KV bytes read per step) / step time / copy bandwidth.
// - prefill of 4096 tokens, one sequence: TFLOP/s against the GEMM.
// - what each optimization buys: decode at batch 1, 32, 128 (context 512) with fusion,
//   cuda_graphs and batch_invariant each flipped from the default; 4096-token prefill whole vs
//   in 512-token chunks.
// Steps are timed by servelab::ProfileRunner (what `servelab profile` uses): forward() returns
// after the device is synchronized; warm-up runs first (GEMM algorithm choice, graph capture),
// then the median of the repeats. The KV arena holds random K/V (never zeros). Points whose KV
// does not fit the budget (--kv-gb, default what 90% of the GPU leaves) are skipped and named.
// JSON: a list of {name, value, unit, peer_or_ceiling, ratio, shape, device, date, commit}, as
// kernel_bench writes. Exit status: 0 ok, 1 a CUDA or backend error, 2 bad usage.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/engine_bench_fp8kv.h"
#include "bench/engine_bench_mixed.h"
#include "bench/engine_bench_lora.h"
#include "bench/engine_bench_mbu_variants.h"
#include "bench/engine_bench_structured.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/profiler.h"
#include "engine/splitmix64.h"
#include "bench/kernels/bench_timing.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm.h"

using namespace servelab;
using servelab::bench::decode_path;
using servelab::bench::find_variant;
using servelab::bench::kMbuVariants;
using servelab::bench::MbuVariant;

namespace {

/// One figure of the JSON list. value and ratio absent (null) for a skipped point or a ceiling.
struct Row {
  std::string name, shape, unit, ceiling_name;
  std::optional<double> value, ratio;
};
std::vector<Row> rows;

void record(const std::string& name, const std::string& shape, std::optional<double> value, const std::string& unit,
            const std::string& ceiling_name = "-", std::optional<double> ratio = std::nullopt) {
  rows.push_back({name, shape, unit, ceiling_name, value, ratio});
  if (!value) {
    std::printf("  %-22s %-58s %10s\n", name.c_str(), shape.c_str(), "skipped");
    return;
  }
  std::printf("  %-22s %-58s %10.2f %-8s", name.c_str(), shape.c_str(), *value, unit.c_str());
  if (ratio) std::printf(" (%.3f of %s)", *ratio, ceiling_name.c_str());
  std::printf("\n");
}

/// A device buffer of n random bf16 values in [-1, 1]: up to 2^26 of them drawn on the host and
/// copied up, repeated by device copies beyond that (a 2 GiB copy source needs no 2 GiB draw).
struct RandomBf16 {
  void* p = nullptr;
  explicit RandomBf16(size_t n, uint64_t seed) {
    const size_t drawn = std::min(n, size_t(1) << 26);
    std::vector<uint16_t> h(drawn);
    uint64_t state = seed;
    for (size_t i = 0; i < drawn; i += 4) {
      const uint64_t r = splitmix64_next(state);
      for (size_t j = 0; j < 4 && i + j < drawn; ++j) {
        const float x = float((r >> (16 * j)) & 0xffff) * (2.0f / 65536.0f) - 1.0f;
        uint32_t u;
        std::memcpy(&u, &x, 4);
        h[i + j] = uint16_t(u >> 16);
      }
    }
    CUDA_CHECK(cudaMalloc(&p, n * 2));
    CUDA_CHECK(cudaMemcpy(p, h.data(), drawn * 2, cudaMemcpyHostToDevice));
    for (size_t at = drawn; at < n; at += drawn)
      CUDA_CHECK(cudaMemcpy(static_cast<uint16_t*>(p) + at, p, std::min(drawn, n - at) * 2, cudaMemcpyDeviceToDevice));
  }
  ~RandomBf16() { cudaFree(p); }
  RandomBf16(const RandomBf16&) = delete;
  RandomBf16& operator=(const RandomBf16&) = delete;
};

/// Bytes a decode step of `batch` sequences must read, each attending to `context` positions:
/// every weight matrix once (layers, final norm, LM head; the embedding table only for the batch's
/// rows) and K and V of every position of every layer, in bf16.
struct DecodeBytes {
  double weights = 0, kv = 0;
  double total() const { return weights + kv; }
};
DecodeBytes decode_bytes(const ModelConfig& m, int batch, int context) {
  const double table = double(m.vocab_size) * m.hidden_size;
  const double params = double(m.n_params()) - (m.tie_embeddings ? 0.0 : table);  // the LM head stays
  DecodeBytes b;
  b.weights = 2.0 * (params + double(batch) * m.hidden_size);
  b.kv = 2.0 * 2.0 * m.n_layers * m.kv_dim() * double(batch) * context;
  return b;
}

/// FLOPs of a one-sequence prefill of t tokens as the backend runs it: the layers' matrix products
/// (2 per weight per token), causal attention (QKᵀ and P·V over t(t+1)/2 query-key pairs per head,
/// 2 FLOPs each), and the LM head on the one sampled row. Norms, RoPE and SiLU left out.
struct PrefillFlops {
  double gemm = 0, attention = 0, lm_head = 0;
  double total() const { return gemm + attention + lm_head; }
};
PrefillFlops prefill_flops(const ModelConfig& m, int t) {
  const double d = m.hidden_size, dq = double(m.n_heads) * m.head_dim(), dkv = m.kv_dim();
  const double layer = d * dq + 2 * d * dkv + dq * d + 3 * d * m.intermediate_size;
  PrefillFlops f;
  f.gemm = 2.0 * t * layer * m.n_layers;
  f.attention = 2.0 * 2.0 * m.n_layers * dq * (double(t) * (t + 1) / 2);
  f.lm_head = 2.0 * d * m.vocab_size;
  return f;
}

ProfilePoint decode_point(int batch, int context) {  // context counts the new token
  return ProfilePoint{ProfilePhase::decode, std::vector<ProfilePoint::Seq>(batch, {context - 1, 1})};
}

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

struct Mode {
  const char* label;  // "default", "fusion_off", ...
  CudaBackendOptions options;
};

struct Args {
  std::string json_path = "engine_bench.json";
  std::string commit = "unknown";
  std::string preset = "llama2-7b";
  double kv_gb = 0.0;
  bool quick = false;
  bool prefill_only = false;           // --prefill-only: the ceilings and the whole-model prefill only
  int ncu_batch = 0, ncu_context = 0;  // --ncu-decode B,CTX
  bool ncu_graphs = false;             // --graphs: the ncu step is a graph replay
  bool mbu = false;                    // --mbu
  bool lora = false, lora_prefill = false;  // --lora; --lora-prefill: its prefill steps only, with diagnostics
  bool lora_sm_sweep = false;               // --lora-sm-sweep: the eager steps under each SM reserve only
  int lora_adapters = 0;               // --lora-adapters K (--lora --ncu-decode)
  bool fp8kv = false;                  // --kv-cache-dtype auto,fp8
  bool mixed_contexts = false;         // --mixed-contexts
  bool structured = false;             // --structured
  std::string tokenizer;               // --tokenizer DIR (--structured)
  int repeats = 0;                     // --repeats N (--structured)
  std::string variants;                // --variants (names of kMbuVariants), empty = all
  std::string before_label = "cuBLASLt only, no PDL, unfused SiLU";  // --before-label
  std::string quantization;            // --quantization F,F,...: formats timed beside bf16
};

/// --ncu-decode: one eager decode step of `batch` sequences at `context` between
/// cudaProfilerStart and cudaProfilerStop, after warm-up, for `ncu --profile-from-start off`
/// (a per-kernel breakdown of the step). Prints the step's time outside the profiler.
int profile_one_decode_step(const Args& args) {
  ModelConfig model = preset(args.preset);
  model.dtype = DType::bf16;
  std::unique_ptr<CudaBackend> backend =
      CudaBackend::random(model, 1, CudaBackendOptions{.cuda_graphs = args.ncu_graphs,
                                                       .decode = args.variants.empty() ? DecodePathOptions{}
                                                                                       : decode_path(find_variant(args.variants))});
  const ProfilePoint p = decode_point(args.ncu_batch, args.ncu_context);
  ProfileRunner runner(*backend, p.n_slots(), args.ncu_context, 7, true);
  const double s = runner.run(p, 3, 9, 1e9).step_s;
  std::printf("decode b%d ctx%d %s: %.3f ms per step (median of 9, outside the profiler)\n", args.ncu_batch,
              args.ncu_context, args.ncu_graphs ? "graph replay" : "eager", s * 1e3);
  CUDA_CHECK(cudaProfilerStart());
  runner.run(p, 0, 1, 0.0);
  CUDA_CHECK(cudaProfilerStop());
  return 0;
}

double measure_copy_gbs() {
  const size_t bytes = size_t(1) << 31;
  RandomBf16 a(bytes / 2, 1);
  void* b = nullptr;
  CUDA_CHECK(cudaMalloc(&b, bytes));
  const double ms = kernels::bench::time_ms([&](int) { CUDA_CHECK(cudaMemcpyAsync(b, a.p, bytes, cudaMemcpyDeviceToDevice)); }, 20);
  CUDA_CHECK(cudaFree(b));
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

/// --mbu: decode_step_mbu for each decode-path variant (kMbuVariants, or --variants), one backend
/// each, in one process beside one copy measurement: batch 1 at contexts 128 and 4096, batches 8,
/// 32, 128 at 128 (--quick: batch 1 only). Rows: decode_step_mbu_variant (every variant) and
/// decode_step_mbu / decode_step_tokens for "after", decode_step_mbu_before for "before".
int run_mbu(const Args& args) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  ModelConfig model = preset(args.preset);
  model.dtype = DType::bf16;
  std::printf("engine_bench --mbu: %s on %s\n", model.name.c_str(), cuda_device_description(0).c_str());
  const double copy_gbs = measure_copy_gbs();
  record("engine_d2d_copy", "2 GiB cudaMemcpy, bytes read + bytes written", copy_gbs, "GB/s");
  std::vector<std::pair<int, int>> points = {{1, 128}, {1, 4096}, {8, 128}, {32, 128}, {128, 128}};
  if (args.quick) points = {{1, 128}, {1, 4096}};
  const int warmup = 3, repeats = args.quick ? 7 : 15;
  std::vector<std::string> summary;
  std::vector<const MbuVariant*> chosen;
  if (args.variants.empty()) {
    for (const MbuVariant& v : kMbuVariants) chosen.push_back(&v);
  } else {
    size_t at = 0;
    while (at <= args.variants.size()) {
      const size_t comma = std::min(args.variants.find(',', at), args.variants.size());
      const std::string name = args.variants.substr(at, comma - at);
      at = comma + 1;
      chosen.push_back(&find_variant(name));
    }
  }
  for (const MbuVariant* vp : chosen) {
    const MbuVariant& v = *vp;
    std::unique_ptr<CudaBackend> backend = CudaBackend::random(model, 1, CudaBackendOptions{.decode = decode_path(v)});
    int64_t n_slots = 0;
    for (const auto& [b, c] : points) n_slots = std::max(n_slots, decode_point(b, std::min(c, model.max_position)).n_slots());
    ProfileRunner runner(*backend, n_slots, model.max_position, 7, true);
    std::string line = std::string(v.name) + std::string(size_t(std::max(0, 14 - int(std::strlen(v.name)))), ' ');
    for (const auto& [b, c0] : points) {
      const int c = std::min(c0, model.max_position);
      const ProfilePoint p = decode_point(b, c);
      const double s = runner.run(p, warmup, repeats, 1e9).step_s;
      const DecodeBytes bytes = decode_bytes(model, b, c);
      const double gbs = bytes.total() / s / 1e9;
      const std::string shape = fmt("b%.0f ctx%.0f", b, c);
      const std::string detail = fmt(" step %.3f ms; weights %.2f GB + KV %.3f GB read per step", s * 1e3,
                                     bytes.weights / 1e9, bytes.kv / 1e9);
      record("decode_step_mbu_variant", shape + " [" + v.name + "]" + detail, gbs, "GB/s", "engine_d2d_copy",
             gbs / copy_gbs);
      if (std::strcmp(v.name, "after") == 0) {
        record("decode_step_mbu", shape + detail, gbs, "GB/s", "engine_d2d_copy", gbs / copy_gbs);
        record("decode_step_tokens", shape + fmt(" step %.3f ms", s * 1e3), b / s, "tok/s");
      } else if (std::strcmp(v.name, "before") == 0) {
        record("decode_step_mbu_before", shape + " (" + args.before_label + ")" + detail, gbs, "GB/s",
               "engine_d2d_copy", gbs / copy_gbs);
      }
      line += "  " + shape + fmt(" %.3f ms %.3f", s * 1e3, gbs / copy_gbs);
    }
    summary.push_back(line);
  }
  std::printf("\nMBU per variant (step ms, ratio of the %.0f GB/s copy):\n", copy_gbs);
  for (const std::string& l : summary) std::printf("%s\n", l.c_str());
  return 0;
}

void write_json(const Args& args, const cudaDeviceProp& prop);

/// --quantization: the same decode and prefill points for bf16 and each format (quantized on load,
/// CudaBackendOptions::quantization), one backend at a time in this process (issue 26's targets:
/// batch-1 decode step fp8 <= 0.56x, int4 <= 0.40x the bf16 step). Rows: quant_step_ms (each
/// format and point), quant_step_vs_bf16 (the step time over bf16's), quant_weight_bytes.
int run_quant(const Args& args) {
  ModelConfig model = preset(args.preset);
  model.dtype = DType::bf16;
  std::printf("engine_bench --quantization %s: %s on %s\n", args.quantization.c_str(), model.name.c_str(),
              cuda_device_description(0).c_str());
  std::vector<std::string> formats = {"none"};
  for (size_t at = 0; at <= args.quantization.size();) {
    const size_t comma = std::min(args.quantization.find(',', at), args.quantization.size());
    formats.push_back(args.quantization.substr(at, comma - at));
    const std::string& f = formats.back();
    parse_quantization(f.substr(0, f.find_first_of("/:")));  // a bad name fails before any backend
    const size_t colon = f.find(':');
    if (colon != std::string::npos && (f.size() != colon + 3 || f[colon + 1] != 'a' || f[colon + 2] < '0' || f[colon + 2] > '2'))
      throw std::invalid_argument("--quantization " + f + ": the suffix after ':' must be a0, a1 or a2 (decode attention's PDL mode)");
    at = comma + 1;
  }
  const int prefill_len = std::min(2048, model.max_position);
  std::vector<std::pair<std::string, ProfilePoint>> points;
  for (const auto& [b, c] : std::vector<std::pair<int, int>>{{1, 128}, {1, 1024}, {8, 128}, {16, 128}})
    points.push_back({fmt("decode b%.0f ctx%.0f", b, c), decode_point(b, std::min(c, model.max_position))});
  points.push_back({fmt("prefill %.0f tokens", prefill_len), ProfilePoint{ProfilePhase::prefill, {{0, prefill_len}}}});
  const int warmup = 3, repeats = args.quick ? 7 : 15;
  std::vector<std::vector<double>> ms(formats.size());
  for (size_t f = 0; f < formats.size(); ++f) {
    // "fp8/4": fp8 with quant_gemv for products of up to 4 rows (default: per format); "fp8:a1",
    // "none:a2": with decode attention's PDL mode 1 or 2 (DecodePathOptions::attention_pdl).
    CudaBackendOptions o;
    const size_t slash = formats[f].find('/'), colon = formats[f].find(":a");
    o.quantization = parse_quantization(formats[f].substr(0, std::min(slash, colon)));
    if (slash != std::string::npos) o.quant_gemv_max_rows = std::atoi(formats[f].c_str() + slash + 1);
    if (colon != std::string::npos) o.decode.attention_pdl = std::atoi(formats[f].c_str() + colon + 2);
    std::unique_ptr<CudaBackend> backend = CudaBackend::random(model, 1, o);
    const std::string label = formats[f].rfind("none", 0) == 0 ? "bf16" + formats[f].substr(4) : formats[f];
    record("quant_weight_bytes", label, double(backend->weight_bytes()) / 1e9, "GB");
    int64_t n_slots = 0;
    for (const auto& [name, p] : points) n_slots = std::max(n_slots, p.n_slots());
    ProfileRunner runner(*backend, n_slots, model.max_position, 7, true);
    for (const auto& [name, p] : points) {
      ms[f].push_back(runner.run(p, warmup, repeats, 1e9).step_s * 1e3);
      record("quant_step_ms", name + " [" + label + "]", ms[f].back(), "ms");
    }
  }
  std::printf("\nstep time against bf16 (same process, same points):\n");
  for (size_t f = 1; f < formats.size(); ++f) {
    // against bf16 with the same attention mode where it was timed too ("fp8:a1" against "none:a1")
    const size_t colon = formats[f].find(":a");
    const std::string tail = colon == std::string::npos ? "" : formats[f].substr(colon);
    size_t b = size_t(std::find(formats.begin(), formats.end(), "none" + tail) - formats.begin());
    if (b == f) continue;
    if (b >= formats.size()) b = 0;
    for (size_t i = 0; i < points.size(); ++i)
      record("quant_step_vs_bf16", points[i].first + " [" + formats[f] + " / bf16" + (b == 0 ? "" : tail) + "]",
             ms[f][i] / ms[b][i], "x", "bf16 step");
  }
  return 0;
}

int run(const Args& args) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const std::string device_line = cuda_device_description(0);
  ModelConfig model = preset(args.preset);
  model.dtype = DType::bf16;  // random weights drawn and rounded in bf16 (llama2-7b was published in fp16)
  std::printf("engine_bench: %s on %s\n", model.name.c_str(), device_line.c_str());

  std::printf("ceilings (same run):\n");
  double copy_gbs = 0, gemm_tflops = 0;
  copy_gbs = measure_copy_gbs();
  record("engine_d2d_copy", "2 GiB cudaMemcpy, bytes read + bytes written", copy_gbs, "GB/s");
  {
    const int n = 8192;
    RandomBf16 x(size_t(n) * n, 2), w(size_t(n) * n, 3);
    void* y = nullptr;
    CUDA_CHECK(cudaMalloc(&y, size_t(n) * n * 2));
    kernels::Gemm gemm(false);
    const double ms = kernels::bench::time_ms([&](int) { gemm.run(kernels::ScalarType::bf16, x.p, w.p, y, n, n, n, false, nullptr); }, 10);
    CUDA_CHECK(cudaFree(y));
    gemm_tflops = 2.0 * n * n * double(n) / (ms * 1e-3) / 1e12;
    record("engine_cublaslt_gemm", "8192x8192x8192 bf16, fp32 accumulate", gemm_tflops, "TFLOP/s");
  }
  CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<int> batches = args.quick ? std::vector<int>{1, 32} : std::vector<int>{1, 8, 32, 128, 256};
  const std::vector<int> contexts = {128, 4096};
  const std::vector<int> ablation_batches = args.quick ? std::vector<int>{1, 32} : std::vector<int>{1, 32, 128};
  constexpr int kAblationContext = 512, kPrefill = 4096, kChunk = 512;
  const int warmup = 3, repeats = args.quick ? 5 : 15;
  const int prefill_len = std::min(kPrefill, model.max_position);

  const Mode modes[] = {{"default", {}},
                        {"fusion_off", {.fusion = false}},
                        {"cuda_graphs_off", {.cuda_graphs = false}},
                        {"batch_invariant", {.batch_invariant = true}},
                        {"dtype_f16", {.dtype = DType::f16}},  // weights, activations and KV in fp16
                        {"gemm_autotune", {.gemm_autotune_rows = 256}}};  // cuBLASLt's fastest of 8 per decode bucket
  std::vector<double> default_decode_s;  // per ablation batch, the default mode's step
  double prefill_whole_s = 0;
  for (const Mode& mode : modes) {
    const bool is_default = &mode == &modes[0];
    if (args.prefill_only && !is_default) break;
    std::unique_ptr<CudaBackend> backend = CudaBackend::random(model, 1, mode.options);
    const int64_t slot_bytes = backend->kv_bytes_per_slot();
    const int64_t budget = args.kv_gb > 0 ? int64_t(args.kv_gb * 1e9)
                                          : backend->kv_bytes_for_utilization(0.9, prefill_len, batches.back());
    // The points this mode times, and the arena that holds the largest that fits.
    std::vector<ProfilePoint> points;
    if (is_default && !args.prefill_only)
      for (int c : contexts)
        for (int b : batches) points.push_back(decode_point(b, std::min(c, model.max_position)));
    if (!args.prefill_only)
      for (int b : ablation_batches) points.push_back(decode_point(b, kAblationContext));
    if (is_default) points.push_back(ProfilePoint{ProfilePhase::prefill, {{0, prefill_len}}});
    int64_t n_slots = 0;
    for (const ProfilePoint& p : points)
      if (p.n_slots() * slot_bytes <= budget) n_slots = std::max(n_slots, p.n_slots());
    std::printf("%s (fusion %s, cuda_graphs %s, batch_invariant %s): weights %.2f GB, KV arena %.2f GB of a %.2f GB "
                "budget\n",
                mode.label, mode.options.fusion ? "on" : "off", mode.options.cuda_graphs ? "on" : "off",
                mode.options.batch_invariant ? "on" : "off", backend->weight_bytes() / 1e9, n_slots * slot_bytes / 1e9,
                budget / 1e9);
    ProfileRunner runner(*backend, n_slots, model.max_position, 7, true);
    // The engine reserves its steps before the first (Engine's constructor: reserve_steps, where
    // Gemm::prepare asks cuBLASLt for every row bucket and, with gemm_autotune, times its
    // candidates); the profile runner does not, so this mode reserves here as the engine would.
    if (mode.options.gemm_autotune_rows > 0) backend->reserve_steps(StepLimits{256, 256, model.max_position, 16});
    auto fits = [&](const ProfilePoint& p) { return p.n_slots() <= n_slots; };
    auto time_s = [&](const ProfilePoint& p) { return runner.run(p, warmup, repeats, 1e9).step_s; };

    if (is_default) {
      for (int c : args.prefill_only ? std::vector<int>{} : contexts)
        for (int b : batches) {
          const ProfilePoint p = decode_point(b, std::min(c, model.max_position));
          const std::string shape = fmt("b%.0f ctx%.0f", b, c);
          const DecodeBytes bytes = decode_bytes(model, b, std::min(c, model.max_position));
          if (!fits(p)) {
            const std::string why = shape + ": skipped, KV " + fmt("%.1f GB > budget %.1f GB", p.n_slots() * slot_bytes / 1e9, budget / 1e9);
            record("decode_step_mbu", why, std::nullopt, "GB/s", "engine_d2d_copy");
            record("decode_step_tokens", why, std::nullopt, "tok/s");
            continue;
          }
          const double s = time_s(p);
          const double gbs = bytes.total() / s / 1e9;
          record("decode_step_mbu",
                 shape + fmt(" step %.3f ms; weights %.2f GB + KV %.3f GB read per step", s * 1e3, bytes.weights / 1e9,
                             bytes.kv / 1e9),
                 gbs, "GB/s", "engine_d2d_copy", gbs / copy_gbs);
          record("decode_step_tokens", shape + fmt(" step %.3f ms", s * 1e3), b / s, "tok/s");
        }
      // Whole-model prefill: one sequence of 4096 tokens, then the same prompt in 512-token chunks.
      const ProfilePoint whole{ProfilePhase::prefill, {{0, prefill_len}}};
      if (fits(whole)) {
        prefill_whole_s = time_s(whole);
        const PrefillFlops f = prefill_flops(model, prefill_len);
        const double tflops = f.total() / prefill_whole_s / 1e12;
        record("prefill_model_tflops",
               std::to_string(prefill_len) + fmt(" tokens, 1 seq, %.1f ms; %.1f TFLOP = 2*layer params*tokens %.1f + "
                                                 "causal attention %.2f + LM head (1 row)",
                                                 prefill_whole_s * 1e3, f.total() / 1e12, f.gemm / 1e12, f.attention / 1e12),
               tflops, "TFLOP/s", "engine_cublaslt_gemm", tflops / gemm_tflops);
        record("ablation_prefill", std::to_string(prefill_len) + " tokens whole (chunked_prefill off)",
               prefill_whole_s * 1e3, "ms", "prefill whole", 1.0);
        double chunked_s = 0;
        for (int c = 0; c < prefill_len; c += kChunk)
          chunked_s += time_s(ProfilePoint{ProfilePhase::chunk, {{c, std::min(kChunk, prefill_len - c)}}});
        record("ablation_prefill",
               std::to_string(prefill_len) + " tokens in " + std::to_string(kChunk) + "-token chunks (chunked_prefill on)",
               chunked_s * 1e3, "ms", "prefill whole", chunked_s / prefill_whole_s);
      }
    }
    for (size_t i = 0; i < (args.prefill_only ? 0 : ablation_batches.size()); ++i) {
      const int b = ablation_batches[i];
      const ProfilePoint p = decode_point(b, kAblationContext);
      const std::string shape = fmt("b%.0f ctx%.0f ", b, kAblationContext) + mode.label;
      if (!fits(p)) {
        record("ablation_decode", shape + " (skipped: KV over the budget)", std::nullopt, "ms", "default");
        if (is_default) default_decode_s.push_back(0);
        continue;
      }
      const double s = time_s(p);
      if (is_default) default_decode_s.push_back(s);
      const double base = default_decode_s[i];
      record("ablation_decode", shape, s * 1e3, "ms", "default", base > 0 ? std::optional<double>(s / base) : std::nullopt);
    }
  }

  write_json(args, prop);
  return 0;
}

void write_json(const Args& args, const cudaDeviceProp& prop) {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows)
    out.push_back({{"name", r.name},
                   {"value", r.value ? nlohmann::json(*r.value) : nlohmann::json(nullptr)},
                   {"unit", r.unit},
                   {"peer_or_ceiling", r.ceiling_name},
                   {"ratio", r.ratio ? nlohmann::json(*r.ratio) : nlohmann::json(nullptr)},
                   {"shape", r.shape},
                   {"device", prop.name},
                   {"date", date},
                   {"commit", args.commit}});
  std::ofstream file(args.json_path);
  file << out.dump(2) << "\n";
  if (!file) throw std::runtime_error(args.json_path + ": write failed");
  std::printf("wrote %s (%zu figures)\n", args.json_path.c_str(), rows.size());
}

}  // namespace

/// Keeps a sub-bench's figures (BenchFigure, BenchFigure, BenchFigure: the same fields) as
/// rows and writes the JSON.
template <typename Figures>
int keep_figures(const Args& args, const Figures& figures) {
  for (const auto& f : figures) rows.push_back({f.name, f.shape, f.unit, f.peer, f.value, f.ratio});
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  write_json(args, prop);
  return 0;
}

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) args.json_path = argv[++i];
    else if (a == "--commit" && i + 1 < argc) args.commit = argv[++i];
    else if (a == "--preset" && i + 1 < argc) args.preset = argv[++i];
    else if (a == "--kv-gb" && i + 1 < argc) args.kv_gb = std::atof(argv[++i]);
    else if (a == "--quick") args.quick = true;
    else if (a == "--prefill-only") args.prefill_only = true;
    else if (a == "--graphs") args.ncu_graphs = true;
    else if (a == "--mbu") args.mbu = true;
    else if (a == "--lora" || a == "--lora-prefill") args.lora = true, args.lora_prefill = a == "--lora-prefill";
    else if (a == "--lora-sm-sweep") args.lora = true, args.lora_sm_sweep = true;
    else if (a == "--lora-adapters" && i + 1 < argc) args.lora_adapters = std::atoi(argv[++i]);
    else if (a == "--kv-cache-dtype" && i + 1 < argc && std::string(argv[i + 1]) == "auto,fp8") {
      args.fp8kv = true;
      ++i;
    }
    else if (a == "--structured") args.structured = true;
    else if (a == "--mixed-contexts") args.mixed_contexts = true;
    else if (a == "--tokenizer" && i + 1 < argc) args.tokenizer = argv[++i];
    else if (a == "--repeats" && i + 1 < argc) args.repeats = std::atoi(argv[++i]);
    else if (a == "--quantization" && i + 1 < argc) args.quantization = argv[++i];
    else if (a == "--variants" && i + 1 < argc) args.variants = argv[++i];
    else if (a == "--before-label" && i + 1 < argc) args.before_label = argv[++i];
    else if (a == "--ncu-decode" && i + 1 < argc && std::sscanf(argv[i + 1], "%d,%d", &args.ncu_batch, &args.ncu_context) == 2 &&
             args.ncu_batch > 0 && args.ncu_context > 0)
      ++i;
    else {
      std::fprintf(stderr,
                   "usage: engine_bench [--json FILE] [--commit SHA] [--preset NAME] [--kv-gb G] [--quick] [--prefill-only]\n"
                   "       engine_bench --mbu [--variants V,...] [--json FILE] [--commit SHA] [--quick]\n"
                   "       engine_bench --lora | --lora-prefill | --lora-sm-sweep [--json FILE] [--commit SHA] [--preset NAME] [--quick]\n"
                   "       engine_bench --lora --ncu-decode BATCH,CONTEXT [--lora-adapters K] [--variants V] [--preset NAME]\n"
                   "       engine_bench --kv-cache-dtype auto,fp8 [--json FILE] [--commit SHA] [--preset NAME] [--quick]\n"
                   "       engine_bench --structured [--json FILE] [--commit SHA] [--preset NAME] [--tokenizer DIR] [--repeats N]\n"
                   "       engine_bench --quantization F,F,... [--json FILE] [--commit SHA] [--quick] [--preset NAME]\n"
                   "       engine_bench --ncu-decode BATCH,CONTEXT [--graphs] [--variants V] [--preset NAME]\n");
      return 2;
    }
  }
  try {
    if (cuda_device_count() == 0) {
      std::fprintf(stderr, "engine_bench: no CUDA device\n");
      return 1;
    }
    if (args.ncu_batch > 0 && !args.lora) return profile_one_decode_step(args);
    if (args.lora) {
      bench::LoraBenchOptions lo;
      lo.preset = args.preset;
      lo.quick = args.quick, lo.prefill_only = args.lora_prefill, lo.sm_sweep = args.lora_sm_sweep;
      if (args.ncu_batch > 0) {  // one LoRA decode step under ncu (bench/engine_bench_lora.h)
        lo.ncu_batch = args.ncu_batch;
        lo.ncu_context = args.ncu_context;
        lo.ncu_adapters = args.lora_adapters;
        lo.ncu_variant = args.variants;
        return bench::profile_lora_decode_step(lo);
      }
      return keep_figures(args, bench::run_lora_bench(lo));
    }
    if (args.fp8kv) {  // bf16 KV against an FP8 KV cache (bench/engine_bench_fp8kv.h)
      bench::Fp8KvBenchOptions fo;
      fo.preset = args.preset;
      fo.quick = args.quick;
      return keep_figures(args, bench::run_fp8kv_bench(fo));
    }
    if (args.mixed_contexts) {  // decode steps of mixed context lengths (bench/engine_bench_mixed.h)
      bench::MixedContextBenchOptions mo;
      if (args.preset != Args{}.preset) mo.preset = args.preset;  // default llama3-8b
      mo.quick = args.quick;
      return keep_figures(args, bench::run_mixed_context_bench(mo));
    }
    if (args.structured) {
      bench::StructuredBenchOptions so;
      if (args.preset != Args{}.preset) so.preset = args.preset;  // default llama3-8b, not the bench's llama2-7b
      if (!args.tokenizer.empty()) so.tokenizer_dir = args.tokenizer;
      if (args.repeats > 0) so.repeats = args.repeats;
      return keep_figures(args, bench::run_structured_bench(so));
    }
    if (args.mbu || !args.quantization.empty()) {
      const int rc = args.mbu ? run_mbu(args) : run_quant(args);
      cudaDeviceProp prop{};
      CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
      write_json(args, prop);
      return rc;
    }
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_bench: %s\n", e.what());
    return 1;
  }
}
