#pragma once
// CudaBackend: the Llama-family forward on one GPU, weights, activations and KV in bf16 (or fp16:
// CudaBackendOptions::dtype) with fp32 accumulation, on the kernels in kernels/. Plain C++ header (pimpl): it compiles without the CUDA toolkit; the
// implementation is built only when CUDA is on (SERVELAB_HAVE_CUDA_BACKEND).
//
// A step: build_step_input (step_builder.h) packs the batch into one pinned buffer, uploaded in
// one copy; embedding; per layer rms_norm (add_rms_norm from layer 1 on), the merged QKV GEMM,
// rope_kv_write, attention (decode_attention when every sequence has one row, else
// prefill_attention), the O GEMM, add_rms_norm, the merged gate|up GEMM, silu_mul, the down GEMM;
// the final norm and the LM head on the sampled rows only; sample_tokens; one copy of the token
// ids back; the device is synchronized before execute() returns, so step times are real.
// Arena: per layer K and V, each [n_slots, n_kv_heads, head_dim] in the dtype (kernels/README.md).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/lora_images.h"
#include "engine/backend/cuda/mixed_attention_plan.h"
#include "engine/backend/cuda/tp_all_reduce_mode.h"
#include "engine/backend/kv_cache_spec.h"
#include "engine/model/quant.h"
#include "engine/model/residual_scale.h"

