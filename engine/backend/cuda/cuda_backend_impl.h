#pragma once
// Private to the cuda backend: CudaBackend::Impl, shared by cuda_backend.cpp (setup, the step
// driver, KV copies) and cuda_forward.cpp (the kernels of one step).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>

#include "engine/backend/cuda/block_table.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_lora.h"
#include "kernels/lora_fused_gemm.h"
#include "kernels/lora_gemm.h"
#include "kernels/lora_sgmv.h"
#include "engine/backend/cuda/cuda_weights.h"
#include "engine/backend/cuda/device_memory.h"
#include "engine/backend/cuda/graph_buckets.h"
#include "engine/backend/cuda/mixed_attention_plan.h"
#include "engine/backend/cuda/quant_linear.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/step_pack.h"
#include "engine/backend/cuda/tp_comm.h"
#include "engine/backend/cuda/verify_rows.h"
#include "engine/model/quantize_weights.h"
#include "kernels/attention.h"
#include "kernels/attention_decode_rows.h"
#include "kernels/gemm.h"
#include "engine/backend/cuda/kv_fp8_scratch.h"
#include "kernels/kv_fp8.h"
#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/sampling.h"

namespace servelab {
namespace cuda_impl {

using cuda::DeviceBuffer;
using cuda::PinnedBuffer;
namespace k = kernels;

/// What one enqueue runs: row counts, the packed input on the device, and how to read it.
struct Geometry {
  int rows = 0, tokens = 0, seqs = 0, samples = 0, max_context = 0;
  int64_t total_context = 0;  // sum of the context lengths (eager steps; FP8 KV prefill scratch)
  bool decode = false;
  cuda::PackedLayout layout;
  const uint8_t* dev = nullptr;  // the packed input on the device
  k::KvLayoutKind kind = k::KvLayoutKind::paged;
  int block_size = 16;
  bool graph = false;  // captured into / replayed from a CUDA graph
  bool lora = false;   // some row has an adapter: the LoRA hooks run (none launch otherwise)
  const uint32_t* masks = nullptr;  // the step's token masks on the device
  int mask_words_per_row = 0;
  bool draw_probs = false;  // the draws write their distributions (Step::want_draw_probs) into draw_probs_dev
  int row_groups = 0;  // layout.has_row_spans: the sequences the one-row entries group into (host count)
  int decode_prefix = 0;  // a mixed step's leading decodes on the decode kernel (MixedDecodePlanner)
  // Late masks (Step::fill_masks): the forward is launched (a graph of the forward alone, or
  // eagerly), then the host fills the masks while it runs, uploads them and launches the draws.
  bool late = false;
  template <typename T>
  const T* at(size_t offset) const { return reinterpret_cast<const T*>(dev + offset); }
};

}  // namespace cuda_impl
using namespace cuda_impl;  // private header: only the backend's own files include it
struct CudaBackend::Impl {
  using Geometry = cuda_impl::Geometry;
  CudaBackendOptions options;
  cuda::DeviceWeights w;
  std::unique_ptr<cuda::QuantDeviceWeights> qw;           // the quantized Linears (options.quantization); null in bf16/f16
  QuantScheme checkpoint_scheme;                          // a quantized checkpoint's format and its Linears as
  std::vector<cuda::PackedQuantLayer> checkpoint_linears; // stored (CudaBackend::load), until setup uploads them
  /// An act-order checkpoint's gate|up row orders (PackedQuantLinear::row_order, a layer each;
  /// empty: none), which the LoRA pool's images take (reserve_loras).
  std::vector<std::vector<int32_t>> ffn_orders;
  std::unique_ptr<cuda::QuantLinearRunner> quant_runner;  // their activation scratch and FP8 GEMM
  cudaStream_t stream = nullptr;
  std::unique_ptr<k::Gemm> gemm;
  bool fuse_gate_up_silu = true;  // with fusion on: gate|up and SiLU·mul in one gemv launch where gemv runs
  bool fuse_qkv_rope = true;      // with fusion on: q|k|v, RoPE and the K/V write in one gemv launch where gemv runs
  int attention_pdl = 0;          // DecodePathOptions::attention_pdl
  bool pdl_small_steps = true;    // launch with PDL in steps gemv takes (enqueue_forward)
  int n_sms = 0;
  cuda::MixedDecodePlanner mixed;  // where a mixed step's decodes take their attention
  k::ScalarType dt = k::ScalarType::bf16;  // options.dtype: weights, activations and KV (setup() sets it)

