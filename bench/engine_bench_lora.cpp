// engine_bench --lora: multi-LoRA on the cuda backend against the same backend without adapters
// (see engine_bench_lora.h for the figures). Random bf16 weights of the preset drawn on the GPU;
// two adapters' random weights are drawn on the host and loaded under as many identities as a
// figure needs (each slot holds its own copy on the device, so k slots read k adapters' bytes;
// a miss packs and copies one whole adapter, whichever weights it carries).
#include "bench/engine_bench_lora.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/lora_pack.h"
#include "engine/backend/forwarding_backend.h"
#include "engine/backend/profiler.h"
#include "engine/lora/lora_adapter.h"
#include "kernels/cuda_check.h"
#include "kernels/lora_sgmv.h"

namespace servelab::bench {
namespace lora_bench {  // named: engine_bench.cpp has helpers of its own

/// Sets each row's LoRA slot before the step runs: sequence q's rows take seq_slot[q mod size]
/// (empty: no adapter, as the base model). The copy is made with or without adapters, so both
/// pay the same host work.
class SlotRows final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::vector<int> seq_slot;
  StepOutput execute(const Step& step) override {
    Step s = step;
    kernels::StepInput& in = s.in;
    in.lora_slot.clear();
    if (!seq_slot.empty()) {
      in.lora_slot.assign(size_t(s.n_rows()), -1);
      for (size_t q = 0; q + 1 < in.query_start.size(); ++q)
        for (int r = in.query_start[q]; r < in.query_start[q + 1]; ++r)
          in.lora_slot[size_t(r)] = seq_slot[q % seq_slot.size()];
    }
    return inner().execute(s);
  }
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ProfilePoint decode_of(int batch, int context) {
  return ProfilePoint{ProfilePhase::decode, std::vector<ProfilePoint::Seq>(size_t(batch), {context - 1, 1})};
}

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

/// Zipf(s) over n items: index i (0-based) with probability ∝ 1 / (i + 1)^s.
class Zipf {
 public:
  Zipf(int n, double s) {
    double sum = 0;
    for (int i = 0; i < n; ++i) cdf_.push_back(sum += 1.0 / std::pow(i + 1.0, s));
    for (double& c : cdf_) c /= sum;
  }
  int draw(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    return int(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin()) % int(cdf_.size());
  }

