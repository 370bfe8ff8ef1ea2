#pragma once
// Matrix products y[M, N] = x[M, K] · w[N, K]ᵀ with bf16 or fp16 operands, fp32 accumulation,
// and a bf16/fp16 or fp32 output (fp32 for logits): cuBLASLt, and for M ≤ 16 (decode) a skinny
// tensor-core kernel that streams the weights once (gemv.cu).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "kernels/attention.h"
#include "kernels/gemv_plan.h"
#include "kernels/lamport_push.h"
#include "kernels/lora_delta.h"
#include "kernels/ops.h"

namespace servelab::kernels {

/// Whether the fp16 variants of the kernels were compiled (SERVELAB_KERNELS_FP16, on by default):
/// without them every kernel throws for ScalarType::f16.
bool fp16_kernels_built();

/// Whether run_gemv() takes this product: bf16 or fp16 (when built), 1 <= m <= gemv::kMaxM (16),
/// n >= 1, k a multiple of 8, x and w 16-byte aligned.
bool gemv_supported(ScalarType t, const void* x, const void* w, int m, int n, int k);

/// Blocks of gemv's kernel resident per multiprocessor of the current device (for gemv::make_plan).
int gemv_blocks_per_sm();

/// Skinny product y = x · wᵀ (+ y when accumulate) for gemv_supported shapes: x [m, k], w [n, k],
/// y [m, n] (float when out_fp32). plan = gemv::make_plan(n, k, ...). Each weight is read once;
/// fp32 accumulation in a fixed order (deterministic, and a row's result does not depend on m).
/// When plan.splits > 1 it needs partials [plan.partial_floats()] and counters [plan.row_blocks]
/// zeroed ints (left zeroed), used by one stream at a time; twice both for m > gemv::kMaxRows (8:
/// the second column tile's after the first's). Throws std::invalid_argument otherwise.
/// push (active): each bf16 output value also goes into this rank's slot of the peers' lamport
/// buffers (lamport_push.h), for CustomAllReduce::run_add_rms_norm(pushed) after it.
/// lora (delta.xa set): the grid's first lora->shrink.blocks blocks run the grouped shrink of x
/// (kernels/lora_sgmv.h lora_gemv_shrink) and each output also gets its row's LoRA delta from the
/// finished xa rows (kernels/lora_delta.h) in the epilogue, before rounding (gemv_lora.cuh).
/// 16-bit output only.
void run_gemv(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k, bool out_fp32, bool accumulate,
              const gemv::Plan& plan, float* partials, int32_t* counters, cudaStream_t stream,
              const LamportPush& push = {}, const LoraInGemv* lora = nullptr);

/// Fused gate|up product and SiLU·mul for gemv_supported shapes (with n = 2 * ffn): w [2 * ffn, k]
/// is the merged [gate; up] projection, act [m, ffn] = silu(x · gateᵀ) * (x · upᵀ), each half
/// rounded to the storage type before the activation, so act has the bits of run_gemv into a
/// [m, 2 * ffn] buffer followed by silu_mul. plan = gemv::make_plan(2 * ffn, k, ...); partials and
/// counters as run_gemv. Throws std::invalid_argument otherwise.
void run_gemv_silu_mul(ScalarType t, const void* x, const void* w, void* act, int m, int ffn, int k,
                       const gemv::Plan& plan, float* partials, int32_t* counters, cudaStream_t stream,
                       const LoraInGemv* lora = nullptr);

/// The q|k|v product with rope_kv_write's work in its epilogue (gemv_rope_kv.cuh): y = a.qkv
/// [a.n_tokens, q|k|v width] gets q with bias and RoPE; k (bias, RoPE) and v (bias) go to the
/// caches at a.slot_mapping only, as rope_kv_write leaves them: the same bits as run_gemv into
/// a.qkv followed by rope_kv_write. w [q|k|v width, k]; plan = gemv::make_plan(width, k, ...);
/// partials and counters as run_gemv. Needs gemv_rope_kv_supported; throws std::invalid_argument otherwise.
bool gemv_rope_kv_supported(const QkvArgs& a, const void* x, const void* w, int k);
/// The epilogue's view of a (quant_gemv's QuantGemvArgs::rope takes it too).
gemv::RopeKv gemv_rope_kv_params(const QkvArgs& a);
void run_gemv_rope_kv(const QkvArgs& a, const void* x, const void* w, int k, const gemv::Plan& plan, float* partials,
                      int32_t* counters, cudaStream_t stream, const LoraInGemv* lora = nullptr);

/// Owns a cuBLASLt handle and workspace, and caches the algorithm chosen per shape.
/// batch_invariant: split-K is disallowed and one algorithm, chosen for a canonical row count,
/// serves every M, so a row's result does not depend on how many rows share the product.
/// use_gemv: products with m <= gemv_rows() (8: one column tile of x) that gemv_supported accepts,
/// and those with a LoRA epilogue up to gemv::kMaxM (16), go to run_gemv() instead of
/// cuBLASLt (never in batch-invariant mode, which keeps its one algorithm). gemv_split_k = false
/// keeps the products whose gemv plan splits K on cuBLASLt: measured on an H100 (kernel_bench,
/// llama2-7b shapes at M = 1 and 8), gemv beats cuBLASLt by 3-5% where it needs no split (gate|up,
/// LM head) and trails it by 6-17% where it splits (QKV, O, down) with its first loop. With the
/// L2::256B hint, no K split for llama2-7b's shapes and PDL it beats cuBLASLt over the engine's
/// batch-1 step (5.135 against 5.671 ms, kernels/README.md), so the cuda backend takes gemv for every product of
/// <= 8 rows. From 9 to 16 rows (two column tiles) gemv's product is slower than cuBLASLt's on an
/// H200 (llama2-7b's batch-16 decode step 5.81 against 5.53 ms), but with the adapters' deltas in
/// its epilogue it beats cuBLASLt's product with the LoRA launches beside it (5.86-5.96 against
/// 6.32-6.45 ms: docs/lora.md), so only LoRA products take it there. One stream at a time per Gemm
/// (the workspaces are shared by its calls).
class Gemm {
 public:
  explicit Gemm(bool batch_invariant = false, size_t workspace_bytes = 32u << 20, bool use_gemv = true,
                bool gemv_split_k = true);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// y = x · wᵀ (+ y when accumulate). out_fp32 selects a float output.
  void run(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k, bool out_fp32,
           cudaStream_t stream, bool accumulate = false);
  /// run() of a bf16 product that gemv takes, its rows also pushed into the peers' lamport
  /// buffers (run_gemv's push); false, nothing enqueued, when gemv would not take it.
  bool run_pushed(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k, const LamportPush& push,
                  cudaStream_t stream);

