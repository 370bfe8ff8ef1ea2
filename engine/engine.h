#pragma once
// Engine: a synchronous state machine. add() queues a request; step(now) schedules a batch,
// allocates KV, runs the backend, samples, stamps times and retires finished requests.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/kv/kv_manager.h"
#include "engine/request.h"
#include "engine/sched/scheduler_config.h"

namespace servelab {

struct EngineConfig {
  SchedulerConfig sched;
  KvConfig kv;
  int64_t kv_cache_bytes = 64ll << 20;  ///< the arena; n_slots = kv_cache_bytes / backend.kv_bytes_per_slot()
  void validate() const;
};

/// One output token of a request, stamped when the step that made it ended.
struct TokenEvent {
  uint64_t request_id = 0;
  int sample_index = 0;
  TokenId token = 0;
  double time_s = 0.0;
};

/// A request that left the engine (done, rejected or aborted) with its timeline.
struct FinishedRequest {
  uint64_t request_id = 0;
  FinishReason reason = FinishReason::none;
  std::string error;               ///< why, for rejected/aborted
  double arrival_s = 0.0;          ///< when add() was called
  double scheduled_s = -1.0;       ///< first admitted to a batch
  double first_token_s = -1.0;
  std::vector<double> token_times_s;   ///< every output token (of sample 0)
  double end_s = -1.0;
  int n_prompt = 0;
  int n_output = 0;
  int preemptions = 0;
  std::vector<std::vector<TokenId>> outputs;  ///< generated tokens, one vector per sample
};

struct StepOutcome {
  double start_s = 0.0;
  double duration_s = 0.0;       ///< measured, or predicted by a sim backend
  int batch_size = 0;            ///< sequences in the batch
  int n_tokens = 0;              ///< tokens computed (padding excluded)
  int n_padding_tokens = 0;
  std::vector<TokenEvent> tokens;
  std::vector<FinishedRequest> finished;
  std::vector<uint64_t> preempted;   ///< request ids preempted in this step
  KvBreakdown kv;                ///< after the step
  int n_waiting = 0;
  int n_running = 0;
  bool idle() const { return batch_size == 0; }
};

class Scheduler;

class Engine {
 public:
  Engine(const EngineConfig& config, std::unique_ptr<Backend> backend);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues a request. A request that can never run (longer than the model's max length, or
  /// larger than the whole arena) is returned at once as rejected, with its reason.
  std::optional<FinishedRequest> add(const Request& request, double now);
  /// One iteration. With nothing runnable it returns an idle outcome (batch_size 0).
  StepOutcome step(double now);
  /// Aborts one request (its client went away): frees its KV now and drops it from the
  /// scheduler's queues. Returns its record (reason aborted), or nullopt when it is not in flight.
  std::optional<FinishedRequest> abort(uint64_t request_id, double now, const std::string& why);
  /// Aborts everything in flight (Ctrl-C); returns them as aborted.
  std::vector<FinishedRequest> abort_all(double now);

  bool has_work() const;
  /// When nothing is runnable now but a policy timer will fire (static max_wait_ms, dynamic
  /// max_queue_delay_ms), the time to call step() again.
  std::optional<double> next_wakeup() const;

  /// Checks the KV manager's invariants over the sequences holding KV (tests call it after
  /// every step); throws std::logic_error.
  void check_invariants() const;

  const Backend& backend() const { return *backend_; }
  const KvManager& kv() const { return *kv_; }
  const EngineConfig& config() const { return config_; }

 private:
  EngineConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace servelab