 private:
  std::vector<double> cdf_;
};

/// A launch variant of the decode steps (kernels::LoraSgmvConfig); `diagnostic` ones compute
/// wrong results on purpose and are never kept.
struct Variant {
  std::string name;
  kernels::LoraSgmvConfig config;
  bool diagnostic = false;
};

/// Names: `default` (LoraSgmvConfig{}: up to 16 rows, where the products are our gemv, each
/// product's gemv runs its shrink in its first 128 blocks, inputs in 16 chunks, and adds the
/// delta in its epilogue, no LoRA launch; from 17 rows as `beside`); `tiles` (the in-gemv shrink's
/// items of a slot tile, not of a row); `beside` (in_product off: the expand by rows without the
/// register cap, 528, a
/// block per item, every delta beside its product: o/down into the residual, q|k|v's and gate|up's
/// into a scratch added by the RoPE + K/V write and SiLU·mul; the expands with PDL after their
/// shrinks; 8 LoRA launches a layer); `empty`:
/// every launch with no rows in the plan (the launches and branches alone: diagnostic). The side
/// work enqueued after the products, the shrink launched with PDL (both built as options,
/// measured and removed), the shrink's grid at 1 or 2 blocks an SM, and the in-gemv shrink on
/// 32, 64 or 256 blocks or in 4 or 8 chunks were measured on 2026-12-01 (docs/lora.md).
/// (`inline`, no side stream, `consumer` (q|k|v's and gate|up's deltas expanded by the kernels
/// after their products: 0.62-0.63 mean, last at f926a48) and `empty` under `consumer` were
/// measured at 17db7ca, ce0f498, b54612e and since: docs/lora.md.)
std::vector<Variant> decode_variants() {
  using C = kernels::LoraSgmvConfig;
  auto with = [](auto f) {
    C c;
    f(c);
    return c;
  };
  return {
      {"default", C{}},
      {"tiles", with([](C& c) { c.in_product_row_items = false; })},
      {"beside", with([](C& c) { c.in_product = false; })},
      {"every SM", with([](C& c) { c.product_sm_reserve = 0; })},
      {"empty", with([](C& c) { c.empty_plan = true; }), true},
  };
}

}  // namespace lora_bench

int profile_lora_decode_step(const LoraBenchOptions& o) {
  using namespace lora_bench;
  kernels::LoraSgmvConfig config;
  if (!o.ncu_variant.empty()) {
    const std::vector<Variant> vs = decode_variants();
    const auto it = std::find_if(vs.begin(), vs.end(), [&](const Variant& v) { return v.name == o.ncu_variant; });
    if (it == vs.end()) {
      std::fprintf(stderr, "engine_bench --lora --ncu-decode: unknown variant '%s'\n", o.ncu_variant.c_str());
      return 2;
    }
    config = it->config;
  }
  ModelConfig model = preset(o.preset);
  model.dtype = DType::bf16;
  std::unique_ptr<CudaBackend> owned = CudaBackend::random(model, 1, CudaBackendOptions{});
  CudaBackend* cuda = owned.get();
  cuda->reserve_loras(o.max_loras, o.rank);
  cuda->set_lora_kernels(config);
  SlotRows backend(std::move(owned));
  using T = LoraTarget;
  const std::vector<T> all = {T::q, T::k, T::v, T::o, T::gate, T::up, T::down};
  const int k = std::min(o.ncu_adapters, o.max_loras);
  for (int i = 0; i < std::min(k, 2); ++i) {
    auto a = std::make_shared<LoraAdapter>(random_lora(model, "bench-" + std::to_string(i), o.rank, 2.0f * o.rank, all,
                                                       o.seed + uint64_t(i)));
    a->id = uint64_t(i) + 1;
    for (int s = i; s < k; s += 2) backend.load_lora(s, a);
  }
  for (int i = 0; i < k; ++i) backend.seq_slot.push_back(i);
  const ProfilePoint p = decode_of(o.ncu_batch, o.ncu_context);
  ProfileRunner runner(backend, p.n_slots(), o.ncu_context, 7, true);
  const double s = runner.run(p, 3, 9, 1e9).step_s;
  std::printf("decode b%d ctx%d, %d adapters [%s]: %.3f ms per step (graph replay, median of 9, outside the profiler)\n",
              o.ncu_batch, o.ncu_context, k, o.ncu_variant.empty() ? "default" : o.ncu_variant.c_str(), s * 1e3);
  CUDA_CHECK(cudaProfilerStart());
  runner.run(p, 0, 1, 0.0);
  CUDA_CHECK(cudaProfilerStop());
  return 0;
}

std::vector<BenchFigure> run_lora_bench(const LoraBenchOptions& o) {
  using namespace lora_bench;
  std::vector<BenchFigure> out;
  auto figure = [&](const std::string& name, const std::string& shape, double value, const std::string& unit,
                    const std::string& peer = "-", std::optional<double> ratio = std::nullopt) {
    out.push_back({name, shape, unit, peer, value, ratio});
    std::printf("  %-20s %-64s %10.3f %-6s", name.c_str(), shape.c_str(), value, unit.c_str());
    if (ratio) std::printf(" (%.3f of %s)", *ratio, peer.c_str());
    std::printf("\n");
    std::fflush(stdout);
  };
  ModelConfig model = preset(o.preset);
  model.dtype = DType::bf16;
  std::unique_ptr<CudaBackend> owned = CudaBackend::random(model, 1, CudaBackendOptions{});
  CudaBackend* cuda = owned.get();
  cuda->reserve_loras(o.max_loras, o.rank);
  SlotRows backend(std::move(owned));
  std::printf("engine_bench --lora: %s on %s; %d slots of rank %d (pool %.2f GB, %.1f MB an adapter)\n",
              model.name.c_str(), cuda_device_description(0).c_str(), o.max_loras, o.rank, cuda->lora_pool_bytes() / 1e9,
              cuda->lora_slot_bytes() / 1e6);
  using T = LoraTarget;
  const std::vector<T> all = {T::q, T::k, T::v, T::o, T::gate, T::up, T::down};
  std::vector<std::shared_ptr<const LoraAdapter>> host;
  for (int i = 0; i < 2; ++i) {
    auto a = std::make_shared<LoraAdapter>(random_lora(model, "bench-" + std::to_string(i), o.rank, 2.0f * o.rank, all,
                                                       o.seed + uint64_t(i)));
    a->id = uint64_t(i) + 1;
    host.push_back(a);
  }

  // The miss: load_lora of an adapter never loaded before (pack fp32 -> 16 bits over threads,
  // then copy), of one whose packed image the backend keeps (the copy), then the pinned copy of
  // the same bytes alone.
  if (!o.prefill_only) {
    std::vector<double> first;
    for (int i = 0; i < 3; ++i) {
      auto fresh = std::make_shared<LoraAdapter>(*host[size_t(i % 2)]);  // a new identity: no image yet
      fresh->id = uint64_t(100 + i);
      const double t0 = now_s();
      backend.load_lora(i % 2, fresh);
      first.push_back(now_s() - t0);
    }
    std::sort(first.begin(), first.end());
    figure("lora_first_load_ms",
           fmt("load_lora of an adapter not seen before: pack fp32 -> bf16 (%.0f host threads) + copy, median of 3",
               std::min(8.0, double(std::thread::hardware_concurrency()))),
           first[1] * 1e3, "ms");
    for (int i = 0; i < 2; ++i) backend.load_lora(i, host[size_t(i)]);  // their images packed once
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
      const double t0 = now_s();
      backend.load_lora((i + 1) % 2, host[size_t(i % 2)]);
      t.push_back(now_s() - t0);
    }
    std::sort(t.begin(), t.end());
    figure("lora_miss_ms", "load_lora of an adapter whose packed image is kept (pinned): the copy, median of 5",
           t[2] * 1e3, "ms");
    void* h = nullptr;
    void* d = nullptr;
    const size_t bytes = size_t(cuda->lora_slot_bytes());
    CUDA_CHECK(cudaMallocHost(&h, bytes));
    CUDA_CHECK(cudaMalloc(&d, bytes));
    std::memset(h, 0, bytes);
    std::vector<double> c;
    for (int i = 0; i < 5; ++i) {
      const double t0 = now_s();
      CUDA_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
      c.push_back(now_s() - t0);
    }
    std::sort(c.begin(), c.end());
    figure("lora_miss_copy_ms", fmt("pinned host -> device copy of one adapter, %.1f MB (%.1f GB/s)", bytes / 1e6,
                                    bytes / c[2] / 1e9), c[2] * 1e3, "ms");
    // A serving run's misses, in the order it pays them (lora-compare on an H200 paid ~50 ms a
    // first load inside its prefill steps, engine_bench's three above ~10): 24 adapters drawn
    // fresh (random_lora, as an in-process workload draws one), each loaded into a slot as the
    // kept images grow from 3 to 27; beside them a pinned allocation of one image and the pack
    // into a buffer already pinned, each alone.
    std::vector<double> draw, load, alloc, pack;
    for (int i = 0; i < 24; ++i) {
      double t0 = now_s();
      auto a = std::make_shared<LoraAdapter>(random_lora(model, "miss-" + std::to_string(i), o.rank, 2.0f * o.rank, all,
                                                         o.seed + 1000 + uint64_t(i)));
      a->id = uint64_t(1000 + i);
      draw.push_back(now_s() - t0);
      t0 = now_s();
      backend.load_lora(i % o.max_loras, a);
      load.push_back(now_s() - t0);
      if (i < 5) {
        void* p = nullptr;
        t0 = now_s();
        CUDA_CHECK(cudaMallocHost(&p, bytes));
        alloc.push_back(now_s() - t0);
        t0 = now_s();
        cuda::pack_lora_image(model, o.rank, *a, false, static_cast<uint16_t*>(p));
        pack.push_back(now_s() - t0);
        CUDA_CHECK(cudaFreeHost(p));
      }
    }
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    figure("lora_serving_draw_ms", "random_lora of a fresh adapter (an in-process workload's draw), median of 24",
           med(draw) * 1e3, "ms");
    figure("lora_serving_first_load_ms", "load_lora of each fresh adapter as the kept images grow 3 -> 27, median of 24",
           med(load) * 1e3, "ms");
    figure("lora_serving_first_load_max_ms", "the same, the largest", *std::max_element(load.begin(), load.end()) * 1e3,
           "ms");
    figure("lora_pin_alloc_ms", fmt("cudaMallocHost of one image, %.1f MB, median of 5", bytes / 1e6), med(alloc) * 1e3, "ms");
    figure("lora_pack_ms", "pack_lora_image into a pinned buffer (fp32 -> bf16, up to 8 threads), median of 5",
           med(pack) * 1e3, "ms");
    CUDA_CHECK(cudaFreeHost(h));
    CUDA_CHECK(cudaFree(d));
  }
  for (int s = 0; s < o.max_loras; ++s) backend.load_lora(s, host[size_t(s % 2)]);

