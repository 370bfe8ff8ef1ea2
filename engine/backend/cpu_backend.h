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
#include "engine/backend/cpu_lora.h"
#include "engine/backend/thread_pool.h"
#include "engine/model/weights.h"

namespace servelab {

/// Settings of the CPU backend. validate() names the bad field.
struct CpuBackendOptions {
  /// Threads of the backend's pool, the caller included. OpenBLAS is set single-threaded
  /// (openblas_set_num_threads(1), process-wide): the pool splits the GEMMs itself.
  /// 0 = std::thread::hardware_concurrency().
  int n_threads = 0;
  void validate() const;
};

/// Arena layout: one fp32 buffer [layer][K|V][kv_head][slot][head_dim], so that one head's keys
/// for consecutive slots are contiguous (attention streams them) and a run of slots is one
/// memmove per (layer, K|V, kv_head) plane.
class CpuBackend final : public Backend {
 public:
  /// Checks every tensor's size against weights->config; throws std::invalid_argument naming
  /// the tensor and both sizes.
  explicit CpuBackend(std::shared_ptr<const ModelWeights> weights, CpuBackendOptions options = {});
  explicit CpuBackend(ModelWeights&& weights, CpuBackendOptions options = {});
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return weights_->config; }
  /// fp32 K and V: 2 × n_layers × n_kv_heads × head_dim × 4 bytes a slot.
  KvCacheSpec kv_cache_spec() const override { return KvCacheSpec::of(config(), DType::f32); }
  void init_kv(int64_t n_slots) override;
  BackendCaps caps() const override;
  std::string device_description() const override;
  /// Draw i by sample_token(logits of in.sample_rows[i], masked by its token mask, its sampling
  /// parameters, in.seq_key[i], in.sample_position[i]).
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
  float* kv_plane(int layer, int kind, int kv_head);
  float* pool_plane(const HostKvPool& pool, int layer, int kind, int kv_head) const;
  void check_pool(const HostKvPool& pool, const char* who) const;
  void check_slot(int64_t slot, const char* what) const;

  std::shared_ptr<const ModelWeights> weights_;
  ThreadPool pool_;
  std::vector<float> arena_;  // [n_layers][2][n_kv_heads][n_slots][head_dim]
  int64_t n_slots_ = 0;
  std::vector<float> rope_cos_, rope_sin_;  // [max_position][head_dim/2]
  std::unique_ptr<Scratch> scratch_;
  CpuLora lora_;
};

}  // namespace servelab
