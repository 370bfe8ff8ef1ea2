#pragma once
// CpuBackend: the real Llama-family forward in fp32 on the CPU. Everything parallel runs on the
// backend's own thread pool. Dense layers run over all of a step's tokens, padding rows
// included, cut by output columns into single-threaded OpenBLAS calls (cpu_gemm.h); Q/K/V and
// gate/up are one job each, with bias, RoPE, the K/V store and SwiGLU done per item. Attention
// runs per (chunk of an entry's tokens, kv head), reading K/V from the arena (cpu_attention.h).
// A step is the same flat input the cuda backend runs (Step, backend.h; built by step_input.h):
// K/V slots come from its slot mapping and block tables (paged) or base slots (naive), so the KV
// manager is asked once per block or sequence, not once per position.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu_gemm.h"
#include "engine/backend/cpu_lora.h"
#include "engine/backend/thread_pool.h"
#include "engine/backend/kv_cache_spec.h"
#include "engine/model/weights.h"

namespace servelab {

/// Settings of the CPU backend. validate() names the bad field.
struct CpuBackendOptions {
  /// Threads of the backend's pool, the caller included. OpenBLAS is set single-threaded
  /// (openblas_set_num_threads(1), process-wide): the pool splits the GEMMs itself.
  /// 0 = std::thread::hardware_concurrency().
  int n_threads = 0;
  /// auto: fp32 K and V. fp8: E4M3 codes with a per-(token, head) fp32 scale, quantized on write
  /// and dequantized on read (KvCacheSpec::of(.., fp8)).
  KvCacheDType kv_cache_dtype = KvCacheDType::auto_dtype;
  /// The dense products' path for a few rows (cpu_gemm.h): our small-rows loop, or plain OpenBLAS
  /// (what scripts/cpu-gemm-bench.sh compares it with).
  CpuGemmPath gemm = CpuGemmPath::tuned;
  void validate() const;
};

/// Arena layout: one buffer [layer][K|V][kv_head][slot][row], a row being head_dim fp32 values
/// (or, with an fp8 cache, head_dim E4M3 codes and their fp32 scale), so that one head's keys
/// for consecutive slots are contiguous (attention streams them) and a run of slots is one
/// memmove per (layer, K|V, kv_head) plane. Quantized weights (ModelWeights::quant) arrive
/// dequantized; with FP8 activations the inputs of every Linear are quantized and dequantized
/// (per tensor, per token or with the static scale) before the product, so the CPU backend is
/// the numerical reference of each format.
class CpuBackend final : public Backend {
 public:
  /// Checks every tensor's size against weights->config; throws std::invalid_argument naming
  /// the tensor and both sizes.
  explicit CpuBackend(std::shared_ptr<const ModelWeights> weights, CpuBackendOptions options = {});
  explicit CpuBackend(ModelWeights&& weights, CpuBackendOptions options = {});
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return weights_->config; }
  /// fp32 K and V: 2 × n_layers × n_kv_heads × head_dim × 4 bytes a slot; fp8: 1 byte an
  /// element plus a 4-byte scale per (layer, K|V, kv head).
  KvCacheSpec kv_cache_spec() const override { return KvCacheSpec::of(config(), DType::f32, 1, kv_cache_dtype_); }
  void init_kv(int64_t n_slots) override;
  BackendCaps caps() const override;
  std::string device_description() const override;
  /// Draw i by sample_token(logits of in.sample_rows[i], masked by its token mask, its sampling
  /// parameters, in.seq_key[i], in.sample_position[i]), or verify_draft when it verifies a draft
  /// with its distribution (in.draft_dist[i] >= 0).
  StepOutput execute(const Step& step) override;
  void copy_slots(std::span<const KvCopy> copies) override;
  /// Plain memory (not zeroed, committed as swaps write it), laid out like the arena:
  /// [layer][K|V][kv_head][host slot][head_dim], so a run is one memcpy per plane.
  std::unique_ptr<HostKvPool> make_host_pool(int64_t n_slots) override;
  void swap_out(std::span<const KvSwap> runs, HostKvPool& pool) override;
  void swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) override;
  /// Any number of slots; adapters run by the plain formula (cpu_lora.h).
  void load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) override;

  /// execute() without drawing: writes K/V like execute() and returns the logits of each
  /// distinct drawn row, [n_rows_drawn, vocab] in order of first draw (n parallel samples of one
  /// row share it). The view stays valid until the next call. Throws std::invalid_argument for a
  /// malformed step (field, value).
  std::span<const float> logits(const Step& step);
  std::vector<float> step_logits(const Step& step) override {
    const std::span<const float> l = logits(step);
    return {l.begin(), l.end()};
  }

  int n_threads() const { return pool_.n_threads(); }
  int64_t n_slots() const { return n_slots_; }
  const ModelWeights& weights() const { return *weights_; }

 private:
  struct Scratch;  // per-step buffers, grown as needed and reused
  using RowBody = std::function<void(int worker, int begin, int end)>;
  /// Validates the step, lays out its rows (embeddings, positions, slots) and each sequence's
  /// context slots from the input's addressing in the scratch.
  void plan_rows(const Step& step);
  /// Runs body over rows [0, n_rows) on the pool, or inline when the work is too small to split.
  void parallel_rows(int n_rows, int64_t cost_per_row, const RowBody& body);
  void ensure_rope(int n_positions);
  void run_layer(int layer);
  void norm_rows(const std::vector<float>& weight);  // xn = rms_norm(x) · weight
  void qkv_rope_store(int layer);                    // q, k, v from xn; K/V into the arena
  void gate_up_silu(int layer);                      // gate = silu(xn·W_gateᵀ) ⊙ (xn·W_upᵀ)
  void attention(int layer);
  static constexpr int kKeys = 0, kValues = 1;  // the `kind` of a KV plane
  uint8_t* plane_bytes(int layer, int kind, int kv_head);
  float* kv_plane(int layer, int kind, int kv_head);  // fp32 cache only
  /// Writes one row (head_dim values) of K or V into `slot`, quantizing for an fp8 cache.
  void store_kv(int layer, int kind, int kv_head, int64_t slot, const float* row);
  void quantize_activations(float* x, int cols, int input, int layer);
  uint8_t* pool_plane(const HostKvPool& pool, int layer, int kind, int kv_head) const;
  void check_pool(const HostKvPool& pool, const char* who) const;
  void check_slot(int64_t slot, const char* what) const;

  std::shared_ptr<const ModelWeights> weights_;
  ThreadPool pool_;
  CpuGemmPath gemm_path_ = CpuGemmPath::tuned;
  KvCacheDType kv_cache_dtype_ = KvCacheDType::auto_dtype;
  int64_t row_bytes_ = 0;         // bytes of one (layer, K|V, kv head) row of a slot
  std::vector<uint8_t> arena_;  // [n_layers][2][n_kv_heads][n_slots][row_bytes_]
  int64_t n_slots_ = 0;
  std::vector<float> rope_cos_, rope_sin_;  // [max_position][head_dim/2]
  std::unique_ptr<Scratch> scratch_;
  CpuLora lora_;
};

}  // namespace servelab