  const int context = 512, warmup = 3, repeats = o.quick ? 7 : 15;
  // b8 and b16: a serving run's decode steps at low load (lora-compare at 8 req/s).
  const std::vector<int> batches = {8, 16, 32, 64};
  int64_t n_slots = decode_of(64, context).n_slots();
  n_slots = std::max(n_slots, ProfilePoint{ProfilePhase::prefill, std::vector<ProfilePoint::Seq>(4, {0, 512})}.n_slots());
  ProfileRunner runner(backend, n_slots, std::max(context, 1024), 7, true);
  auto time_with = [&](const ProfilePoint& p, std::vector<int> slots) {
    backend.seq_slot = std::move(slots);
    const double s = runner.run(p, warmup, repeats, 1e9).step_s;
    backend.seq_slot.clear();
    return s;
  };
  auto first_k = [](int k) {
    std::vector<int> v(static_cast<size_t>(k), 0);
    for (int i = 0; i < k; ++i) v[size_t(i)] = i;
    return v;
  };

  // --lora-sm-sweep: only how many SMs the products of eager LoRA steps should leave to the side
  // stream (LoraSgmvConfig::product_sm_reserve, run_shrink_sms) by the step's rows: one prompt of
  // 256-1024 tokens, two of 512, and a prompt beside 4 decodes, each on its own adapter, under
  // each reserve at every run length, then the default (its reserve by the longest run:
  // sm_reserve_max_run_rows), in two interleaved rounds (the spread between rounds is the call's noise).
  if (o.sm_sweep) {
    struct Shape {
      std::vector<int> lens;  ///< the prompts
      int decodes;            ///< decodes of context 255 beside them
    };
    const std::vector<Shape> shapes = {{{256}, 0}, {{384}, 0}, {{512}, 0},    {{768}, 0},
                                       {{1024}, 0}, {{512, 512}, 0}, {{384}, 4}, {{512}, 4}};
    const std::vector<std::pair<std::string, std::pair<int, bool>>> reserves = {
        {"every SM, expands after", {0, false}}, {"8 SMs left", {8, true}},   {"12 SMs left", {12, true}},
        {"16 SMs left", {16, true}},             {"24 SMs left", {24, true}}, {"16 SMs left, expands after", {16, false}}};
    for (int round = 0; round < 2; ++round)
      for (const Shape& sh : shapes) {
        ProfilePoint p{sh.decodes ? ProfilePhase::mixed : ProfilePhase::prefill, {}};
        std::string name;
        for (int len : sh.lens) {
          p.seqs.push_back({0, len});
          name += (name.empty() ? "" : " + ") + fmt("%.0f", len);
        }
        for (int q = 0; q < sh.decodes; ++q) p.seqs.push_back({255, 1});
        name += " tokens" + (sh.decodes ? fmt(" + %.0f decodes", sh.decodes) : std::string()) + fmt(", round %.0f", round + 1);
        const double base = time_with(p, {});
        figure("lora_sm_sweep", name + " no adapter", base * 1e3, "ms");
        for (const auto& [label, rv] : reserves) {
          kernels::LoraSgmvConfig c;
          c.product_sm_reserve = c.run_shrink_sms = rv.first;
          c.sm_reserve_max_run_rows = 1 << 30;  // at every run length
          c.eager_beside = rv.second;
          cuda->set_lora_kernels(c);
          const double t = time_with(p, first_k(int(p.seqs.size())));
          figure("lora_sm_sweep", name + " [" + label + "]", t * 1e3, "ms", "no adapter", base / t);
        }
        cuda->set_lora_kernels(kernels::LoraSgmvConfig{});  // the default: its rule by the longest run
        const double t = time_with(p, first_k(int(p.seqs.size())));
        figure("lora_sm_sweep", name + " [default]", t * 1e3, "ms", "no adapter", base / t);
      }
    return out;
  }

