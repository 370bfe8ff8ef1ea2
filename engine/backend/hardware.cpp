#include "engine/backend/hardware.h"

#include <stdexcept>
#include <string>

#include "engine/require.h"

namespace servelab {

void SimDevice::validate() const {
  const std::string p = "sim device " + name + ": ";
  require(peak_flops > 0, p + "peak_flops", "> 0", peak_flops);
  require(mem_bw_bytes_s > 0, p + "mem_bw_bytes_s", "> 0", mem_bw_bytes_s);
  require(memory_bytes > 0, p + "memory_bytes", "> 0", memory_bytes);
  require(interconnect_bytes_s > 0, p + "interconnect_bytes_s", "> 0", interconnect_bytes_s);
  require(allreduce_latency_s >= 0, p + "allreduce_latency_s", ">= 0", allreduce_latency_s);
  require(step_overhead_s >= 0, p + "step_overhead_s", ">= 0", step_overhead_s);
  require(kv_dtype_bytes == 1 || kv_dtype_bytes == 2 || kv_dtype_bytes == 4, p + "kv_dtype_bytes", "1, 2 or 4",
          kv_dtype_bytes);
  require(weight_dtype_bytes == 1 || weight_dtype_bytes == 2 || weight_dtype_bytes == 4,
          p + "weight_dtype_bytes", "1, 2 or 4", weight_dtype_bytes);
  require(host_link_bytes_s > 0, p + "host_link_bytes_s", "> 0", host_link_bytes_s);
  require(lora_decode_knots >= 0 && lora_decode_knots <= kLoraDecodeKnots, p + "lora_decode_knots",
          "in [0, " + std::to_string(kLoraDecodeKnots) + "]", lora_decode_knots);
  for (int i = 0; i < lora_decode_knots; ++i) {
    const double prev = i > 0 ? lora_decode_knot_rows[size_t(i - 1)] : 0.0;
    require(lora_decode_knot_rows[size_t(i)] > prev, p + "lora_decode_knot_rows[" + std::to_string(i) + "]",
            "> the knot before (rows ascending from 0)", lora_decode_knot_rows[size_t(i)]);
    require(lora_decode_knot_s[size_t(i)] >= 0, p + "lora_decode_knot_s[" + std::to_string(i) + "]", ">= 0",
            lora_decode_knot_s[size_t(i)]);
  }
  require(lora_decode_row_s >= 0, p + "lora_decode_row_s", ">= 0", lora_decode_row_s);
  require(lora_prefill_layer_s >= 0, p + "lora_prefill_layer_s", ">= 0", lora_prefill_layer_s);
  require(lora_prefill_run_s >= 0, p + "lora_prefill_run_s", ">= 0", lora_prefill_run_s);
  require(lora_prefill_row_s >= 0, p + "lora_prefill_row_s", ">= 0", lora_prefill_row_s);
  require(lora_bandwidth_share > 0 && lora_bandwidth_share <= 1, p + "lora_bandwidth_share", "in (0, 1]",
          lora_bandwidth_share);
  require(lora_pack_bytes_s >= 0, p + "lora_pack_bytes_s", ">= 0", lora_pack_bytes_s);
  require(lora_host_load_bytes_s >= 0, p + "lora_host_load_bytes_s", ">= 0", lora_host_load_bytes_s);
}

SimDevice SimDevice::preset(const std::string& name) {
  SimDevice d;
  d.name = name;
  if (name == "h100" || name == "h100-sxm") {
    // H100 SXM5 datasheet: 989 TFLOP/s dense BF16, 3.35 TB/s HBM3, 80 GB, NVLink 4 900 GB/s,
    // PCIe Gen5 (~25 GB/s achieved for pinned host copies).
    return d;
  }
  if (name == "h200") {  // H200 SXM: same Hopper compute, 4.8 TB/s HBM3e, 141 GB, NVLink 900 GB/s
    d.mem_bw_bytes_s = 4.8e12;
    d.memory_bytes = 141e9;
    return d;
  }
  if (name == "a100-80gb") {  // A100 SXM 80GB: 312 TFLOP/s dense BF16, 2,039 GB/s HBM2e, NVLink 3 600 GB/s
    d.peak_flops = 312e12;
    d.fp8_peak_flops = 0;  // Ampere: no FP8 tensor cores
    d.mem_bw_bytes_s = 2.039e12;
    d.memory_bytes = 80e9;
    d.interconnect_bytes_s = 600e9;
    d.host_link_bytes_s = 20e9;  // PCIe Gen4
    return d;
  }
  if (name == "l40s") {  // L40S: 362 TFLOP/s dense BF16, 864 GB/s GDDR6, 48 GB, no NVLink (PCIe Gen4 x16 64 GB/s)
    d.peak_flops = 362e12;
    d.fp8_peak_flops = 733e12;  // Ada FP8 tensor cores, dense
    d.mem_bw_bytes_s = 864e9;
    d.memory_bytes = 48e9;
    d.interconnect_bytes_s = 64e9;
    d.allreduce_latency_s = 20e-6;
    d.host_link_bytes_s = 20e9;
    return d;
  }
  if (name == "cpu-2core") {  // 2 AVX2 cores in fp32 (as the cpu backend computes), DDR4
    d.peak_flops = 100e9;
    d.fp8_peak_flops = 0;
    d.mem_bw_bytes_s = 15e9;
    d.memory_bytes = 16e9;
    d.interconnect_bytes_s = 10e9;
    d.step_overhead_s = 5e-5;
    d.kv_dtype_bytes = 4;
    d.weight_dtype_bytes = 4;
    d.host_link_bytes_s = 10e9;
    // The cpu backend runs adapters by the plain formula: their FLOPs and bytes, nothing fitted.
    d.lora_decode_row_s = d.lora_prefill_layer_s = d.lora_prefill_run_s = d.lora_prefill_row_s = 0.0;
    d.lora_decode_knots = 0;
    d.lora_bandwidth_share = 1.0;
    d.lora_pack_bytes_s = 0.0;
    d.lora_host_load_bytes_s = 2.5e9;
    return d;
  }
  std::string names;
  for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown sim device '" + name + "' (known: " + names + ")");
}

std::vector<std::string> SimDevice::preset_names() {
  return {"h100", "h100-sxm", "h200", "a100-80gb", "l40s", "cpu-2core"};
}

KvBudget kv_budget(const ModelConfig& model, const SimDevice& device, int tensor_parallel,
                   double gpu_memory_utilization, int max_num_batched_tokens, int max_num_seqs) {
  require(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1, "gpu_memory_utilization", "in (0, 1]",
          gpu_memory_utilization);
  require(tensor_parallel >= 1, "tensor_parallel", ">= 1", tensor_parallel);
  require(model.n_kv_heads % tensor_parallel == 0, "tensor_parallel",
          "a divisor of the model's " + std::to_string(model.n_kv_heads) + " KV heads", tensor_parallel);
  require(max_num_batched_tokens >= 1, "max_num_batched_tokens", ">= 1", max_num_batched_tokens);
  require(max_num_seqs >= 1, "max_num_seqs", ">= 1", max_num_seqs);
  const double tp = tensor_parallel, w = device.weight_dtype_bytes;
  KvBudget b;
  b.usable_bytes = device.memory_bytes * gpu_memory_utilization;
  b.weight_bytes = static_cast<double>(model.n_params()) * w / tp;
  const double row_bytes = (4.0 * model.hidden_size + 2.0 * model.intermediate_size / tp) * w;
  b.activation_bytes = max_num_batched_tokens * row_bytes + 4.0 * max_num_seqs * model.vocab_size + double(1ll << 30);
  b.kv_bytes_per_token = 2ll * model.n_layers * (model.kv_dim() / tensor_parallel) * device.kv_dtype_bytes;
  b.kv_cache_bytes = static_cast<int64_t>(b.usable_bytes - b.weight_bytes - b.activation_bytes);
  return b;
}

}  // namespace servelab