  // KV arena: 2 * n_layers arenas [n_slots, n_kv_heads, head_dim], K then V per layer.
  DeviceBuffer arena;
  DeviceBuffer arena_ptrs;  // [2 * n_layers] device pointers, for copy/gather/scatter
  int64_t n_slots = 0;
  int64_t arena_slots = 0;  // slots each arena is allocated with: n_slots, whole FP8 pages (kv_fp8.h) with kv_fp8
  int64_t row_bytes = 0;    // one slot of one arena (kv_cache_spec().arena_slot_bytes())
  bool kv_fp8 = false;      // options.kv_cache_dtype fp8: the arenas hold E4M3 codes and scales (kernels/kv_fp8.h)
  // FP8 KV, prefill steps: the step's sequences dequantized ([slots, n_kv_heads, head_dim] K and V
  // in dt) and their base slots; grown to the largest step's total context, never baked into a graph.
  DeviceBuffer kv8_k_scratch, kv8_v_scratch, kv8_bases;
  int64_t kv8_scratch_slots = 0;
  int64_t kv8_scratch_cap = 0;  // the arena's slots: the scratch grows by half again up to this (kv_fp8_scratch.h)
  // The step (the engine's, valid during execute()).
  const Step* plan = nullptr;
  DeviceBuffer mask_words;    // token masks of the step's constrained draws (uploaded when present)
  PinnedBuffer mask_host;
  cudaEvent_t mask_sent = nullptr;  // after the last late-mask upload: mask_host is free again
  // The step's device span (StepOutput::device_s): recorded as its forward is launched (graph or
  // first kernel) and after its tokens' copy; step_timed says the first was recorded this step.
  cudaEvent_t step_begin = nullptr, step_end = nullptr;
  bool step_timed = false;
  // Late masks already on the host (the tensor-parallel driver fills them once for every rank);
  // null: this rank calls the step's filler itself.
  const uint32_t* filled_masks = nullptr;
  PinnedBuffer packed_host;
  DeviceBuffer packed;        // eager steps
  DeviceBuffer graph_packed;  // graph steps: fixed address, sized once for the largest bucket
  std::map<GraphKey, GraphEntry> graphs;
  uint64_t epoch = 1;         // bumped whenever a buffer a graph baked in is reallocated
  int64_t graph_captures = 0; // graphs captured so far (a recapture after an epoch bump counts)
  int64_t verification_steps_graphed = 0;  // verification steps run as one-row decode sequences
  // The planned step is a verification step in its one-row form run by decode_attention_rows
  // (options.verify_rows_kernel): flat_spans groups its rows into the step's step_groups sequences.
  bool step_spans = false;
  int step_groups = 0;
  std::vector<int32_t> flat_spans;
  int n_samples = 0;          // draws of the last step (rows of logits/tokens to read)
  size_t last_upload_bytes = 0;  // the last step's one host-to-device copy
  // Persistent block tables (paged KV, options.persistent_block_tables): the device table
  // [table_diff.n_rows(), table_diff.stride()] int32, its host mirror and the step's changes.
  cuda::BlockTableDiff table_diff;
  cuda::BlockTableStep table_step;
  DeviceBuffer block_table;
  Step flat_step;  // a verification step as one-row decode sequences (verify_rows.h), when graphed
  DeviceBuffer inv_freq;    // [head_dim / 2] fp32
  DeviceBuffer h, xn, qkv, attn, delta, gate_up, act;  // [rows, ...] in dt
  int rows_capacity = 0;
  DeviceBuffer xs_delta, xs_h, xs, logits, tokens;     // sampled rows
  int samples_capacity = 0;
  DeviceBuffer decode_ws;
  PinnedBuffer tokens_host;
  // Speculative decoding: the step's drafts' q (draft_probs, rejection sampling in the sampler)
  // and, for a draft model's steps, the distributions its draws sampled ([samples, vocab]).
  DeviceBuffer draft_q, draw_probs_dev;
  // Tensor parallelism (tp_backend.h): this rank's share of the query heads, KV heads, FFN
  // columns and LM-head rows (setup() sets the whole model's unless the TP driver set them
  // first), and its communicator; null on one GPU, where every hook below is skipped.
  int local_heads = 0, local_kv_heads = 0, local_ffn = 0, local_vocab = 0;
  cuda::TpRank* tp = nullptr;
  // Multi-LoRA (cuda_lora.h, kernels/lora_sgmv.h): the adapter pool (reserve_loras), the step's
  // plan (rows grouped by slot: tile count, tiles, perm) and the shrink's fp32 partial sums, both
  // for rows_capacity rows; the side stream the shrinks run on beside the products, with its
  // fork and join events; and whether the planned step has any adapter row.
  cuda::DeviceLoraPool lora;
  DeviceBuffer lora_plan_buf, lora_partial;
  // gate|up's or q|k|v's delta alone, [rows_capacity, 2 · local_ffn or qkv_width()] (LoraSgmvConfig::*_beside).
  DeviceBuffer lora_delta;
  // The rows' finished xa, fp32 [rows_capacity, 3 · max rank] (LoraSgmvConfig::*_in_consumer:
  // q|k|v's, then gate|up's, read by rope_kv_write and lora_silu_mul_xa).
  DeviceBuffer lora_xa_rows;
  cudaStream_t lora_side = nullptr;
  cudaEvent_t lora_fork = nullptr, lora_join = nullptr;
  bool step_lora = false;
  k::LoraSgmvConfig lora_kernels;  // the grouped kernels' launch variant
  // Eager steps' runs of rows of one adapter on the tensor cores (kernels/lora_gemm.h): the
  // cuBLASLt products, their 16-bit xa [rows_capacity, the largest total rank], the step's runs,
  // and the slots of the rows left to the grouped kernels (host, then device) when some are.
  std::unique_ptr<k::LoraGemm> lora_gemm;
  int lora_gemm_prepared_rows = 0;  ///< prepare_lora_gemm's rows so far
  // LoraSgmvConfig::fused_product_*_rows: the products with the runs inside, and the step's row tiles.
  std::unique_ptr<k::LoraFusedGemm> lora_fused;
  k::LoraFusedTiles lora_fused_tiles;
  DeviceBuffer lora_xa, lora_left_dev;
  std::vector<k::LoraRun> lora_step_runs;
  std::vector<int32_t> lora_left;
  // Swap and copy-on-write lists, and the swap buffer (mapped pinned).
  PinnedBuffer index_host;
  PinnedBuffer swap_host;