  /// Turns the skinny path on or off (kernel_bench compares both in one run).
  void set_use_gemv(bool on) { use_gemv_ = on; }
  /// Whether products whose gemv plan splits K take gemv (true) or cuBLASLt (false).
  void set_gemv_split_k(bool on) { gemv_split_k_ = on; }
  /// Waves of resident blocks below which gemv's plan splits K (gemv::make_plan's `waves`; 2 by
  /// default). 0: only products of fewer row blocks than half the multiprocessors are split (on an
  /// H100 none of llama2-7b's: the fastest there, measured in results/gpu/README.md).
  void set_gemv_waves(int waves) { gemv_waves_ = waves < 0 ? 0 : waves; }
  /// gemv's loop variant (gemv::Plan::variant), the same bits in each.
  void set_gemv_variant(int variant) { gemv_variant_ = variant & 3; }
  /// Rows up to which products without a LoRA epilogue take gemv (gemv::kMaxRows by default;
  /// clamped to [0, gemv::kMaxM]: the tests and kernel_bench run the two column tiles through run()).
  void set_gemv_rows(int rows) { gemv_rows_ = rows < 0 ? 0 : rows > gemv::kMaxM ? gemv::kMaxM : rows; }
  int gemv_rows() const { return gemv_rows_; }
  /// Whether run() with these arguments takes the skinny path; lora: a product with a LoRA
  /// epilogue (run_gemv_lora, run_gate_up_silu and run_qkv_rope_kv with one), up to gemv::kMaxM rows.
  bool uses_gemv(ScalarType t, const void* x, const void* w, int m, int n, int k, bool lora = false) const;
  /// Whether run_gate_up_silu() takes this product: gemv takes the [m, 2 * ffn] product (with
  /// this Gemm's split-K setting; lora as uses_gemv).
  bool fuses_gate_up_silu(ScalarType t, const void* x, const void* w, int m, int ffn, int k, bool lora = false) const;
  /// act[m, ffn] = silu(x · gateᵀ) * (x · upᵀ) for the merged w = [gate; up] (run_gemv_silu_mul)
  /// when fuses_gate_up_silu(); throws std::logic_error otherwise (run() then silu_mul instead).
  void run_gate_up_silu(ScalarType t, const void* x, const void* w, void* act, int m, int ffn, int k,
                        cudaStream_t stream, const LoraInGemv* lora = nullptr);
  /// run() with a LoRA epilogue (run_gemv's lora) where run() would take gemv; false, nothing
  /// enqueued, otherwise.
  bool run_gemv_lora(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k,
                     const LoraInGemv& lora, cudaStream_t stream);
  /// The q|k|v product with RoPE and the K/V write in gemv's epilogue (run_gemv_rope_kv) where
  /// run() would take gemv for it and gemv_rope_kv_supported; false, nothing enqueued, otherwise
  /// (the caller then runs the product and rope_kv_write).
  bool run_qkv_rope_kv(const QkvArgs& a, const void* x, const void* w, int k, cudaStream_t stream,
                       const LoraInGemv* lora = nullptr);
  /// SMs left out of the cuBLASLt products run() launches from now on (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET
  /// set to the device's count less this): room beside a product for work on another stream
  /// (the cuda backend's LoRA side stream, LoraSgmvConfig::product_sm_reserve). Each target has
  /// its own algorithms. 0: every SM (no target set). gemv's products are unaffected.
  void set_sm_reserve(int sms) { sm_reserve_ = sms < 0 ? 0 : sms; }
  int sm_reserve() const { return sm_reserve_; }
  /// The decomposition run() gives gemv for this shape.
  gemv::Plan gemv_plan(int n, int k) const;

