#include "engine/sched/scheduler_config.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/require.h"

namespace servelab {

const char* to_string(BatchingKind b) {
  switch (b) {
    case BatchingKind::static_batch: return "static";
    case BatchingKind::dynamic_batch: return "dynamic";
    case BatchingKind::continuous: return "continuous";
  }
  return "?";
}

const char* to_string(PreemptMode p) { return p == PreemptMode::recompute ? "recompute" : "swap"; }

int max_step_rows(const SchedulerConfig& sched, int max_model_len) {
  const int len = std::max(1, max_model_len);
  switch (sched.kind) {
    case BatchingKind::continuous: return sched.max_num_batched_tokens;
    case BatchingKind::static_batch: return sched.batch_size * len;
    case BatchingKind::dynamic_batch: return sched.max_batch_size * len;
  }
  return len;
}

int max_step_seqs(const SchedulerConfig& sched) {
  switch (sched.kind) {
    case BatchingKind::continuous: return sched.max_num_seqs;
    case BatchingKind::static_batch: return sched.batch_size;
    case BatchingKind::dynamic_batch: return sched.max_batch_size;
  }
  return 1;
}

void SchedulerConfig::validate() const {
  switch (kind) {
    case BatchingKind::static_batch:
      require(batch_size >= 1, "batch_size", ">= 1", batch_size);
      require(max_wait_ms >= 0, "max_wait_ms", ">= 0", max_wait_ms);
      break;
    case BatchingKind::dynamic_batch:
      require(max_batch_size >= 1, "max_batch_size", ">= 1", max_batch_size);
      require(max_queue_delay_ms >= 0, "max_queue_delay_ms", ">= 0", max_queue_delay_ms);
      break;
    case BatchingKind::continuous:
      require(max_num_seqs >= 1, "max_num_seqs", ">= 1", max_num_seqs);
      require(max_num_batched_tokens >= 1, "max_num_batched_tokens", ">= 1", max_num_batched_tokens);
      // Every running sequence decodes one token per step (vLLM rejects this too).
      require(max_num_batched_tokens >= max_num_seqs, "max_num_batched_tokens",
              ">= max_num_seqs (" + std::to_string(max_num_seqs) + "): each running sequence needs a token per step",
              max_num_batched_tokens);
      break;
  }
}

}  // namespace servelab
