#pragma once
// TpCudaBackend: the cuda backend over N GPUs with tensor parallelism (issue 13). Plain C++
// header (pimpl): it compiles without the CUDA toolkit; the implementation is built with the cuda
// backend and needs NCCL (SERVELAB_HAVE_NCCL) for N > 1.
//
// Rank r runs on device r, on its own host thread, as a CudaBackend (the same forward, the same
// CUDA graphs) holding its shard of the weights (TpPlan, tp_plan.h: column-parallel Q/K/V and
// gate|up, row-parallel O and down, KV heads split, vocabulary-parallel LM head) and the KV of its
// KV heads. A step: the calling thread builds the step input and the block-table diff once
// (CudaBackend::Impl::plan_step); every rank thread packs it, uploads it to its GPU in one copy
// and runs the step, with an all-reduce (sum, in the dtype) of the O and down products — our
// one-shot kernel over CUDA peer memory for small messages, NCCL for large ones (options
// tp_all_reduce, tp_all_reduce_max_bytes; docs/tensor-parallel.md) — and an NCCL all-gather of the
// LM head's logits, so every rank samples the same tokens from the same logits;
// rank 0's tokens are returned. The engine's one scheduler and KV manager decide once per step for
// all ranks; slots mean the same on every rank (copy-on-write and swap run on every rank).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"

namespace servelab {

/// One all-reduce message size and what it cost on every rank.
struct AllReduceTiming {
  int64_t bytes = 0;     ///< message size (16-bit elements × 2)
  double seconds = 0.0;  ///< median over the repeats of the slowest rank's time
  double bus_gb_s = 0.0; ///< bus bandwidth, NCCL's convention: bytes / seconds × 2(N−1)/N / 1e9
};

/// True when servelab was built with NCCL (tensor_parallel > 1 possible on the cuda backend).
bool tp_nccl_available();

class TpCudaBackend final : public Backend {
 public:
  /// Preset (or any config) with random weights: rank r draws only its shard, each element from
  /// the whole tensor's stream, so the ranks hold exactly CudaBackend::random(config, seed).
  /// Throws std::invalid_argument when N does not divide the model (TpPlan::make) or fewer than
  /// N devices are visible, std::runtime_error without NCCL.
  static std::unique_ptr<TpCudaBackend> random(const ModelConfig& config, uint64_t seed, int n_ranks,
                                               CudaBackendOptions options = {});
  /// A Hugging Face folder: each rank copies only its shard from the safetensors.
  static std::unique_ptr<TpCudaBackend> load(const std::string& dir, int n_ranks, CudaBackendOptions options = {});
  ~TpCudaBackend() override;

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override;
  /// One rank's share: 2 × n_layers × (n_kv_heads / N) × head_dim × 2 bytes. KV budgets
  /// (kv_cache_bytes, gpu_memory_utilization) are per GPU, as in vLLM.
  KvCacheSpec kv_cache_spec() const override;
  /// The same n_slots on every rank.
  void init_kv(int64_t n_slots) override;
  /// Every rank reserves for the same limits (CudaBackend::reserve_steps).
  void reserve_steps(const StepLimits& limits) override;
  std::vector<int> decode_row_buckets() const override;  ///< every rank's (they run the same steps)
  BackendCaps caps() const override;  ///< tensor_parallel N
  /// LoRA is one-GPU only (caps().lora false): both throw std::invalid_argument saying so.
  void reserve_loras(int max_loras, int max_lora_rank) override;
  void load_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) override;
  std::string device_description() const override;
  StepOutput execute(const Step& step) override;
  /// The smallest of the ranks' KV budgets (kv_bytes_for_utilization).
  std::optional<int64_t> kv_bytes_for_memory_share(double utilization, int max_tokens, int max_seqs) const override;
  /// (bytes, seconds) of one all-reduce per size (all_reduce_timings, 20 repeats).
  std::vector<std::pair<int64_t, double>> time_all_reduce(const std::vector<int64_t>& message_bytes) override;
  void copy_slots(std::span<const KvCopy> copies) override;
  /// One pinned, device-mapped, portable allocation of N × n_slots × kv_bytes_per_slot() bytes,
  /// rank-major: rank r's region (n_slots slots in CudaBackend's pool layout) follows rank r-1's.
  /// The pool's bytes_per_slot() is N × one rank's slot.
  std::unique_ptr<HostKvPool> make_host_pool(int64_t n_slots) override;
  /// Every rank copies its KV heads of each run to (or from) its own region of the pool.
  void swap_out(std::span<const KvSwap> runs, HostKvPool& pool) override;
  void swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) override;

  /// execute() without drawing: the whole fp32 logits of each distinct drawn row (rank 0's
  /// all-gathered copy), as CudaBackend::logits.
  std::vector<float> logits(const Step& step);
  std::vector<float> step_logits(const Step& step) override { return logits(step); }

  /// GPU bytes the weights take on the rank holding the most.
  int64_t weight_bytes() const;
  /// The smallest of the ranks' KV budgets (CudaBackend::kv_bytes_for_utilization on each).
  int64_t kv_bytes_for_utilization(double utilization, int max_tokens, int max_samples) const;
  /// Times `repeats` in-place sum all-reduces (of the dtype, through the backend's all_reduce
  /// path: ours or NCCL by size) of each size on all ranks (after 3 untimed), on each rank's stream
  /// with CUDA events. Eagerly (ours takes its barrier variant there, as eager steps do), or
  /// (in_graph) as one CUDA graph of the `repeats` calls per rank, replayed (the median of 5
  /// replays after one untimed): how a decode step runs them, lamport up to 1 MiB. Outside any step.
  std::vector<AllReduceTiming> all_reduce_timings(std::span<const int64_t> message_bytes, int repeats = 20,
                                                  bool in_graph = false);
  /// The backend's all-reduce set-up: "ours (peer memory) up to 4194304 bytes, NCCL above", "NCCL".
  std::string all_reduce_path() const;
  /// "NCCL 2.28.3, 2 ranks on devices 0..1" for reports.
  std::string describe() const;

 private:
  struct Impl;
  explicit TpCudaBackend(std::unique_ptr<Impl> impl);
  /// The ranks, their shards (weights_fn: the rank's DeviceWeights from the plan) and communicators.
  static std::unique_ptr<Impl> build(const ModelConfig& config, int n_ranks, const CudaBackendOptions& o,
                                     const void* weights_fn);
  std::unique_ptr<Impl> impl_;
};

}  // namespace servelab
