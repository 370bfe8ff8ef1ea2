#pragma once
// Multi-LoRA settings, as vLLM names them (`--enable-lora`, `--max-loras`, `--max-cpu-loras`,
// `--max-lora-rank`). validate() names the bad field.
#include <stdexcept>
#include <string>

namespace servelab {

struct LoraConfig {
  bool enabled = false;
  /// Adapters resident in the backend at once: the device slots, and the most distinct adapters
  /// the scheduler lets into the running set (so into one step). vLLM's default 1.
  int max_loras = 1;
  /// Adapters kept in host memory (the rest are read again from their folder when asked for);
  /// 0 = max_loras, as vLLM. Must be >= max_loras.
  int max_cpu_loras = 0;
  /// Largest rank an adapter may have (vLLM's default 16).
  int max_lora_rank = 16;
  /// A step's prompts of one adapter next to each other (Engine::step): the cuda backend pays its
  /// tensor-core GEMMs per contiguous run of one adapter's rows. Off: the scheduler's order.
  bool group_prompts = true;
  /// A request whose adapter is neither resident nor packed for its load yet (the cuda backend
  /// packs a new adapter's host image on a worker, ~8 ms for llama2-7b rank 16) lets others go
  /// first, so the step that loads it pays the copy alone (continuous batching;
  /// continuous_scheduler.h). Off: admitted in order, its step waiting for the packing.
  bool admit_when_packed = true;
  /// How long past its arrival such a request may be passed over before it is admitted anyway (its
  /// step then waits for the rest of the packing). Seconds, >= 0.
  double admit_wait_s = 0.5;

  int cpu_loras() const { return max_cpu_loras > 0 ? max_cpu_loras : max_loras; }
  void validate() const {
    if (max_loras < 1 || max_loras > 4096)
      throw std::invalid_argument("lora.max_loras must be in [1, 4096] (got " + std::to_string(max_loras) + ")");
    if (max_cpu_loras < 0 || (max_cpu_loras > 0 && max_cpu_loras < max_loras))
      throw std::invalid_argument("lora.max_cpu_loras must be 0 or >= max_loras = " + std::to_string(max_loras) +
                                  " (got " + std::to_string(max_cpu_loras) + ")");
    if (!(admit_wait_s >= 0 && admit_wait_s <= 3600))
      throw std::invalid_argument("lora.admit_wait_s must be in [0, 3600] seconds (got " + std::to_string(admit_wait_s) +
                                  ")");
    if (max_lora_rank < 1 || max_lora_rank > 1024)
      throw std::invalid_argument("lora.max_lora_rank must be in [1, 1024] (got " + std::to_string(max_lora_rank) + ")");
  }
};

}  // namespace servelab
