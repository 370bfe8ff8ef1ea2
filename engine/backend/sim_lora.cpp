#include "engine/backend/sim_lora.h"

#include <algorithm>

#include "engine/lora/lora_adapter.h"

namespace servelab {

int64_t lora_params(const ModelConfig& model, const LoraAdapter* adapter) {
  if (!adapter) return 0;
  int64_t per_layer = 0;
  for (int t = 0; t < kLoraTargets; ++t)
    if (adapter->targets[size_t(t)])
      per_layer += int64_t(adapter->rank) * (lora_in_dim(model, LoraTarget(t)) + lora_out_dim(model, LoraTarget(t)));
  return per_layer * model.n_layers;
}

double lora_step_seconds(const SimDevice& device, const ModelConfig& model, const Step& step,
                         std::span<const SimLoraSlot> slots) {
  const kernels::StepInput& in = step.in;
  const size_t n_seqs = in.context_lens.size();
  const bool per_seq = !step.seq_lora_slot.empty();
  if (!per_seq && in.lora_slot.empty()) return 0.0;
  auto params_of = [&](int slot) -> int64_t {
    return slot >= 0 && size_t(slot) < slots.size() ? slots[size_t(slot)].params : 0;
  };
  // Distinct adapters of the decode and the prefill rows (a step holds a few: a linear scan).
  std::vector<int> decode_slots, prefill_slots, all_slots;
  auto note = [](std::vector<int>& v, int s) {
    if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
  };
  int64_t decode_rows = 0, prefill_rows = 0;
  double flops = 0.0;
  for (size_t e = 0; e < n_seqs; ++e) {
    const int first = in.query_start[e];
    const int rows = in.query_start[e + 1] - first;
    const int slot = per_seq ? (e < step.seq_lora_slot.size() ? step.seq_lora_slot[e] : -1)
                             : (size_t(first) < in.lora_slot.size() ? in.lora_slot[size_t(first)] : -1);
    const int64_t params = params_of(slot);
    if (params <= 0) continue;
    flops += 2.0 * static_cast<double>(rows) * static_cast<double>(params);  // x·Aᵀ then ·Bᵀ, every layer
    note(all_slots, slot);
    if (rows == 1) {
      decode_rows += 1;
      note(decode_slots, slot);
    } else {
      prefill_rows += rows;
      note(prefill_slots, slot);
    }
  }
  if (all_slots.empty()) return 0.0;
  double bytes = 0.0;
  for (const int s : all_slots) bytes += static_cast<double>(params_of(s)) * device.weight_dtype_bytes;
  const double layers = static_cast<double>(model.n_layers);
  double kernels_s = layers * device.lora_decode_row_s * static_cast<double>(decode_rows);
  if (prefill_rows > 0)
    kernels_s += layers * (device.lora_prefill_layer_s +
                           device.lora_prefill_adapter_s * static_cast<double>(prefill_slots.size()) +
                           device.lora_prefill_row_s * static_cast<double>(prefill_rows));
  const double read_s = bytes / (device.lora_bandwidth_share * device.mem_bw_bytes_s);
  const double compute_s = flops / device.peak_flops;
  return std::max(kernels_s + read_s, compute_s);
}

double lora_load_seconds(const SimDevice& device, int64_t params) {
  return static_cast<double>(std::max<int64_t>(0, params)) * device.weight_dtype_bytes / device.host_link_bytes_s;
}

}  // namespace servelab