  // Decode steps with k distinct adapters among the rows (row r: slot r mod k), under each launch
  // variant of the grouped kernels in turn (set_lora_kernels drops the captured graphs, so each
  // variant's steps replay graphs of its own launches). The variant with the best mean ratio over
  // these steps is kept for the rest (prefill, Zipf) and its figures are repeated as
  // lora_decode_step.
  const std::vector<Variant> variants = decode_variants();
  struct DecodeRow {
    std::string shape;
    double s, base;
  };
  size_t best = 0;  // the default, when the decode steps are not timed (--lora-prefill)
  if (!o.prefill_only) {
  std::vector<double> bases;
  for (int b : batches) {
    const double base = time_with(decode_of(b, context), {});
    bases.push_back(base);
    figure("lora_decode_step", fmt("b%.0f ctx%.0f", b, context) + " no adapter", base * 1e3, "ms");
  }
  std::vector<DecodeRow> best_rows;
  double best_mean = -1;
  for (size_t v = 0; v < variants.size(); ++v) {
    cuda->set_lora_kernels(variants[v].config);
    std::vector<DecodeRow> rows;
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const int b = batches[bi];
      const ProfilePoint p = decode_of(b, context);
      const std::string shape = fmt("b%.0f ctx%.0f", b, context);
      std::vector<int> ks = {1, 8};
      if (b >= 32) ks.push_back(32);
      if (b == 64) ks.push_back(64);
      for (int k : ks) {
        if (k > o.max_loras) continue;
        rows.push_back({shape + fmt(" %.0f adapters (rank %.0f, all 7 linears)", k, o.rank),
                        time_with(p, first_k(k)), bases[bi]});
      }
      // Half the rows with an adapter (8 of them), half without.
      std::vector<int> half(16);  // adapters and none interleaved: 0, -1, 1, -1, ...
      for (int i = 0; i < 16; ++i) half[size_t(i)] = i % 2 == 0 ? i / 2 : -1;
      if (b >= 16) rows.push_back({shape + " half the rows on 8 adapters, half none", time_with(p, half), bases[bi]});
    }
    double mean = 0;
    for (const DecodeRow& r : rows) {
      figure("lora_decode_variant", "[" + variants[v].name + "] " + r.shape, r.s * 1e3, "ms", "no adapter",
             r.base / r.s);
      mean += r.base / r.s / double(rows.size());
    }
    figure("lora_decode_variant_mean", "[" + variants[v].name + "] mean ratio of its decode steps", mean, "x");
    if (!variants[v].diagnostic && mean > best_mean) {
      best_mean = mean;
      best = v;
      best_rows = rows;
    }
  }
  cuda->set_lora_kernels(variants[best].config);
  std::printf("  kept: [%s] (best mean ratio %.3f); the figures below run with it\n", variants[best].name.c_str(),
              best_mean);
  for (const DecodeRow& r : best_rows)
    figure("lora_decode_step", r.shape + " [" + variants[best].name + "]", r.s * 1e3, "ms", "no adapter",
           r.base / r.s);
  }
  // Prefill (eager steps): n sequences of `len` tokens over k adapters (sequence q: adapter
  // q mod k), each on the tensor cores (a shrink and an expand GEMM per sequence's run of rows,
  // kernels/lora_gemm.h: `gemm`, the default; `gemm, deltas beside`: q|k|v's and gate|up's deltas written beside their products, eager_beside on)
  // and on the grouped CUDA-core kernels (`sgmv`, gemm_min_rows 0), side by side against the same
  // base step.
  struct PrefillShape {
    int n, len, k;
  };
  // A serving run's prefill steps are mostly one prompt of a few hundred tokens (1 x 128, 256).
  const std::vector<PrefillShape> prefills =
      o.prefill_only ? std::vector<PrefillShape>{{1, 16, 1},  {1, 32, 1},  {1, 48, 1},  {1, 64, 1},
                                                 {1, 128, 1}, {1, 256, 1}, {1, 512, 1}, {4, 512, 4}}
                     : std::vector<PrefillShape>{{1, 128, 1}, {1, 256, 1}, {1, 512, 1}, {4, 512, 4},
                                                 {4, 512, 1}, {8, 256, 8}, {16, 64, 16}};
  kernels::LoraSgmvConfig sgmv_config = variants[best].config, gemm_config = variants[best].config;
  sgmv_config.gemm_min_rows = 0;
  kernels::LoraSgmvConfig gemm_beside = gemm_config;  // q|k|v's and gate|up's deltas beside their products
  gemm_beside.eager_beside = true;
  // gate|up's runs expanded inside SiLU·mul (gate_up_in_silu_rows: 64 by default) never, and always.
  kernels::LoraSgmvConfig gu_never = gemm_config, gu_always = gemm_config;
  gu_never.gate_up_in_silu_rows = 0;
  gu_always.gate_up_in_silu_rows = 1 << 30;
  std::vector<std::pair<std::string, kernels::LoraSgmvConfig>> prefill_variants = {
      {"sgmv", sgmv_config},
      {"gemm", gemm_config},
      {"gemm, deltas beside", gemm_beside},
      {"gemm, gate|up expand GEMM", gu_never},
      {"gemm, gate|up in SiLU", gu_always},
      {"fused product", [&] {  // kernels::LoraFusedGemm with the runs inside, any run rows
         kernels::LoraSgmvConfig c = gemm_config;
         c.fused_product_min_rows = 1;
         c.fused_product_max_rows = 1 << 30;
         return c;
       }()},
      {"gemm again", gemm_config}};
  // cuBLASLt's products asked for SMs less `reserve` (LoraSgmvConfig::product_sm_reserve), the
  // runs' shrinks for `reserve` SMs, with the deltas beside the products (eager_beside) or the
  // expands after them; the default is 8 SMs, beside (every SM, after until 2026-12-03).
  auto sm_variant = [&](int reserve, bool beside) {
    kernels::LoraSgmvConfig c = gemm_config;
    c.product_sm_reserve = c.run_shrink_sms = reserve;
    c.sm_reserve_max_run_rows = 1 << 30;  // at every run length
    c.eager_beside = beside;
    c.mixed_grouped_beside = !beside;  // a mixed step's deltas all beside, or its grouped rows' first
    return std::pair{fmt("gemm, %.0f SMs left to the side", reserve) + (beside ? ", deltas beside" : ", expands after"), c};
  };
  for (const auto& [reserve, beside] : {std::pair{0, false}, {8, false}, {8, true}, {12, true}, {16, true}})
    prefill_variants.push_back(sm_variant(reserve, beside));
  if (o.prefill_only) {  // where the default's time goes: parts left out (wrong results), or in line
    auto with = [&](const char* name, auto f, const kernels::LoraSgmvConfig* base = nullptr) {
      kernels::LoraSgmvConfig c = base ? *base : gemm_config;
      f(c);
      prefill_variants.emplace_back(name, c);
    };
    // Where the tensor cores start to pay (gemm_min_rows, 16 by default: 64 before 2026-12-02).
    with("gemm from 64 rows", [](kernels::LoraSgmvConfig& c) { c.gemm_min_rows = 64; });
    with("gemm, in line", [](kernels::LoraSgmvConfig& c) { c.side_stream = false; });
    with("gemm, no shrinks (diagnostic)", [](kernels::LoraSgmvConfig& c) { c.skip_runs = 1; });
    with("gemm, no expands (diagnostic)", [](kernels::LoraSgmvConfig& c) { c.skip_runs = 2; });
    with("gemm, neither (diagnostic)", [](kernels::LoraSgmvConfig& c) { c.skip_runs = 3; });
    with("gemm, residual expands after (no side work for o, down)",
         [](kernels::LoraSgmvConfig& c) { c.residual_beside = false; });
    // Where the grouped kernels' time goes for a prompt's rows: their shrink or expand left out,
    // and the shrink's input cut into fewer chunks (fewer partial sums for the expand to read).
    auto with_sgmv = [&](const char* name, auto f) { with(name, f, &sgmv_config); };
    with_sgmv("sgmv, no shrinks (diagnostic)", [](kernels::LoraSgmvConfig& c) { c.skip_grouped = 1; });
    with_sgmv("sgmv, no expands (diagnostic)", [](kernels::LoraSgmvConfig& c) { c.skip_grouped = 2; });
    with_sgmv("sgmv, shrink for 132 blocks", [](kernels::LoraSgmvConfig& c) { c.shrink_target_blocks = 132; });
    with_sgmv("sgmv, shrink for 33 blocks", [](kernels::LoraSgmvConfig& c) { c.shrink_target_blocks = 33; });
    with_sgmv("sgmv, expand by slot tiles", [](kernels::LoraSgmvConfig& c) { c.expand_by_rows = false; });
  }
  // A serving run's prompts come in hundreds of lengths, most new to the process when they
  // arrive: one prompt each of 24 lengths met for the first time (131-154 tokens: no shape above
  // has them), then the same lengths again, each step timed once, with and without an adapter.
  // The difference is what a length's first step pays on the host inside the step (descriptors,
  // cuBLASLt's algorithm checks) while the GPU waits.
  {
    cuda->set_lora_kernels(gemm_config);
    const std::vector<int> one = {0};
    double first[2] = {0, 0}, again[2] = {0, 0};
    const int n_len = 24;
    const CudaBackend::CublasLtQueries q0 = cuda->cublaslt_queries();
    for (int pass = 0; pass < 2; ++pass)
      for (int i = 0; i < n_len; ++i) {
        const ProfilePoint p{ProfilePhase::prefill, std::vector<ProfilePoint::Seq>(1, {0, 131 + i})};
        for (int with = 0; with < 2; ++with) {
          backend.seq_slot = with ? one : std::vector<int>{};
          const double s = runner.run(p, 0, 1, 0.0).step_s;
          (pass == 0 ? first : again)[with] += s / n_len;
        }
        backend.seq_slot.clear();
      }
    const CudaBackend::CublasLtQueries q1 = cuda->cublaslt_queries();
    figure("lora_prefill_new_length", "cuBLASLt heuristic queries in those 96 steps: products", double(q1.products - q0.products), "n");
    figure("lora_prefill_new_length", "cuBLASLt heuristic queries in those 96 steps: LoRA runs", double(q1.lora - q0.lora), "n");
    for (int with = 0; with < 2; ++with) {
      const std::string who = with ? "1 adapter [gemm]" : "no adapter";
      figure("lora_prefill_new_length", "1 x 131-154 tokens " + who + ", each length's first step", first[with] * 1e3,
             "ms");
      figure("lora_prefill_new_length", "1 x 131-154 tokens " + who + ", the same lengths again", again[with] * 1e3, "ms",
             "first step", first[with] / again[with]);
    }
  }
  for (const PrefillShape& ps : prefills) {
    const ProfilePoint p{ProfilePhase::prefill, std::vector<ProfilePoint::Seq>(size_t(ps.n), {0, ps.len})};
    std::vector<int> slots(size_t(ps.n));
    for (int q = 0; q < ps.n; ++q) slots[size_t(q)] = q % ps.k;
    const double base = time_with(p, {});
    const std::string shape = fmt("%.0f x ", ps.n) + fmt("%.0f tokens", ps.len);
    figure("lora_prefill_step", shape + " no adapter", base * 1e3, "ms");
    for (const auto& [name, config] : prefill_variants) {
      cuda->set_lora_kernels(config);
      const double s = time_with(p, slots);
      figure("lora_prefill_step", shape + fmt(" %.0f adapter(s)", ps.k) + " [" + name + "]", s * 1e3, "ms",
             "no adapter", base / s);
    }
  }
  // A serving run's prefill step: one prompt beside the running requests' decodes (lora-compare
  // at 8 req/s: ~5 running), every sequence on its own adapter; against the same step without
  // adapters and the prompt alone with its adapter. The prompt's rows take the tensor cores, the
  // decodes' the grouped kernels: their deltas beside the products (the default,
  // mixed_grouped_beside) or after them.
  {
    auto with = [&](auto f) {
      kernels::LoraSgmvConfig c = gemm_config;
      f(c);
      return c;
    };
    using C = kernels::LoraSgmvConfig;
    const std::vector<std::pair<std::string, kernels::LoraSgmvConfig>> mixed_variants = {
        {"gemm", gemm_config},
        {"gemm, grouped grids for every row", with([](C& c) { c.size_by_plan_rows = false; })},
        {"gemm, grouped rows after", with([](C& c) { c.mixed_grouped_beside = false; })},
        {"gemm, neither", with([](C& c) { c.mixed_grouped_beside = c.size_by_plan_rows = false; })},
        {"gemm, in line", with([](C& c) { c.side_stream = false; })},
        sm_variant(0, false),
        sm_variant(8, false),
        sm_variant(8, true),
        sm_variant(16, true),
        {"gemm, grouped launches find no rows (diagnostic)", with([](C& c) { c.empty_plan = true; })},
        {"sgmv", sgmv_config},
        {"gemm again", gemm_config}};
    for (const int len : {128, 256, 512})
      for (const int n_dec : {4, 8}) {
        ProfilePoint p{ProfilePhase::mixed, {{0, len}}};
        for (int q = 0; q < n_dec; ++q) p.seqs.push_back({255, 1});
        const ProfilePoint alone{ProfilePhase::prefill, {{0, len}}};
        const std::string shape = fmt("1 x %.0f tokens + %.0f decodes", len, n_dec);
        cuda->set_lora_kernels(gemm_config);
        const double base = time_with(p, {}), base_alone = time_with(alone, {});
        const double lora_alone = time_with(alone, {0});
        figure("lora_mixed_step", shape + " no adapter", base * 1e3, "ms");
        figure("lora_mixed_step", fmt("1 x %.0f tokens alone, 1 adapter [gemm]", len), lora_alone * 1e3, "ms",
               "no adapter", base_alone / lora_alone);
        std::vector<int> prompt_only(size_t(n_dec + 1), -1);
        prompt_only[0] = 0;
        const double t_prompt = time_with(p, prompt_only);
        figure("lora_mixed_step", shape + ", the prompt on 1 adapter, the decodes on none [gemm]", t_prompt * 1e3, "ms",
               "no adapter", base / t_prompt);
        for (const auto& [name, config] : mixed_variants) {
          cuda->set_lora_kernels(config);
          const double t = time_with(p, first_k(n_dec + 1));
          figure("lora_mixed_step", shape + fmt(", %.0f adapters [", n_dec + 1) + name + "]", t * 1e3, "ms",
                 "no adapter", base / t);
        }
      }
  }
  cuda->set_lora_kernels(gemm_config);
  if (o.prefill_only) return out;

  // Closed-loop Zipf decode at batch 64: finished sequences replaced by new ones.
  const int B = 64, steps = o.quick ? 150 : 400, lead = 50;
  const ProfilePoint p = decode_of(B, context);
  runner.run(p, 2, 1, 0.0);
  double base_s = 0;
  {
    std::vector<double> t;
    for (int i = 0; i < 15; ++i) t.push_back(runner.run(p, 0, 1, 0.0).step_s);
    std::sort(t.begin(), t.end());
    base_s = t[7];
  }
  for (int n_adapters : {8, 64, 512}) {
    std::mt19937_64 rng(o.seed * 1000 + uint64_t(n_adapters));
    const Zipf zipf(n_adapters, 1.0);
    std::uniform_int_distribution<int> length(64, 192);
    std::vector<int> adapter(B), left(B);
    for (int q = 0; q < B; ++q) {
      adapter[size_t(q)] = zipf.draw(rng);
      left[size_t(q)] = std::uniform_int_distribution<int>(1, length(rng))(rng);  // staggered
    }
    std::vector<int> slot_adapter(size_t(o.max_loras), -1);  // which adapter each slot holds
    std::vector<int64_t> slot_used(size_t(o.max_loras), -1);
    for (int s = 0; s < o.max_loras; ++s) slot_adapter[size_t(s)] = -1;  // the loads above are other identities
    int64_t timed_misses = 0;
    double timed = 0;
    std::vector<int> seq_slot(B);
    for (int step = 0; step < lead + steps; ++step) {
      const double t0 = now_s();
      for (int q = 0; q < B; ++q) {
        if (left[size_t(q)] == 0) {
          adapter[size_t(q)] = zipf.draw(rng);
          left[size_t(q)] = length(rng);
        }
      }
      // Slots: a resident adapter keeps its slot; a missing one takes the least recently used
      // slot this step does not use (B <= max_loras, so there is one).
      std::vector<bool> used(size_t(o.max_loras), false);
      for (int q = 0; q < B; ++q) {
        const auto it = std::find(slot_adapter.begin(), slot_adapter.end(), adapter[size_t(q)]);
        if (it != slot_adapter.end()) used[size_t(it - slot_adapter.begin())] = true;
      }
      for (int q = 0; q < B; ++q) {
        auto it = std::find(slot_adapter.begin(), slot_adapter.end(), adapter[size_t(q)]);
        int s = int(it - slot_adapter.begin());
        if (it == slot_adapter.end()) {
          s = -1;
          for (int c = 0; c < o.max_loras; ++c)
            if (!used[size_t(c)] && (s < 0 || slot_used[size_t(c)] < slot_used[size_t(s)])) s = c;
          backend.load_lora(s, host[size_t(adapter[size_t(q)] % 2)]);
          slot_adapter[size_t(s)] = adapter[size_t(q)];
          used[size_t(s)] = true;
          if (step >= lead) ++timed_misses;
        }
        slot_used[size_t(s)] = step;
        seq_slot[size_t(q)] = s;
      }
      const double slots_s = now_s() - t0;  // the misses' loads, and the bookkeeping
      backend.seq_slot = seq_slot;
      const double step_s = runner.run(p, 0, 1, 0.0).step_s;  // execute() alone, as the base's
      backend.seq_slot.clear();
      for (int& l : left) --l;
      if (step >= lead) timed += slots_s + step_s;
    }
    const double tok_s = B * double(steps) / timed, base_tok_s = B / base_s;
    figure("lora_zipf_decode",
           fmt("b64 ctx512, %.0f adapters Zipf(1), %.0f slots: ", n_adapters, o.max_loras) +
               fmt("%.2f misses/step (%.0f in %.0f steps)", double(timed_misses) / steps, double(timed_misses), double(steps)),
           tok_s, "tok/s", fmt("no adapter (%.0f tok/s)", base_tok_s), tok_s / base_tok_s);
  }
  return out;
}

}  // namespace servelab::bench