  ~Impl() {
    drop_graphs();
    if (mask_sent) cudaEventDestroy(mask_sent);
    if (step_begin) cudaEventDestroy(step_begin);
    if (step_end) cudaEventDestroy(step_end);
    if (lora_fork) cudaEventDestroy(lora_fork);
    if (lora_join) cudaEventDestroy(lora_join);
    if (lora_side) cudaStreamDestroy(lora_side);
    if (stream) cudaStreamDestroy(stream);
  }

  /// The plan's arrays inside lora_plan_buf (laid out by ensure_lora_scratch: counts, tiles, perm,
  /// perm_slot, the shrink's tile (or row) counters, a count per LoRA group of every layer for the gemvs
  /// that run their shrink inside), launched as lora_kernels says (CudaBackend::set_lora_kernels).
  k::LoraPlan lora_step_plan() const {
    auto* base = lora_plan_buf.get<int32_t>();
    const size_t max_tiles = size_t(k::lora_max_tiles(rows_capacity, lora.n_slots()));
    int32_t* perm = base + 4 + 3 * max_tiles;
    int32_t* tile_done = perm + 2 * size_t(rows_capacity);
    return k::LoraPlan{base,      base + 4,         perm, perm + rows_capacity, lora_kernels, tile_done,
                       tile_done + max_tiles + size_t(rows_capacity), lora_gemv_counts()};
  }
  int lora_gemv_counts() const { return cuda::kLoraGroups * int(w.layers.size()); }