  /// Asks cuBLASLt now for the algorithm of every row bucket (gemm_rows.h) up to max_m rows of an
  /// [m, n] x [n, k] product, so that no step later pays the heuristic's host time (the engine's
  /// reserve_steps calls it for its largest step). Products gemv takes are skipped.
  void prepare(ScalarType t, int max_m, int n, int k, bool out_fp32);
  /// Times cuBLASLt's heuristic was asked (each row bucket and shape once; again only for an M its
  /// bucket's algorithm does not take).
  int64_t heuristic_queries() const { return heuristic_queries_; }

  /// Autotuning (off by default; never in batch-invariant mode): prepare() asks cuBLASLt for up to
  /// kAutotuneCandidates algorithms for each row bucket of at most max_m rows, times each on
  /// scratch operands of the shape (interleaved rounds, each candidate's fastest round) and keeps
  /// the fastest instead of the heuristic's first. Skipped for a shape whose scratch does not fit in
  /// the free device memory. 0 turns it off.
  void set_autotune(int max_m) { autotune_max_m_ = max_m < 0 ? 0 : max_m; }
  struct AutotuneStats {
    int64_t tuned = 0;     ///< buckets timed
    int64_t changed = 0;   ///< of those, where the fastest was not the heuristic's first
    int64_t skipped = 0;   ///< buckets left on the heuristic's first for want of memory
    double gain_sum = 0;   ///< sum over tuned buckets of (first's time / fastest's time)
  };
  const AutotuneStats& autotune_stats() const { return autotune_stats_; }
  static constexpr int kAutotuneCandidates = 8;

  /// Partial sums and row-block counters a gemv plan's K splits may use (its bound), for each of
  /// the two column tiles of x (the workspace holds twice this: run_gemv's m > 8).
  static constexpr int64_t kGemvPartialFloats = int64_t(1) << 20;
  static constexpr int kGemvCounters = 8192;

 private:
  /// The plan gemv runs this product with, where run() takes gemv for it (uses_gemv, and a K
  /// split only with gemv_split_k); none otherwise.
  std::optional<gemv::Plan> taken_gemv_plan(ScalarType t, const void* x, const void* w, int m, int n, int k,
                                            bool lora = false) const;
  /// run()'s gemv path (with push, run_pushed's): false, nothing enqueued, where run() takes cuBLASLt.
  bool run_if_gemv(ScalarType t, const void* x, const void* w, void* y, int m, int n, int k, bool out_fp32,
                   bool accumulate, const LamportPush& push, cudaStream_t stream);
  cublasLtMatmulAlgo_t algo_for(ScalarType t, int m, int n, int k, bool out_fp32, bool accumulate);
  /// cuBLASLt's heuristic choice for exactly m rows (cached); with tune (from prepare) and
  /// autotuning on for m rows, the fastest of its candidates.
  cublasLtMatmulAlgo_t heuristic(ScalarType t, int m, int n, int k, bool out_fp32, bool tune = false);
  /// Index of the fastest of `algos` on scratch [m, k] x [n, k] operands; -1 when they do not fit.
  int fastest(ScalarType t, int m, int n, int k, bool out_fp32, const cublasLtMatmulAlgo_t* algos, int count,
              double* first_over_best);
  /// Whether `algo` runs an m-row product within the workspace.
  bool accepts(const cublasLtMatmulAlgo_t& algo, ScalarType t, int m, int n, int k, bool out_fp32) const;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool batch_invariant_ = false;
  bool use_gemv_ = true;
  bool gemv_split_k_ = true;
  int gemv_waves_ = 2;
  int gemv_variant_ = 0;
  int gemv_rows_ = gemv::kMaxRows;
  int n_sms_ = 0;
  int sm_reserve_ = 0;
  /// The SM count target of cuBLASLt's products now (0: none set).
  int sm_target() const { return sm_reserve_ > 0 && sm_reserve_ < n_sms_ ? n_sms_ - sm_reserve_ : 0; }
  float* gemv_partials_ = nullptr;
  int32_t* gemv_counters_ = nullptr;
  std::map<std::tuple<int, int, int, int, bool, bool, int>, cublasLtMatmulAlgo_t> algos_;       // per actual M
  std::map<std::tuple<int, int, int, int, bool, bool, int>, cublasLtMatmulAlgo_t> heuristics_;  // per queried M
  int64_t heuristic_queries_ = 0;
  int autotune_max_m_ = 0;
  AutotuneStats autotune_stats_;
};

}  // namespace servelab::kernels