namespace servelab {
namespace kernels {
struct LoraSgmvConfig;  // kernels/lora_sgmv.h
}

/// Settings of the CUDA backend. validate() names the bad field.
/// How decode products (at most 8 rows) run. The defaults are the measured fastest on an H100 and
/// an H200 (kernels/README.md); the other settings exist to measure against them (engine_bench
/// --mbu runs one backend per setting).
struct DecodePathOptions {
  enum class Gemv { off, unsplit, all };
  /// Which decode products take the skinny gemv kernel (kernels/gemv.cu) instead of cuBLASLt: none,
  /// those whose gemv plan needs no K split, or all.
  Gemv gemv = Gemv::all;
  int gemv_waves = 0;             ///< gemv splits K when fewer than this many waves of blocks run; 0 never
  int gemv_loop = 3;              ///< gemv's loop: bit 0 rolling pipeline, bit 1 L2::256B load hint
  bool fuse_gate_up_silu = true;  ///< the gate|up product and SiLU·mul in one gemv launch
  bool fuse_qkv_rope = true;      ///< the q|k|v product, RoPE and the K/V write in one gemv launch
  /// Decode attention with PDL (with `pdl`; kernels::DecodeAttentionArgs::pdl): 0 a plain launch,
  /// 1 the O product may start once every attention block runs, 2 once each is done with its K/V.
  /// 0 by default: on an H200 (llama2-7b batch 1, results/gpu/decode-fusion-2026-11-30-h200/)
  /// 1 and 2 were level at context 128 and 2.5% slower at 4,096.
  int attention_pdl = 0;
  /// Programmatic dependent launch between the kernels of a step whose products take gemv (beside
  /// cuBLASLt's products it measured slower, so never there); off in batch-invariant mode.
  bool pdl = true;
};

struct CudaBackendOptions {
  int device = 0;                ///< CUDA device ordinal (`device:` in the scenario)
  /// false (`fusion: off`): the unfused sequence (residual_add + rms_norm, rope_inplace +
  /// kv_write, silu_then_mul), to measure what fusion buys.
  bool fusion = true;
  /// Every kernel's result independent of the batch: GEMMs with one algorithm and no split-K,
  /// every attention through the prefill kernel (invariant by construction), so all strategies
  /// give identical greedy tokens.
  bool batch_invariant = false;
  /// A mixed step's decodes (its leading one-row sequences, ahead of its chunks; eager steps):
  /// auto_select runs them through the decode attention kernel where cuda/mixed_attention_plan.h
  /// prices that cheaper than a query tile each in the prefill kernel beside the chunks (on an
  /// sm_90a build, head_dim 128: the kernel it models); prefill_kernel never; decode_kernel always
  /// (tests, measurements). Neither with batch_invariant nor an FP8 KV cache: the prefill kernel.
  cuda::MixedDecodes mixed_decodes = cuda::MixedDecodes::auto_select;
  /// Decode steps (one row per sequence, up to 512 sequences, contexts up to 16k) replay a CUDA
  /// graph captured per (batch bucket, context bucket, KV layout) after one eager warm-up run;
  /// false (`cuda_graphs: off`) runs every step eagerly.
  bool cuda_graphs = true;
  /// With cuda_graphs (not batch-invariant): true runs a verification step (speculative decoding,
  /// <= 8 rows a sequence) through the decode graphs with the multi-row decode attention, which
  /// reads each sequence's K/V once for all its rows (kernels/attention_decode_rows.h), up to 512
  /// rows. Off by default: on an H200 (llama2-7b, contexts ~390, k = 4; results/gpu/spec/
  /// h200-2026-11-29-5cd01fe) the step took 4.52 / 9.83 / 16.25 ms at 1 / 32 / 64 users against
  /// 4.29 / 8.89 / 14.69 ms eager (the prefill attention path): the CUDA-core kernel is bound by its
  /// arithmetic, not by the K/V it no longer re-reads. false (default): steps of at most 16 rows as
  /// one-row decode sequences (graph_buckets.h), larger ones eagerly.
  bool verify_rows_kernel = false;
  /// The multi-row kernel runs on CUDA cores, so by default it serves models without GQA only
  /// (with GQA the one-row transform's tensor-core kernel measured 2-3x faster); true: with GQA
  /// too (tests, measurements).
  bool verify_rows_kernel_gqa = false;
  /// Verification steps of at most this many rows replay the decode graphs; 0 (default): 512
  /// with verify_rows_kernel, 16 without (graph_buckets.h). For measuring either path at any size.
  int verify_graph_max_rows = 0;
  /// (row, head) pairs a block of the multi-row attention computes: 4 or 8; 0 (default):
  /// kVerifyRowsQueries (graph_buckets.h). For measuring both.
  int verify_rows_queries = 0;
  /// Paged KV: block tables live on the device across steps (a row per sequence) and each step
  /// uploads only the entries that changed; false re-sends every sequence's whole table each step
  /// (the path it replaces, kept to compare against).
  bool persistent_block_tables = true;
  /// Row buckets of at most this many rows (decode batches) time up to 8 of cuBLASLt's candidate
  /// algorithms per product when steps are reserved and keep the fastest (Gemm::set_autotune);
  /// 0 (default) takes the heuristic's first. An experiment: engine_bench's `gemm_autotune` mode.
  int gemm_autotune_rows = 0;
  /// Storage of the weights, activations and KV arena (`dtype:` in the scenario): bf16 (default)
  /// or f16; products and reductions accumulate in fp32 either way, logits are fp32. Checkpoints
  /// (bf16, f16 or f32) are converted on the GPU; presets are drawn there in this dtype.
  DType dtype = DType::bf16;
  /// Tensor parallelism's watchdog (TpCudaBackend; unused on one GPU): NCCL communicator set-up
  /// and every wait on a step's collectives end in an error, the communicators aborted, when they
  /// have not finished after this many seconds (a rank that failed or never joined), never a hang.
  double tp_timeout_s = 60.0;
  /// Tensor parallelism's all-reduce (`all_reduce:`, tp_all_reduce_mode.h): auto (ours up to
  /// tp_all_reduce_max_bytes, NCCL above), nccl, or custom (ours always). Unused on one GPU.
  TpAllReduce tp_all_reduce = TpAllReduce::auto_select;
  /// The largest message ours takes (`all_reduce_max_bytes`; its peer buffers hold 2 x N of
  /// these per GPU, allocated once at start): the measured crossover by default.
  int64_t tp_all_reduce_max_bytes = kTpCustomAllReduceDefaultMaxBytes;
  /// Our lamport all-reduce of the O and down products fused with the residual add and RMSNorm
  /// after them (kernels::CustomAllReduce::run_add_rms_norm). On by default since 2026-11-30: on
  /// 2 x H200 llama2-13b's batch-1 decode is 1.70-1.71x TP=1 with it (and the products' pushes)
  /// against 1.68x without, and batch 32 was 2% faster in four runs; one run of 2026-11-29 was 1.5x
  /// slower at batch 32, before the kernels were loaded on every GPU at construction
  /// (docs/tensor-parallel.md). Same bits as the all-reduce then add_rms_norm.
  bool tp_fuse_all_reduce_norm = true;
  /// With tp_fuse_all_reduce_norm: the O and down products that the gemv kernel takes (decode
  /// batches of up to 8 rows) store their rows straight into the peers' lamport buffers from their
  /// epilogue (kernels/lamport_push.h), so the fused kernel after them only waits for the peers'
  /// rows: the all-reduce's push overlaps the product. Same bits as without. On by default.
  bool tp_push_from_product = true;
  /// Tensor parallelism's host hand-offs (RankPool, tp_rank_pool.h): the rank threads poll this
  /// many microseconds for the next step before they sleep, and the caller polls for a step's end;
  /// 0 hands every step over through condition variables (a sleeping thread's wake-up on the
  /// step's critical path).
  int tp_spin_us = 2000;
  /// Messages up to this many bytes take our lamport all-reduce (and, with it, the fused norm and
  /// the products' pushes); larger ones up to tp_all_reduce_max_bytes the barrier variant.
  /// kernels::CustomAllReduce::kDefaultLamportMaxBytes (1 MiB) by default; 0 turns lamport off.
  int64_t tp_lamport_max_bytes = int64_t(1) << 20;
  /// Lamport (with the fused norm and the pushes) in eagerly enqueued steps too. Off: only steps
  /// captured into CUDA graphs (decodes) take it; prefills and other eager steps take the barrier
  /// variant. On 2 x H200 (llama2-13b, results/gpu/tp/prefill-stall.yaml) eager lamport stalled 17
  /// of 96 short prefills by 12-36 ms, mostly the first prefill of each length; the barrier
  /// variant and NCCL stalled one.
  bool tp_lamport_eager = false;
  DecodePathOptions decode;  ///< decode products: gemv or cuBLASLt, PDL, fused SiLU
  /// The decoder Linears' format (`quantization:`), quantized on load from the bf16 weights
  /// (engine/backend/cuda/quant_linear.h): fp8 (per-tensor scales and activations, or per-channel
  /// weights and per-token activations with fp8_per_channel), int4_awq, int4_gptq. bf16 only,
  /// not batch-invariant.
  Quantization quantization = Quantization::none;
  bool fp8_per_channel = false;
  /// Quantized products of up to this many rows (1..16) take quant_gemv on bf16 activations;
  /// more rows the FP8 GEMM (fp8) or dequantize + bf16 GEMM (int4). 0: the measured fastest per
  /// format, QuantLinearRunner::default_gemv_rows (engine_bench --quantization fp8/8,fp8/16,... on
  /// an H200, docs/quantization.md): 16 for both (quant_gemv's steps kernel takes 9-16 rows as two
  /// column tiles; fp8's batch-16 step 3.76 ms against 4.21 through the FP8 GEMM, int4's dequantize
  /// + GEMM several times slower).
  int quant_gemv_max_rows = 0;
  /// The KV cache's format (`kv_cache_dtype:`): auto keeps K/V in dtype; fp8 stores E4M3 codes
  /// with one fp32 scale per (token, layer, K|V, KV head), the CPU backend's format (kernels/kv_fp8.h:
  /// written by the fused RoPE + KV kernel, read by a CUDA-core decode kernel; prefill attention
  /// dequantizes the step's sequences into a dtype scratch first). About twice the slots for the
  /// same bytes. One GPU only (TpCudaBackend refuses it); the multi-row verification kernel is
  /// not used with it (verification steps take the one-row decode form or prefill attention).
  KvCacheDType kv_cache_dtype = KvCacheDType::auto_dtype;
  /// Synthesized weights (model.residual_scale, engine/model/residual_scale.h): the attention
  /// output and down projections of layers from from_layer on multiplied by scale after they are
  /// drawn or loaded, before quantization. One GPU only (TpCudaBackend refuses it).
  std::optional<ResidualScale> residual_scale;
  /// Names the bad field: device < 0, tp_timeout_s <= 0, tp_spin_us < 0, tp_all_reduce_max_bytes outside
  /// [16, 1 GiB] or not a multiple of 16, tp_all_reduce custom with dtype f16, decode.gemv_waves < 0, decode.gemv_loop outside 0..3, a dtype other than bf16 / f16, or f16 in a build without the
  /// fp16 kernels; quantization with dtype f16 or batch_invariant.
  void validate() const;
};

/// Number of CUDA devices this process sees (0 without a driver or a GPU).
int cuda_device_count();
/// "NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90" for a device ordinal.
std::string cuda_device_description(int device);

class CudaBackend final : public Backend {
 public:
  /// Preset (or any config) with random weights drawn on the GPU (DeviceWeights::random).
  static std::unique_ptr<CudaBackend> random(const ModelConfig& config, uint64_t seed, CudaBackendOptions options = {});
  /// A Hugging Face folder loaded straight to the GPU in options.dtype (DeviceWeights::load).
  static std::unique_ptr<CudaBackend> load(const std::string& dir, CudaBackendOptions options = {});
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override;
  /// 2 (K and V) × n_layers × n_kv_heads × head_dim × 2 bytes (bf16 or f16); a tensor-parallel rank's
  /// share of the KV heads only. With kv_cache_dtype fp8: 2 × n_layers × (n_kv_heads × (head_dim + 4)
  /// rounded up to 16) bytes (cuda_kv_cache_spec).
  KvCacheSpec kv_cache_spec() const override;
  void init_kv(int64_t n_slots) override;
  /// Sizes the activations, sampled rows, decode workspace and persistent block table for the
  /// largest step up front, so no buffer a captured graph baked in is reallocated mid-run (which
  /// would make every graph be captured again).
  void reserve_steps(const StepLimits& limits) override;
  /// The CUDA graph batch buckets (a decode step of n sequences replays the graph of the smallest
  /// bucket >= n) when graphs are on and not batch-invariant; empty otherwise.
  std::vector<int> decode_row_buckets() const override;
  /// With graphs (not batch-invariant): a batch per graph bucket up to limits.max_seqs (the
  /// largest is max_seqs itself where it is not a bucket: it pads to one), a context per context
  /// bucket up to limits.max_context, and with or without graphs a row count per cuBLASLt row
  /// bucket (kernels/gemm_rows.h) from 2 to limits.max_rows.
  WarmShapes warm_shapes(const StepLimits& limits) const override;
  BackendCaps caps() const override;
  std::string device_description() const override;
  /// Runs the step (a CUDA graph for plain decode steps when graphs are on; token masks run
  /// eagerly) and returns one token per draw.
  StepOutput execute(const Step& step) override;
  std::optional<int64_t> kv_bytes_for_memory_share(double utilization, int max_tokens, int max_seqs) const override;
  /// Multi-LoRA: a device pool of max_loras slots (cuda_lora.h), allocated once; rank <= 128.
  void reserve_loras(int max_loras, int max_lora_rank) override;
  /// Packs the adapter into a pinned host image and copies it into the slot (the adapter miss);
  /// returns when the copy is done. Throws std::invalid_argument without reserve_loras, for a slot
  /// outside the pool, or an adapter that does not fit.
  void load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) override;
  /// Packs `adapter`'s image on the pool's worker thread (DeviceLoraPool::stage); a load_lora of
  /// it then only copies, or waits for the rest of the packing.
  void stage_lora(std::shared_ptr<const LoraAdapter> adapter, double now_s) override;
  /// The adapter's image is packed (DeviceLoraPool::ready; else it is staged if it was not).
  bool lora_ready(const std::shared_ptr<const LoraAdapter>& adapter, double now_s) override;
  /// Copy-on-write runs as block pairs of the largest granularity dividing every run, one launch.
  void copy_slots(std::span<const KvCopy> copies) override;
  /// Pinned host memory mapped into the device (cudaHostAlloc, cudaHostAllocMapped), laid out
  /// [host slot][layer][K|V][n_kv_heads * head_dim] in the dtype.
  std::unique_ptr<HostKvPool> make_host_pool(int64_t n_slots) override;
  /// The GPU gathers (scatters) the runs' slots straight into (out of) the mapped pool: one launch
  /// per run of contiguous host slots, then the stream is synchronized.
  void swap_out(std::span<const KvSwap> runs, HostKvPool& pool) override;
  void swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) override;

  /// execute() without drawing: writes K/V like execute() and returns the fp32 logits of each
  /// distinct drawn row, [n_rows_drawn, vocab] in order of first draw (as CpuBackend::logits).
  std::vector<float> logits(const Step& step);
  std::vector<float> step_logits(const Step& step) override { return logits(step); }

  /// GPU bytes the weights take (2 per parameter; a quantized model's Linears their codes and scales).
  int64_t weight_bytes() const;
  /// KV bytes a `gpu_memory_utilization` share allows (vLLM's rule): utilization × total GPU
  /// memory, minus what is in use now (weights, this backend's buffers, other processes), minus
  /// the activations a step of max_tokens rows and max_samples sampled rows needs; with an FP8 KV
  /// cache, also minus the prefill dequantization scratch of min(slots, max_samples × max_position)
  /// positions (kv_fp8_scratch.h: the returned KV bytes are the arena's share). Throws
  /// std::invalid_argument when nothing is left, naming the figures.
  int64_t kv_bytes_for_utilization(double utilization, int max_tokens, int max_samples) const;
  const CudaBackendOptions& options() const;
  /// Bytes of the last step's one host-to-device copy of its packed input (block-table changes included).
  int64_t last_step_input_bytes() const;
  /// CUDA graphs captured so far (each (batch bucket, context bucket, layout) once, again after a
  /// buffer a graph baked in was reallocated).
  int64_t graph_captures() const;
  /// Verification steps (speculative decoding) run as one-row decode sequences through the decode
  /// graphs so far (verify_rows.h); the others ran eagerly through the prefill attention path.
  int64_t verification_steps_graphed() const;
  /// GPU bytes of the LoRA adapter pool (0 before reserve_loras), and of one slot's adapter.
  int64_t lora_pool_bytes() const;
  int64_t lora_slot_bytes() const;
  /// How the LoRA loads found their packed images (ready, waited for the worker, packed in line).
  cuda::LoraImageCache::Stats lora_image_stats() const;
  /// Times cuBLASLt's heuristic was asked so far, by the products (kernels::Gemm) and by the LoRA
  /// runs (kernels::LoraGemm). Asked inside a step, it is host time the GPU waits for.
  struct CublasLtQueries {
    int64_t products = 0, lora = 0;
  };
  CublasLtQueries cublaslt_queries() const;
  /// How the grouped LoRA kernels launch from the next step on (kernels::LoraSgmvConfig: the
  /// expand's blocks by slot tile or by rows, its register cap, the shrink's chunking, the grid
  /// bound, o_proj's and down_proj's deltas into the residual beside their products); captured
  /// graphs are dropped so the next decode steps capture the new launches. engine_bench --lora
  /// measures the variants side by side with it. Throws std::invalid_argument for
  /// shrink_target_blocks < 1 or grid_blocks_per_sm < 0.
  void set_lora_kernels(const kernels::LoraSgmvConfig& config);

 private:
  friend struct TpAccess;  // tp_backend.cpp: one CudaBackend per rank, driven step by step
  struct Impl;
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace servelab