  void drop_graphs() {
    for (auto& [key, g] : graphs)
      if (g.exec) cudaGraphExecDestroy(g.exec);
    graphs.clear();
  }

  const ModelConfig& c() const { return w.config; }
  int dq() const { return local_heads * c().head_dim(); }
  int local_kv_dim() const { return local_kv_heads * c().head_dim(); }
  int qkv_width() const { return dq() + 2 * local_kv_dim(); }
  void* k_arena(int l) const { return arena.get<uint8_t>() + (2 * int64_t(l)) * arena_slots * row_bytes; }
  void* v_arena(int l) const { return arena.get<uint8_t>() + (2 * int64_t(l) + 1) * arena_slots * row_bytes; }

  /// Checks the options against the model and builds what the steps use from them: the stream,
  /// the GEMM and decode-path objects, attention planners, RoPE frequencies, the KV row layout and
  /// the quantized Linears (cuda_setup.cpp).
  void setup();

  void ensure_rows(int rows) {
    if (rows <= rows_capacity) return;
    const int n = std::max(rows, std::max(64, rows_capacity * 3 / 2));
    const ModelConfig& m = c();
    const size_t r = size_t(n) * 2;
    h.grow(r * m.hidden_size, "activations");
    xn.grow(r * m.hidden_size, "activations");
    delta.grow(r * m.hidden_size, "activations");
    qkv.grow(r * qkv_width(), "activations");
    attn.grow(r * dq(), "activations");
    gate_up.grow(r * 2 * size_t(local_ffn), "activations");
    act.grow(r * local_ffn, "activations");
    if (quant_runner) quant_runner->reserve(n);  // FP8 activation codes and scales
    ++epoch;
    // Padding rows of attn are never written by attention: keep them finite.
    CUDA_CHECK(cudaMemsetAsync(attn.get(), 0, attn.bytes(), stream));
    rows_capacity = n;
    ensure_lora_scratch();
  }

  /// The LoRA plan and partial sums for rows_capacity rows, and the side stream, once the pool
  /// exists. The plan's layout depends on rows_capacity: laid out again with it (cuda_backend.cpp).
  void ensure_lora_scratch();
  size_t planned_lora_bytes = 0;

  void ensure_samples(int n_samples) {
    if (n_samples <= samples_capacity) return;
    const int n = std::max(n_samples, std::max(16, samples_capacity * 3 / 2));
    const ModelConfig& m = c();
    xs_delta.grow(size_t(n) * m.hidden_size * 2, "sampled rows");
    xs_h.grow(size_t(n) * m.hidden_size * 2, "sampled rows");
    xs.grow(size_t(n) * m.hidden_size * 2, "sampled rows");
    logits.grow(size_t(n) * m.vocab_size * sizeof(float), "logits");
    tokens.grow(size_t(n) * sizeof(int32_t), "sampled tokens");
    tokens_host.grow(size_t(n) * sizeof(int32_t));
    if (tp) cuda::tp_ensure_samples(*tp, n);  // the all-gathered logits (epoch bumped below)
    samples_capacity = n;
    ++epoch;
  }

  /// Activation bytes a step of `rows` rows and `samples` sampled rows allocates.
  int64_t activation_bytes(int rows, int samples) const {
    const ModelConfig& m = c();
    const int64_t per_row = 2ll * (3 * m.hidden_size + qkv_width() + dq() + 3 * int64_t(local_ffn));
    const int64_t per_sample = 2ll * 3 * m.hidden_size + 4ll * m.vocab_size + 4;
    return int64_t(rows) * per_row + int64_t(samples) * per_sample +
           int64_t(k::decode_attention_workspace_bytes(rows, local_heads, m.head_dim(), k::kMaxAutoSplits)) +
           (tp ? cuda::tp_activation_bytes(*tp, rows, samples) : 0) +
           (quant_runner ? quant_runner->scratch_bytes(rows) : 0) +
           (32ll << 20);  // cuBLASLt workspace
  }

