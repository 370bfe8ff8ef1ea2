#include "loadgen/backend_spec.h"

#include <algorithm>

namespace servelab {

BackendSpec backend_spec(const Scenario& sc) {
  BackendSpec spec;
  spec.kind = sc.backend.kind;
  spec.model = sc.model.path.empty() ? sc.model.preset : sc.model.path;
  spec.seed = sc.seed;
  spec.threads = sc.backend.threads;
  if (!sc.backend.sim_device.empty()) spec.sim_device = SimDevice::preset(sc.backend.sim_device);
  spec.sim_device_set = !sc.backend.sim_device.empty();
  spec.sim_profile = sc.backend.sim_profile;
  spec.sim_retarget = sc.backend.sim_retarget;
  spec.sim_cost_scale = sc.backend.sim_cost_scale;
  if (sc.capacity) spec.tensor_parallel = sc.capacity->tensor_parallel;
  if (sc.backend.tensor_parallel > 1) spec.tensor_parallel = sc.backend.tensor_parallel;
  spec.device = sc.backend.device;
  spec.fusion = sc.backend.fusion;
  spec.batch_invariant = sc.backend.batch_invariant;
  spec.cuda_graphs = sc.backend.cuda_graphs;
  spec.mixed_decodes = sc.backend.mixed_decodes;
  spec.all_reduce = sc.backend.all_reduce;
  spec.all_reduce_max_bytes = sc.backend.all_reduce_max_bytes;
  spec.dtype = sc.model.dtype;
  spec.storage_dtype = sc.backend.dtype;
  spec.quantization = sc.backend.quantization;
  spec.kv_cache_dtype = sc.backend.kv_cache_dtype;
  spec.residual_scale = sc.model.residual_scale;
  spec.validate();
  return spec;
}

Quantization strategy_quantization(const Scenario& sc, const StrategySpec& st) {
  return st.quantization.value_or(sc.backend.quantization);
}

KvCacheDType strategy_kv_cache_dtype(const Scenario& sc, const StrategySpec& st) {
  return st.kv_cache_dtype.value_or(sc.backend.kv_cache_dtype);
}

const LoraWorkloadSpec& strategy_lora(const Scenario& sc, const StrategySpec& st) {
  return st.lora ? *st.lora : sc.workload.lora;
}

int max_step_rows(const Scenario& sc, const StrategySpec& st) { return max_step_rows(st.sched, sc.engine.max_model_len); }

int max_step_seqs(const StrategySpec& st) { return max_step_seqs(st.sched); }

int64_t kv_cache_bytes_for(const Scenario& sc, const StrategySpec& st, const Backend& backend) {
  if (sc.engine.gpu_memory_utilization <= 0) return sc.engine.kv_cache_bytes;
  // With adapters, the pool reserve_loras allocates after the arena comes out of the same share.
  const LoraWorkloadSpec& spec = strategy_lora(sc, st);
  const LoraConfig lora = spec.enabled() ? spec.engine_config() : LoraConfig{};
  return kv_bytes_for_gpu_utilization(backend, sc.engine.gpu_memory_utilization, max_step_rows(sc, st), max_step_seqs(st), lora);
}

}  // namespace servelab
