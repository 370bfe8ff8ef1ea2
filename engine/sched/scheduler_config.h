#pragma once
// Batching-policy settings, as a scenario's strategy gives them.
#include <functional>
#include <string>

namespace servelab {

struct Sequence;

enum class BatchingKind { static_batch, dynamic_batch, continuous };
enum class PreemptMode { recompute, swap };
const char* to_string(BatchingKind b);  ///< "static", "dynamic", "continuous"
const char* to_string(PreemptMode p);   ///< "recompute", "swap"

/// Knobs of all three policies; each policy reads its own. validate() names the bad field.
struct SchedulerConfig {
  BatchingKind kind = BatchingKind::continuous;
  // static
  int batch_size = 8;
  double max_wait_ms = 100.0;
  // dynamic
  int max_batch_size = 16;
  double max_queue_delay_ms = 5.0;
  // continuous
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  bool chunked_prefill = false;
  PreemptMode preempt = PreemptMode::recompute;
  /// Most distinct LoRA adapters among running and swapped sequences (0 = no bound): the engine
  /// sets it from EngineConfig::lora. The admission rule is in continuous_scheduler.h.
  int max_loras = 0;
  /// Whether a waiting sequence's adapter can be had now without stalling a step (resident, or
  /// its load only a copy: Backend::lora_ready); set by the engine, null = always. The continuous
  /// scheduler admits others past a sequence whose adapter is not ready, for at most
  /// adapter_ready_wait_s after its arrival and never into an otherwise empty step.
  std::function<bool(const Sequence&, double now)> adapter_ready;
  /// How long past its arrival a sequence may wait for its adapter to be prepared (a pack of
  /// llama2-7b's rank-16 adapter takes ~8 ms on the H200's host) before it is admitted anyway:
  /// the engine sets it from LoraConfig::admit_wait_s.
  double adapter_ready_wait_s = 0.5;
  void validate() const;
};

/// The most rows (tokens) one step of the policy runs: continuous: max_num_batched_tokens; static
/// and dynamic: a full batch of max_model_len prompts. Sizes the activations a backend reserves.
int max_step_rows(const SchedulerConfig& sched, int max_model_len);
/// The most sequences one step of the policy holds: max_num_seqs, or the batch size.
int max_step_seqs(const SchedulerConfig& sched);

}  // namespace servelab