  /// FP8 KV: the dequantization scratch of a prefill step of `positions` context positions (and base slots).
  void ensure_kv8_scratch(int64_t positions, int n_seqs) {
    if (!kv_fp8) return;
    if (positions > kv8_scratch_slots) {
      const int64_t n = cuda::kv8_scratch_grow_to(positions, kv8_scratch_slots, kv8_scratch_cap);
      const size_t bytes = size_t(n) * size_t(local_kv_dim()) * 2;
      kv8_k_scratch.grow(bytes, "the FP8 KV dequantization scratch (prefill attention)");
      kv8_v_scratch.grow(bytes, "the FP8 KV dequantization scratch (prefill attention)");
      kv8_scratch_slots = n;
    }
    if (size_t(std::max(n_seqs, 1)) * 8 > kv8_bases.bytes()) kv8_bases.grow(size_t(std::max(n_seqs, 64)) * 8, "the FP8 KV scratch");
  }

  void ensure_decode_workspace(int n_seqs) {
    const size_t need = k::decode_attention_workspace_bytes(n_seqs, local_heads, c().head_dim(), k::kMaxAutoSplits);
    if (need <= decode_ws.bytes()) return;
    decode_ws.grow(need, "decode workspace");
    CUDA_CHECK(cudaMemsetAsync(decode_ws.get(), 0, decode_ws.bytes(), stream));  // split counters start at 0
    ++epoch;
  }

  /// Sizes every step buffer a graph bakes in for steps up to `limits` (Backend::reserve_steps):
  /// activations for max_rows rows, sampled rows, the decode workspace and the persistent block
  /// table for max_seqs sequences (rounded up to their graph bucket) of max_context tokens. Later
  /// steps within the limits then never bump the epoch, so each graph is captured once. Also asks
  /// cuBLASLt for every product's algorithms up to those rows (Gemm::prepare).
  void reserve(const StepLimits& limits) {
    const int seqs = std::max(1, limits.max_seqs);
    const int padded = std::max(seqs, graph_bucket(seqs));  // a graph step pads to its bucket
    const int rows = std::max(limits.max_rows, padded);
    ensure_rows(rows);
    ensure_samples(padded);
    ensure_decode_workspace(padded);
    // cuBLASLt's algorithm for every row bucket of the step's products, asked now rather than in
    // the first step with each new token count (as run in cuda_forward.cpp: n, k).
    const int d = c().hidden_size;
    gemm->prepare(dt, rows, qkv_width(), d, false);
    gemm->prepare(dt, rows, d, dq(), false);
    gemm->prepare(dt, rows, 2 * local_ffn, d, false);
    gemm->prepare(dt, rows, d, local_ffn, false);
    gemm->prepare(dt, padded, tp ? local_vocab : c().vocab_size, d, true);
    if (qw && !qw->layers.empty()) {
      const cuda::QuantDeviceWeights::Layer& q = qw->layers[0];
      for (const cuda::QuantWeight* x : {&q.qkv, &q.o, &q.gate_up, &q.down}) quant_runner->prepare(rows, *x);
    }
    prepare_lora_gemm(rows);
    if (options.gemm_autotune_rows > 0) {
      const k::Gemm::AutotuneStats& a = gemm->autotune_stats();
      std::fprintf(stderr, "gemm autotune (<= %d rows): %lld buckets timed, %lld not on the heuristic's first, %lld skipped"
                   " (memory); heuristic's first / fastest %.3fx on average\n", options.gemm_autotune_rows,
                   (long long)a.tuned, (long long)a.changed, (long long)a.skipped, a.tuned ? a.gain_sum / a.tuned : 1.0);
    }
    if (options.persistent_block_tables && limits.block_size > 0 && limits.max_context > 0)
      table_diff.reserve(padded + 1, (limits.max_context + limits.block_size - 1) / limits.block_size);
  }

