#include "engine/sched/scheduler.h"

#include "engine/sched/batch_scheduler.h"
#include "engine/sched/continuous_scheduler.h"

namespace servelab {

std::unique_ptr<Scheduler> make_scheduler(const SchedulerConfig& config, KvManager& kv, SwapSpace* swap) {
  config.validate();
  BatchPolicy policy;
  policy.kind = config.kind;
  switch (config.kind) {
    case BatchingKind::static_batch:
      policy.max_batch = config.batch_size;
      policy.max_wait_s = config.max_wait_ms / 1000.0;
      policy.pad = true;
      policy.size_field = "batch_size";
      return std::make_unique<BatchScheduler>(policy, kv);
    case BatchingKind::dynamic_batch:
      policy.max_batch = config.max_batch_size;
      policy.max_wait_s = config.max_queue_delay_ms / 1000.0;
      policy.pad = false;
      policy.size_field = "max_batch_size";
      return std::make_unique<BatchScheduler>(policy, kv);
    case BatchingKind::continuous:
      return std::make_unique<ContinuousScheduler>(config, kv, swap);
  }
  return nullptr;
}

}  // namespace servelab
