#pragma once
// Hardware the sim backend prices steps on: datasheet presets (H100 SXM, H200, A100 80GB, L40S,
// and the 2-core CPU this repo is developed on) for the roofline, and the KV budget a device
// leaves after weights and activations (vLLM's gpu_memory_utilization rule).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/config.h"

namespace servelab {

/// A device as the roofline sees it. validate() names the bad field.
struct SimDevice {
  std::string name = "h100";
  double peak_flops = 989e12;          ///< dense matmul FLOP/s at the weight dtype (bf16 on GPUs)
  /// Dense FP8 matmul FLOP/s (FP8 tensor cores: Hopper, Ada); 0 when the device has none, and
  /// W8A8 products then run at peak_flops (weight-only FP8, as vLLM's Marlin fallback).
  double fp8_peak_flops = 1979e12;
  double mem_bw_bytes_s = 3.35e12;     ///< device memory bandwidth
  double memory_bytes = 80e9;          ///< device memory (datasheet GB = 1e9 bytes)
  /// GPU-to-GPU bandwidth for tensor parallelism, the datasheet's total (both directions), e.g.
  /// NVLink 4 = 900 GB/s; an all-reduce moves data at half of it in each direction.
  double interconnect_bytes_s = 900e9;
  double allreduce_latency_s = 8e-6;   ///< fixed cost of one all-reduce (launch + sync)
  double step_overhead_s = 2e-4;       ///< fixed per step: launches, scheduling, sampling
  int kv_dtype_bytes = 2;              ///< bytes per K/V element (bf16 by default)
  int weight_dtype_bytes = 2;          ///< bytes per weight element read each step
  double host_link_bytes_s = 25e9;     ///< swap traffic (device <-> host), e.g. PCIe
  /// Multi-LoRA beyond the adapters' FLOPs and bytes (engine/backend/sim_lora.h): the cuda
  /// backend's LoRA kernels, fitted by least squares (fit_lora) to `servelab profile --lora-rank
  /// 16` of llama2-7b on an H200 (`PROFILE_LORA=1 bash scripts/gpu-lora-check.sh`, 2026-12-02,
  /// b905ca84, the decodes up to 16 rows with the adapters inside the gemv:
  /// results/gpu/lora/2026-12-02-h200-profile-lora-b905ca8, docs/lora.md "On the sim"). The GPU
  /// presets take these; cpu-2core none. Seconds per layer.
  /// Decode rows running an adapter: piecewise linear in their count through (0, 0) and the
  /// knots (rows ascending; up to 16 rows the adapters ride in the products' gemv, from 17 the
  /// launches beside each product cost more a row on an H200, so no single per-row figure fits),
  /// rows past the last knot at the last knot's rate per row; with no knots (lora_decode_knots
  /// 0), lora_decode_row_s per row.
  static constexpr int kLoraDecodeKnots = 8;
  int lora_decode_knots = 5;
  std::array<double, kLoraDecodeKnots> lora_decode_knot_rows{1, 8, 16, 32, 64};
  std::array<double, kLoraDecodeKnots> lora_decode_knot_s{4.80e-6, 5.24e-6, 11.21e-6, 25.68e-6, 51.75e-6};
  double lora_decode_row_s = 0.809e-6;
  /// Adapted prefill rows: per step that has any, per run of them on one adapter after the first
  /// (consecutive entries: sim_lora.h; the cuda backend's GEMMs take up to 8 runs, the rest go to
  /// the grouped kernels) and per such row.
  double lora_prefill_layer_s = 27.58e-6;
  double lora_prefill_run_s = 38.52e-6;
  double lora_prefill_row_s = 0.0932e-6;
  /// The share of mem_bw_bytes_s at which a step reads its adapters' weights (fitted as above).
  double lora_bandwidth_share = 1.0;
  /// A load of an adapter whose packed 16-bit image the backend does not keep (its first load, or
  /// after the image was evicted or the adapter object dropped) packs its fp32 weights first (the
  /// cuda backend starts that on its worker as the request reaches the engine, and the load, a
  /// step later at most, waits for it): fp32 bytes per second. engine_bench's `lora_pack_ms` on
  /// the H200 host, 7.9 ms for llama2-7b rank 16's 160 MB (results/gpu/lora/2026-12-01-h200-misses);
  /// lora-compare's steps with a load cost 11-13 ms more than the same prefill without one (pack
  /// and the 1.45 ms copy). 0: nothing to pack (cpu-2core: the cpu backend reads fp32).
  double lora_pack_bytes_s = 20e9;
  /// Reading an adapter a request names into host memory (an in-process workload draws its fp32
  /// weights when a request first names it, or again after dropping it beyond max_cpu_loras;
  /// serve's HTTP session reads it from its folder): fp32 bytes per second, one adapter at a time,
  /// before the request reaches the engine (it delays that request, not the engine's steps). From
  /// lora-compare on the H200 host (results/gpu/lora/2026-12-01-h200-lora-compare: at 24 req/s over
  /// 64 adapters, 33 pauses between steps, 1.00 s, about 30 ms a 160 MB llama2-7b rank-16 adapter,
  /// when the draw still ran on the engine's thread); cpu-2core: random_lora's 0.065 s for the same
  /// adapter on this repo's 2-core VM. 0: free.
  double lora_host_load_bytes_s = 5.3e9;
  void validate() const;

  /// Datasheet figures: "h100" (= "h100-sxm"), "h200", "a100-80gb", "l40s", and "cpu-2core"
  /// (fp32 on 2 AVX2 cores, as the cpu backend computes). Throws listing the known names.
  static SimDevice preset(const std::string& name);
  static std::vector<std::string> preset_names();
};

/// Where a device's memory goes when a model is served on it (per GPU under tensor parallelism).
struct KvBudget {
  double usable_bytes = 0.0;       ///< memory_bytes × gpu_memory_utilization
  double weight_bytes = 0.0;       ///< the model's parameters / tensor_parallel at weight_dtype_bytes
  double activation_bytes = 0.0;   ///< peak activations of a max_num_batched_tokens step + logits + runtime
  int64_t kv_cache_bytes = 0;      ///< what is left for the KV arena (of one GPU); <= 0: does not fit
  int64_t kv_bytes_per_token = 0;  ///< K and V of one token on one GPU (its share of the KV heads)
  int64_t n_token_slots() const { return kv_bytes_per_token > 0 ? kv_cache_bytes / kv_bytes_per_token : 0; }
};

/// vLLM's rule: KV = memory × gpu_memory_utilization − weights − peak activations. Activations
/// are those of one step of `max_num_batched_tokens` rows: the residual stream, Q/K/V and attention
/// output (4·d), the SwiGLU gate and up (2·ff / tp) at the weight dtype, plus fp32 logits of up to
/// `max_num_seqs` sampled rows, plus 1 GiB of runtime (CUDA context, graphs, allocator slack).
/// Throws std::invalid_argument on utilization outside (0, 1] or tensor_parallel < 1 or one
/// that does not divide the model's KV heads.
KvBudget kv_budget(const ModelConfig& model, const SimDevice& device, int tensor_parallel,
                   double gpu_memory_utilization, int max_num_batched_tokens, int max_num_seqs);

}  // namespace servelab