  /// The LoRA runs' shrink and expand algorithms for every row bucket up to `rows`
  /// (LoraGemm::prepare), once adapters are reserved: asked here, not in the steps that first meet
  /// each prompt length. Called by reserve() and by ensure_lora_scratch(), whichever comes last.
  void prepare_lora_gemm(int rows);

  /// Forgets the persistent block table (host mirror and device copy): the next paged step
  /// sends its sequences' rows whole. Called when a step fails after its diff was planned.
  void drop_block_table() {
    table_diff.reset();
    block_table.reset();
    ++epoch;
  }

  /// Applies table_step's resize to the device table: a zeroed [n_rows, stride] table holding the
  /// old one in its top-left corner (as BlockTableDiff's mirror).
  void resize_block_table() {
    const cuda::BlockTableStep& t = table_step;
    DeviceBuffer fresh(size_t(t.n_rows) * t.stride * sizeof(int32_t), "the block tables");
    CUDA_CHECK(cudaMemsetAsync(fresh.get(), 0, fresh.bytes(), stream));
    if (t.old_rows > 0 && block_table.get())
      CUDA_CHECK(cudaMemcpy2DAsync(fresh.get(), size_t(t.stride) * sizeof(int32_t), block_table.get(),
                                   size_t(t.old_stride) * sizeof(int32_t), size_t(t.old_stride) * sizeof(int32_t),
                                   t.old_rows, cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // before the old table is freed
    block_table = std::move(fresh);
    ++epoch;  // graphs baked in the old table's address and stride
  }

  /// Builds and packs the step, then runs it (eagerly, or as a CUDA graph for plain decode steps
  /// when cuda_graphs is on) up to the sampled tokens in `tokens` and their logits in `logits`.
  void run_step(const Step& step) {
    const cuda::BlockTableStep* tables = plan_step(step);
    if (plan->n_rows() == 0) return;
    run_tables(tables);
  }

  /// The host half of run_step (no CUDA call): checks the step, points `plan` at it and, with
  /// persistent tables, plans the block-table diff into `table_step`; returns it (null without
  /// persistent tables). The tensor-parallel driver runs it once per step and hands the result to
  /// every rank.
  const cuda::BlockTableStep* plan_step(const Step& step) {
    if (n_slots == 0) throw std::logic_error("CudaBackend::execute: init_kv() was not called");
    if (step.n_padding < 0) throw std::invalid_argument("CudaBackend: step.n_padding must be >= 0");
    step.in.validate();
    plan = &step;
    step_spans = false;  // set below when the step runs in its one-row form with row spans
    const k::StepInput& in = step.in;
    for (int32_t t : in.token_ids)
      if (t < 0 || t >= c().vocab_size)
        throw std::invalid_argument("CudaBackend: token " + std::to_string(t) + " is outside the vocabulary [0, " +
                                    std::to_string(c().vocab_size) + ")");
    if (in.has_masks() && in.mask_words_per_row != (c().vocab_size + 31) / 32)
      throw std::invalid_argument("CudaBackend: step.in.mask_words_per_row must be (vocab + 31) / 32");
    for (int64_t s : in.slot_mapping)
      if (s < 0 || s >= n_slots)
        throw std::out_of_range("CudaBackend: kv slot " + std::to_string(s) + " is outside the arena [0, " +
                                std::to_string(n_slots) + ")");
    step_lora = false;
    for (size_t i = 0; i < in.lora_slot.size(); ++i) {
      const int s = in.lora_slot[i];
      if (s < 0) continue;
      if (!lora.holds(s))
        throw std::invalid_argument("CudaBackend: lora_slot[" + std::to_string(i) + "] = " + std::to_string(s) +
                                    " names a slot holding no adapter (" + std::to_string(lora.n_slots()) +
                                    " slots reserved)");
      step_lora = true;
    }
    n_samples = in.n_samples();
    if (step.n_rows() == 0) return nullptr;
    const cuda::BlockTableStep* tables = nullptr;
    if (options.persistent_block_tables && in.kv_kind == k::KvLayoutKind::paged) {
      table_diff.plan(in.seq_ids, in, table_step);  // throws before changing the mirror
      tables = &table_step;
    }
    // Verification rows as one-row decode sequences where a decode graph can then serve the step:
    // with the multi-row kernel (decode_attention_rows, each sequence's K/V read once for its
    // rows) up to the largest graph bucket, else (one-row sequences through decode_attention)
    // up to kVerifyGraphMaxRows.
    // The multi-row kernel runs on CUDA cores: when asked, it serves models without GQA (where the
    // one-row transform runs the CUDA-core decode kernel too); with GQA the transform's tensor-core
    // kernel was 1.8-2.2x faster (kernel_bench --verify-rows, H200).
    const bool rows_kernel = options.verify_rows_kernel && (local_heads == local_kv_heads || options.verify_rows_kernel_gqa) &&
                             cuda::max_query_rows(in) <= k::kMaxDecodeRows;
    const int most_rows = options.verify_graph_max_rows > 0 ? std::min(options.verify_graph_max_rows, kVerifyRowsGraphMaxRows)
                          : rows_kernel                     ? kVerifyRowsGraphMaxRows
                                                            : kVerifyGraphMaxRows;
    if (options.cuda_graphs && !options.batch_invariant && step.n_padding == 0 && in.n_tokens() <= most_rows &&
        in.max_context() <= kGraphMaxContext && (!tables || tables->updates.size() <= size_t(kGraphMaxTableUpdates)) &&
        cuda::plan_verification_as_decode(step, flat_step, tables ? &table_step : nullptr,
                                          rows_kernel ? &flat_spans : nullptr)) {
      plan = &flat_step;
      step_spans = rows_kernel;
      step_groups = in.n_seqs();
      ++verification_steps_graphed;
    }
    return tables;
  }

  const std::vector<int32_t>* planned_spans() const { return step_spans ? &flat_spans : nullptr; }

  /// The device half of run_step: the planned step (`plan`, `tables` = &table_step or null).
  void run_tables(const cuda::BlockTableStep* tables) {
    try {
      if (tables && table_step.resized) resize_block_table();
      run_planned(tables);
    } catch (...) {
      if (tables) drop_block_table();  // the device may not hold what the mirror says
      throw;
    }
  }

  /// run_step after the plan: graph or eager. Defined in cuda_backend.cpp.
  void run_planned(const cuda::BlockTableStep* tables);

  /// Records step_begin on the stream: the forward's launch follows (after the step's upload).
  void mark_step_begin();

  /// The whole step as one enqueue (eager): the forward and the draws, or with late masks the
  /// forward, the masks filled and uploaded meanwhile, then the draws.
  void enqueue_step(const Geometry& g) {
    mark_step_begin();
    enqueue_forward(g);
    if (g.late) send_late_masks_and_draw(g);
    else enqueue_draws(g);
  }

  /// Late masks, once the forward is on the stream: the step's filler writes them straight into
  /// pinned memory while the device runs the forward (or they come from `filled_masks`), one
  /// upload, then the draws. A filler that throws is the step's error: the stream is drained
  /// first, so nothing of the step is still running when the exception leaves.
  void send_late_masks_and_draw(const Geometry& g) {
    const k::StepInput& in = plan->in;
    const size_t words = size_t(in.late_masks) * size_t(in.mask_words_per_row);
    const size_t bytes = words * sizeof(uint32_t);
    if (mask_sent) CUDA_CHECK(cudaEventSynchronize(mask_sent));  // the last upload has read mask_host
    else CUDA_CHECK(cudaEventCreateWithFlags(&mask_sent, cudaEventDisableTiming));
    mask_host.grow(bytes);
    try {
      if (filled_masks) std::memcpy(mask_host.get(), filled_masks, bytes);
      else if (!plan->fill_masks) throw std::invalid_argument("CudaBackend: step.in.late_masks > 0 but fill_masks is not set");
      else plan->fill_masks(mask_host.get<uint32_t>());
    } catch (...) {
      cudaStreamSynchronize(stream);
      throw;
    }
    CUDA_CHECK(cudaMemcpyAsync(mask_words.get(), mask_host.get(), bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(mask_sent, stream));
    last_upload_bytes += bytes;
    enqueue_draws(g);
  }

  /// Packs the plan (and the block-table changes) into the pinned buffer and uploads it in one
  /// copy to `dst`.
  void stage(Geometry& g, DeviceBuffer& dst, const cuda::BlockTableStep* tables) {
    if (g.layout.total > dst.bytes()) throw std::logic_error("CudaBackend: the step input outgrew its device buffer");
    packed_host.grow(g.layout.total);
    cuda::pack_step(*plan, g.layout, packed_host.get<uint8_t>(), tables, g.layout.has_row_spans ? &flat_spans : nullptr);
    CUDA_CHECK(cudaMemcpyAsync(dst.get(), packed_host.get(), g.layout.total, cudaMemcpyHostToDevice, stream));
    last_upload_bytes = g.layout.total;
    g.dev = dst.get<uint8_t>();
    const k::StepInput& in = plan->in;
    if (!in.draft_probs.empty()) {  // the drafts' q, on its own (most steps carry none)
      const size_t bytes = in.draft_probs.size() * sizeof(float);
      if (bytes > draft_q.bytes()) {
        draft_q.grow(bytes, "the draft distributions");
        ++epoch;  // graphs baked in the old address
      }
      CUDA_CHECK(cudaMemcpyAsync(draft_q.get(), in.draft_probs.data(), bytes, cudaMemcpyHostToDevice, stream));
      last_upload_bytes += bytes;
    }
    g.draw_probs = plan->want_draw_probs;
    if (g.draw_probs) {
      const size_t bytes = size_t(std::max(g.samples, 1)) * size_t(c().vocab_size) * sizeof(float);
      if (bytes > draw_probs_dev.bytes()) {
        draw_probs_dev.grow(bytes, "the draws' distributions");
        ++epoch;
      }
    }
    g.masks = nullptr;
    g.late = in.has_late_masks();
    if (g.late) {  // uploaded once the forward is launched (send_late_masks_and_draw)
      const size_t bytes = size_t(in.late_masks) * size_t(in.mask_words_per_row) * sizeof(uint32_t);
      if (bytes > mask_words.bytes()) mask_words.grow(bytes, "the token masks");
      g.masks = mask_words.get<uint32_t>();
      g.mask_words_per_row = in.mask_words_per_row;
    } else if (!in.mask_words.empty()) {  // an eager step (bucketable() keeps such steps out of graphs)
      const size_t bytes = in.mask_words.size() * sizeof(uint32_t);
      if (bytes > mask_words.bytes()) mask_words.grow(bytes, "the token masks");
      CUDA_CHECK(cudaStreamSynchronize(stream));  // the last step's mask upload may still read mask_host
      mask_host.grow(bytes);
      std::memcpy(mask_host.get(), in.mask_words.data(), bytes);
      CUDA_CHECK(cudaMemcpyAsync(mask_words.get(), mask_host.get(), bytes, cudaMemcpyHostToDevice, stream));
      last_upload_bytes += bytes;
      g.masks = mask_words.get<uint32_t>();
      g.mask_words_per_row = in.mask_words_per_row;
    }
  }

  /// The kernels of the step, on `stream`: capturable (no allocation, no synchronization).
  /// Defined in cuda_forward.cpp. The forward up to the drawn rows' logits, then the draws
  /// (token masks and sampling).
  void enqueue_forward(const Geometry& g);
  void enqueue_draws(const Geometry& g);

  /// Slots as int32 indices in the mapped index buffer (device-visible); checks the range.
  const int32_t* upload_slots(std::span<const int64_t> slots, const char* what) {
    index_host.grow(slots.size() * sizeof(int32_t));
    auto* p = index_host.get<int32_t>();
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i] < 0 || slots[i] >= n_slots)
        throw std::out_of_range(std::string("CudaBackend: ") + what + " slot " + std::to_string(slots[i]) +
                                " is outside the arena [0, " + std::to_string(n_slots) + ")");
      p[i] = static_cast<int32_t>(slots[i]);
    }
    return index_host.device_ptr<int32_t>();
  }
};

}  // namespace servelab
