// Multi-LoRA on the cuda backend: in steps mixing three adapters and rows without one (a prefill,
// eager decodes, CUDA-graph decodes of up to 8 and of 9-16 rows, a graph replayed with another mix
// of rows), each row's logits
// equal those of the base model with its adapter merged into the weights (a checkpoint of its
// own, loaded by another CudaBackend) within bf16 tolerance (the prefill's longer runs on the
// tensor cores, kernels/lora_gemm.h), rows without an adapter equal the base
// model's, and greedy tokens agree with the merged models'; bad slots and adapters are refused.
// Names contain Gpu; every test skips without a CUDA device.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "engine/lora/lora_adapter.h"
#include "engine/lora/peft.h"
#include "engine/model/hf_config.h"
#include "engine/model/safetensors.h"
#include "engine/model/synth.h"
#include "engine/model/tensors.h"
#include "engine/model/weights.h"
#include "kernels/lora_sgmv.h"
#include "tests/backend/backend_test_util.h"
#include "tests/cuda_backend_gpu/gpu_test_model.h"

namespace servelab {
namespace lora_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::make_sequence;
using testing::random_tokens;
using testing::rel_error;

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

constexpr int64_t kSlots = 4096;
constexpr int kVocab = 1000;
/// ‖Δ‖/‖ref‖ of a row's logits. Two bf16 computations, each within the backend's 3e-2 of the
/// fp32 logits (cuda_backend_gpu_test.cpp): the merged model rounds W + scale · B · A once, the
/// adapter path rounds W · x into y and then y + delta again; so they may differ by their sum.
constexpr double kTol = 6e-2;
/// An adapter's row must differ from the base model's by more than this (the hook ran).
constexpr double kAdapterMoves = 0.15;

std::string temp_dir(const std::string& name) { return (std::filesystem::path(::testing::TempDir()) / name).string(); }

/// Writes `w` as a bf16 checkpoint folder (config.json + model.safetensors) CudaBackend::load reads.
void write_checkpoint(const ModelWeights& w, const std::string& dir) {
  std::filesystem::create_directories(dir);
  ModelConfig c = w.config;
  c.dtype = DType::bf16;
  write_hf_config(c, dir + "/config.json");
  std::vector<SafetensorsEntry> entries;
  std::vector<const float*> values;
  for (const TensorSpec& s : tensor_specs(c)) {
    SafetensorsEntry e;
    e.name = s.name;
    e.dtype = DType::bf16;
    e.shape = s.shape;
    entries.push_back(e);
    values.push_back(tensor_storage(w, s.name).data());
  }
  write_safetensors(dir + "/model.safetensors", entries, values);
}

/// The base checkpoint, three adapters (through the PEFT writer and reader in bf16, as a server
/// gets them) and a checkpoint per adapter with it merged in.
struct Fixture {
  ModelConfig config = testing::gpu_test_model("lora-gpu-test", 1024);
  std::string base_dir;
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  std::vector<std::string> merged_dirs;
  Fixture() {
    using T = LoraTarget;
    base_dir = temp_dir(config.name);
    if (!std::filesystem::exists(base_dir + "/config.json")) synthesize_checkpoint(config, base_dir, 11);
    const ModelWeights base = ModelWeights::load(base_dir);
    std::vector<LoraAdapter> made = {
        random_lora(config, "all7", 8, 8.0f, {T::q, T::k, T::v, T::o, T::gate, T::up, T::down}, 21),
        random_lora(config, "qv16", 16, 16.0f, {T::q, T::v}, 22),
        random_lora(config, "ogd4", 4, 2.0f, {T::o, T::gate, T::down}, 23),
    };
    made[2].use_rslora = true;
    for (size_t i = 0; i < made.size(); ++i) {
      const std::string dir = temp_dir("lora_gpu_" + made[i].name);
      write_peft_adapter(dir, made[i], DType::bf16);
      auto a = std::make_shared<LoraAdapter>(read_peft_adapter(dir, made[i].name, config, 16));
      a->id = i + 1;
      adapters.push_back(a);
      ModelWeights w = base;
      merge_lora(w, *a);
      merged_dirs.push_back(temp_dir("lora_gpu_merged_" + made[i].name));
      write_checkpoint(w, merged_dirs.back());
    }
  }
};

std::unique_ptr<KvManager> make_kv() {
  KvConfig c;
  c.kind = KvKind::paged;
  c.block_size = 16;
  c.prefix_caching = false;
  c.max_model_len = 512;
  return make_kv_manager(c, kSlots);
}

void hold(KvManager& kv, Sequence& s, int n) {
  if (!s.kv.allocated) kv.allocate(s, n); else kv.grow(s, n);
}

size_t argmax(std::span<const float> row) { return size_t(std::max_element(row.begin(), row.end()) - row.begin()); }

/// The adapter backend with `prefill_gemm`'s launches (gemm_min_rows set to 16 here) against the
/// base model and the merged models, eager and from graphs.
void mixed_adapters_equal_merged_models(kernels::LoraSgmvConfig prefill_gemm) {
  const Fixture f;
  // The adapter backend (4 slots of rank <= 16: adapters in slots 0, 2, 3), the base model and
  // one backend per merged adapter, all over the same KV manager's slots.
  auto lora = CudaBackend::load(f.base_dir);
  // The prefill's sequences of 20 to 141 tokens take the tensor cores (kernels/lora_gemm.h: the
  // 8 longest runs), the others the grouped kernels: both in one step.
  prefill_gemm.gemm_min_rows = 16;
  lora->set_lora_kernels(prefill_gemm);
  lora->reserve_loras(4, 16);
  const int slot_of[3] = {0, 2, 3};
  for (int a = 0; a < 3; ++a) lora->load_lora(slot_of[a], f.adapters[size_t(a)]);
  std::vector<std::unique_ptr<CudaBackend>> refs;  // [0] base, [1 + a] merged adapter a
  refs.push_back(CudaBackend::load(f.base_dir));
  for (const std::string& d : f.merged_dirs) refs.push_back(CudaBackend::load(d));
  lora->init_kv(kSlots);
  for (auto& r : refs) r->init_kv(kSlots);

  // Thirteen sequences: adapters 0, 1, 2, none, 0, none, 2, then 1, none, 0, 2, 1, 0.
  const int adapter_of[13] = {0, 1, 2, -1, 0, -1, 2, 1, -1, 0, 2, 1, 0};
  auto kv = make_kv();
  std::vector<Sequence> seqs;
  for (int i = 0; i < 13; ++i) seqs.push_back(make_sequence(i + 1, random_tokens(9 + 11 * i, kVocab, 50 + i)));
  // Each step: every backend's logits; each sequence's row against its reference; the adapter's
  // row also far from the base model's; then the adapter backend's greedy token, which the
  // merged model must agree with (or be within a near tie of).
  double worst[2] = {0, 0};  // the largest error of rows without / with an adapter (printed)
  auto step = [&](const std::vector<int>& which, const std::string& what) {
    Batch b, plain;
    for (int i : which) {
      Sequence& s = seqs[size_t(i)];
      hold(*kv, s, s.n_tokens());
      const int n_new = s.n_tokens() - s.n_computed;
      const int a = adapter_of[i];
      b.entries.push_back({&s, n_new, true, 1, -1, a >= 0 ? slot_of[a] : -1});
      plain.entries.push_back({&s, n_new, true});
    }
    const std::vector<float> got = lora->logits(make_step(*lora, b, *kv));
    std::vector<std::vector<float>> want;
    for (auto& r : refs) want.push_back(r->logits(make_step(*r, plain, *kv)));
    ASSERT_EQ(got.size(), which.size() * kVocab) << what;
    for (size_t k = 0; k < which.size(); ++k) {
      const int i = which[k], a = adapter_of[i];
      const auto row = std::span(got).subspan(k * kVocab, kVocab);
      const auto ref = std::span(want[size_t(a + 1)]).subspan(k * kVocab, kVocab);
      const double err = rel_error(row, ref);
      EXPECT_LT(err, kTol) << what << ", sequence " << i << ", adapter " << a;
      worst[a >= 0] = std::max(worst[a >= 0], err);
      if (a >= 0) {  // the adapter moved the logits well beyond the tolerance
        EXPECT_GT(rel_error(row, std::span(want[0]).subspan(k * kVocab, kVocab)), kAdapterMoves) << what << ", sequence " << i;
      }
      const size_t tok = argmax(row);
      EXPECT_GE(ref[tok], ref[argmax(ref)] - 0.05f) << what << ", sequence " << i << ": greedy token " << tok
                                                     << " is not the merged model's (" << argmax(ref) << ")";
      Sequence& s = seqs[size_t(i)];
      s.n_computed = s.n_tokens();
      s.tokens.push_back(static_cast<TokenId>(tok));
    }
  };
  step({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, "prefill");
  // Decodes of the first seven (bucket 8): the eager warm-up, the capture, replays; then five of
  // them (the same bucket: the graph replays with another mix of slots in its rows), then three.
  for (int n = 0; n < 4; ++n) step({0, 1, 2, 3, 4, 5, 6}, "decode " + std::to_string(n));
  for (int n = 0; n < 2; ++n) step({1, 3, 4, 5, 6}, "decode of five " + std::to_string(n));
  for (int n = 0; n < 3; ++n) step({2, 0, 5}, "decode of three " + std::to_string(n));
  // Bucket 16 (the products' gemv in two column tiles of x, the deltas inside): all thirteen, then
  // eleven (the graph replayed with padding rows and another mix).
  for (int n = 0; n < 3; ++n) step({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, "decode of 13 " + std::to_string(n));
  for (int n = 0; n < 2; ++n) step({12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2}, "decode of 11 " + std::to_string(n));
  EXPECT_GE(lora->graph_captures(), 3);  // decodes with adapters ran from graphs (buckets 4, 8, 16)
  std::printf("largest rel. error against the reference: rows without an adapter %.4f, with one %.4f\n", worst[0],
              worst[1]);
  // A step with no adapter row on the adapter backend equals the base model (no LoRA launch).
  step({3, 5}, "no adapter rows");
}

TEST(CudaBackendGpuLora, MixedAdaptersEqualMergedModelsEagerAndGraphs) {
  SKIP_WITHOUT_GPU();
  mixed_adapters_equal_merged_models(kernels::LoraSgmvConfig{});
}

// The same with the prefill's gate|up runs expanded by SiLU·mul (kernels::lora_silu_mul_runs),
// which the default keeps for steps of at most 64 run rows (this prefill's ~1,100 take the expand
// GEMM above).
TEST(CudaBackendGpuLora, MixedAdaptersEqualMergedModelsGateUpInSilu) {
  SKIP_WITHOUT_GPU();
  kernels::LoraSgmvConfig c;
  c.gate_up_in_silu_rows = 1 << 30;
  mixed_adapters_equal_merged_models(c);
}

// The same with the prefill's grouped rows (sequences under 16 tokens, and past the 8 longest)
// expanded after the q|k|v and gate|up products, behind the runs' expands, as before
// LoraSgmvConfig::mixed_grouped_beside (on by default: their deltas beside the products, added by
// the RoPE + K/V write and SiLU·mul).
TEST(CudaBackendGpuLora, MixedAdaptersEqualMergedModelsGroupedRowsAfter) {
  SKIP_WITHOUT_GPU();
  kernels::LoraSgmvConfig c;
  c.mixed_grouped_beside = false;
  mixed_adapters_equal_merged_models(c);
}

// The same with the prefill's products run by kernels::LoraFusedGemm, the tensor-core runs'
// deltas inside them (LoraSgmvConfig::fused_product_*_rows; off by default), the rows left (runs
// under 16 rows, rows without an adapter) as before, on devices the kernel takes (compute 9.0).
TEST(CudaBackendGpuLora, MixedAdaptersEqualMergedModelsFusedProduct) {
  SKIP_WITHOUT_GPU();
  kernels::LoraSgmvConfig c;
  c.fused_product_min_rows = 1;
  c.fused_product_max_rows = 1 << 30;
  mixed_adapters_equal_merged_models(c);
}

TEST(CudaBackendGpuLora, EagerOnlyMatchesGraphsAndRefusesBadInput) {
  SKIP_WITHOUT_GPU();
  const Fixture f;
  auto graphs = CudaBackend::load(f.base_dir);
  auto eager = CudaBackend::load(f.base_dir, CudaBackendOptions{.cuda_graphs = false});
  EXPECT_THROW(eager->load_lora(0, f.adapters[0]), std::invalid_argument);  // no pool reserved
  // The eager backend runs the other launch variants: the expand by rows after every product
  // (o_proj's and down_proj's too, not into the residual), slot-tile grids of 2 blocks an SM,
  // no side stream, and every run of rows on the tensor cores (kernels/lora_gemm.h; the decodes'
  // one-row runs too); the graphs the defaults but for the two below (docs/lora.md: their
  // prefill's runs of 30 and 44 rows on the grouped kernels).
  kernels::LoraSgmvConfig other;
  other.expand_by_rows = true;
  other.grid_blocks_per_sm = 2;
  other.residual_beside = !other.residual_beside;
  other.gemm_min_rows = 1;
  other.side_stream = false;  // every LoRA launch in line
  other.eager_beside = true;   // the runs' expand GEMMs write the delta alone; RoPE and SiLU·mul add it
  eager->set_lora_kernels(other);
  // The graphs: gate|up's and q|k|v's deltas placed the other way from the default (added inside
  // SiLU·mul and the RoPE + K/V write, or by the expands after the products; in the eager prefill
  // too), the expand's PDL
  // flipped, and the expand by slot tiles choosing rows on the device (expand_auto) where the
  // default is by rows.
  kernels::LoraSgmvConfig alt;
  alt.gate_up_beside = !alt.gate_up_beside;
  alt.qkv_beside = !alt.qkv_beside;
  alt.eager_beside = !alt.eager_beside;  // the prefill's deltas beside their products
  alt.product_sm_reserve = alt.product_sm_reserve ? 0 : 8;  // cuBLASLt's products on every SM, or 8 left
  alt.run_shrink_sms = alt.run_shrink_sms ? 0 : 8;
  alt.expand_pdl = !alt.expand_pdl;
  alt.expand_by_rows = !alt.expand_by_rows;  // slot tiles choosing rows on the device (expand_auto)
  alt.in_product = !alt.in_product;  // the decodes' deltas beside their products (the eager ones: in their gemv)
  graphs->set_lora_kernels(alt);
  other.grid_blocks_per_sm = -1;
  EXPECT_THROW(eager->set_lora_kernels(other), std::invalid_argument);
  other.grid_blocks_per_sm = 2;
  other.gemm_min_rows = -1;
  EXPECT_THROW(eager->set_lora_kernels(other), std::invalid_argument);
  other.gemm_min_rows = 1;
  other.product_sm_reserve = -1;
  EXPECT_THROW(eager->set_lora_kernels(other), std::invalid_argument);
  other.product_sm_reserve = 0;
  for (auto* b : {graphs.get(), eager.get()}) {
    b->reserve_loras(2, 8);
    b->init_kv(kSlots);
  }
  EXPECT_GT(graphs->lora_pool_bytes(), 2 * graphs->lora_slot_bytes());
  EXPECT_THROW(eager->load_lora(2, f.adapters[0]), std::invalid_argument);  // slot outside the pool
  eager->stage_lora(f.adapters[1], 0.0);  // staging a bad adapter does nothing: its load reports it
  EXPECT_THROW(eager->load_lora(0, f.adapters[1]), std::invalid_argument);  // rank 16 > 8
  EXPECT_THROW(eager->reserve_loras(3, 8), std::invalid_argument);          // already reserved otherwise
  // The graphs backend's images are packed ahead on its worker thread (stage_lora, while its
  // spare pinned buffers may still be allocated there as the graphs are captured below), the
  // eager backend's by the loads themselves: the logits below compare the two.
  graphs->stage_lora(f.adapters[0], 0.0);
  graphs->stage_lora(f.adapters[2], 0.0);
  for (auto* b : {graphs.get(), eager.get()}) {
    b->load_lora(0, f.adapters[0]);
    b->load_lora(1, f.adapters[2]);
  }
  const cuda::LoraImageCache::Stats staged = graphs->lora_image_stats(), in_line = eager->lora_image_stats();
  EXPECT_EQ(staged.packed_ahead + staged.packed_in_line, 2);
  EXPECT_EQ(staged.hits + staged.packed_in_line, 2);  // a load found its image ready, waited for it, or packed it
  EXPECT_EQ(in_line.packed_in_line, 2);
  EXPECT_EQ(in_line.packed_ahead, 0);
  auto kv = make_kv();
  std::vector<Sequence> seqs;
  for (int i = 0; i < 3; ++i) seqs.push_back(make_sequence(i + 1, random_tokens(30 + 7 * i, kVocab, 70 + i)));
  const int slot[3] = {1, -1, 0};
  for (int n = 0; n < 6; ++n) {
    Batch b;
    for (int i = 0; i < 3; ++i) {
      hold(*kv, seqs[size_t(i)], seqs[size_t(i)].n_tokens());
      b.entries.push_back({&seqs[size_t(i)], seqs[size_t(i)].n_tokens() - seqs[size_t(i)].n_computed, true, 1, -1, slot[i]});
    }
    const std::vector<float> x = graphs->logits(make_step(*graphs, b, *kv));
    const std::vector<float> y = eager->logits(make_step(*eager, b, *kv));
    ASSERT_EQ(x.size(), y.size());
    // Within the backend's bf16 tolerance (0.03): the deltas are rounded in another order when
    // they go into the residual rather than into the product's output, and the tensor cores
    // round xa to bf16.
    EXPECT_LT(rel_error(x, y), 0.03) << "step " << n;
    for (int i = 0; i < 3; ++i) {
      seqs[size_t(i)].n_computed = seqs[size_t(i)].n_tokens();
      seqs[size_t(i)].tokens.push_back(TokenId(argmax(std::span(y).subspan(size_t(i) * kVocab, kVocab))));
    }
  }
  // A row naming an emptied slot is refused before anything runs.
  eager->load_lora(1, nullptr);
  Batch b;
  hold(*kv, seqs[0], seqs[0].n_tokens());
  b.entries.push_back({&seqs[0], 1, true, 1, -1, 1});
  EXPECT_THROW(eager->logits(make_step(*eager, b, *kv)), std::invalid_argument);
}

// A load returns with its copy under way on the pool's copy stream (cuda_lora.h): the eager
// prefill right after it waits for each layer's part before the layer, a second load waits for the
// first's copy, and a CUDA-graph decode right after a slot is loaded again waits for the whole copy
// before its launch. Every row equals its merged model's in each of those steps.
TEST(CudaBackendGpuLora, ALoadsCopyRunsBesideTheStepsThatReadIt) {
  SKIP_WITHOUT_GPU();
  const Fixture f;
  auto lora = CudaBackend::load(f.base_dir);
  lora->reserve_loras(2, 16);
  auto m0 = CudaBackend::load(f.merged_dirs[0]), m2 = CudaBackend::load(f.merged_dirs[2]);
  for (auto* b : {lora.get(), m0.get(), m2.get()}) b->init_kv(kSlots);
  auto kv = make_kv();
  std::vector<Sequence> seqs;
  seqs.push_back(make_sequence(1, random_tokens(40, kVocab, 91)));  // a: slot 0, adapter 0
  seqs.push_back(make_sequence(2, random_tokens(25, kVocab, 92)));  // b: slot 1, adapter 2
  seqs.push_back(make_sequence(3, random_tokens(1, kVocab, 93)));   // c: a one-token prompt, slot 0 reloaded
  const int slot[3] = {0, 1, 0};
  // Runs one step of `which` on the three backends (the merged ones without slots) and checks
  // each row against its merged model: sequence i's adapter is want[i] (0 or 2).
  auto step = [&](const std::vector<int>& which, const int (&want)[3], const std::string& what) {
    Batch lb, rb;
    for (int i : which) {
      Sequence& s = seqs[size_t(i)];
      hold(*kv, s, s.n_tokens());
      lb.entries.push_back({&s, s.n_tokens() - s.n_computed, true, 1, -1, slot[i]});
      rb.entries.push_back({&s, s.n_tokens() - s.n_computed, true, 1, -1, -1});
    }
    const std::vector<float> got = lora->logits(make_step(*lora, lb, *kv));
    const std::vector<float> r0 = m0->logits(make_step(*m0, rb, *kv)), r2 = m2->logits(make_step(*m2, rb, *kv));
    ASSERT_EQ(got.size(), which.size() * kVocab) << what;
    for (size_t k = 0; k < which.size(); ++k) {
      const int i = which[k];
      const auto& ref = want[i] == 0 ? r0 : r2;
      EXPECT_LT(rel_error(std::span(got).subspan(k * kVocab, kVocab), std::span(ref).subspan(k * kVocab, kVocab)), kTol)
          << what << ", sequence " << i;
      Sequence& s = seqs[size_t(i)];
      s.n_computed = s.n_tokens();
      s.tokens.push_back(TokenId(argmax(std::span(ref).subspan(k * kVocab, kVocab))));
    }
  };
  const int want[3] = {0, 2, 2};  // each sequence's adapter
  lora->load_lora(0, f.adapters[0]);
  lora->load_lora(1, f.adapters[2]);  // after slot 0's copy; its own under way as the prefill starts
  step({0, 1}, want, "the prefill right after the loads");
  for (int n = 0; n < 4; ++n) step({0, 1}, want, "decode " + std::to_string(n));  // eager, captured, replays
  lora->load_lora(0, f.adapters[2]);  // slot 0 again: the graph of two rows replays right after
  step({1, 2}, want, "the graph step right after slot 0's reload");
  step({1, 2}, want, "the graph step after it");
}

}  // namespace lora_gpu_test
}  // namespace servelab
