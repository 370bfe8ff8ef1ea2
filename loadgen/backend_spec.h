#pragma once
// From a scenario to the backend it names: the one place that turns `model:`, `backend:` and
// `engine:` into a BackendSpec and a KV budget, shared by `servelab run` (sweep), the capacity
// probe and validate-sim (PointRunner) and `servelab serve --scenario`.
#include <cstdint>

#include "engine/backend/backend.h"
#include "engine/backend/make_backend.h"
#include "loadgen/scenario.h"

namespace servelab {

/// The BackendSpec `scenario` describes: kind, model (folder or preset), seed, CPU threads, sim
/// device and profile, the cuda settings (device, fusion, batch_invariant, cuda_graphs, backend.dtype as
/// storage_dtype, model.dtype as dtype) and,
/// for the sim, capacity.tensor_parallel. Validated (throws std::invalid_argument naming the field).
BackendSpec backend_spec(const Scenario& scenario);

/// The weight format and KV element type `strategy` runs with: its own `quantization:` /
/// `kv_cache_dtype:`, else the scenario's backend defaults (the --quantization / --kv-cache-dtype flags).
Quantization strategy_quantization(const Scenario& scenario, const StrategySpec& strategy);
KvCacheDType strategy_kv_cache_dtype(const Scenario& scenario, const StrategySpec& strategy);
/// The LoRA adapters `strategy` runs: its own `lora:`, else workload.lora (not enabled() = none).
const LoraWorkloadSpec& strategy_lora(const Scenario& scenario, const StrategySpec& strategy);

/// max_step_rows / max_step_seqs (engine/sched/scheduler_config.h) of a scenario's strategy: the
/// largest step, which sizes the activations gpu_memory_utilization leaves room for.
int max_step_rows(const Scenario& scenario, const StrategySpec& strategy);
int max_step_seqs(const StrategySpec& strategy);

/// The KV arena in bytes a strategy runs with on `backend`: engine.kv_cache_bytes, or, when
/// engine.gpu_memory_utilization is set (cuda), the share of the GPU's memory left after the
/// weights and a step of this strategy's activations (vLLM's rule). Throws
/// std::invalid_argument when nothing is left for KV.
int64_t kv_cache_bytes_for(const Scenario& scenario, const StrategySpec& strategy, const Backend& backend);

}  // namespace servelab
