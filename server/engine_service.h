#pragma once
// EngineService: one thread owns the Engine (STYLE item 4). HTTP sessions submit requests to its
// inbox and abort them through it; it steps the engine and pushes each step's tokens to the
// requests' channels. A bounded waiting queue turns overload into 429s instead of memory growth.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "server/service.h"

namespace servelab::server {

struct EngineServiceOptions {
  int max_waiting = 256;      ///< requests admitted beyond one batch (max_num_seqs or batch size); more get 429
  bool pace_predicted = false;///< sim backend: sleep each step's predicted duration (real-time emulation)
  void validate() const;
};

class EngineService final : public GenerationService {
 public:
  EngineService(std::unique_ptr<Engine> engine, ServerMetrics& metrics, EngineServiceOptions options);
  /// Aborts what is still in flight and joins the engine thread.
  ~EngineService() override;

  void submit(const Request& request, std::shared_ptr<RequestChannel> channel) override;
  void abort(uint64_t request_id) override;
  /// Stop string matched: the request ends as "stop" rather than "abort".
  void finish_early(uint64_t request_id) override;
  void start_draining() override;
  int n_in_flight() const override { return n_in_flight_.load(); }
  const ModelConfig& model() const override { return model_; }
  int max_model_len() const override { return max_model_len_; }
  /// Idle engine: no request left, invariants hold, every KV slot free. Throws std::logic_error.
  void check_idle_clean() const override;

 private:
  struct Pending {
    Request request;
    std::shared_ptr<RequestChannel> channel;
  };
  struct Live {
    std::shared_ptr<RequestChannel> channel;
    double submitted_s = 0.0;
    bool stopped_early = false;
    std::string lora;  ///< the request's adapter ("" = the base model), for /metrics' per-adapter counters
  };
  void loop();
  /// The adapters of the requests running and waiting, to /metrics (with LoRA on; engine_mu_ held).
  void publish_lora_requests();
  void deliver(const StepOutcome& out);
  void finish(FinishedRequest f, std::span<const std::pair<int, TokenId>> last_tokens = {});
  double now() const;

  std::unique_ptr<Engine> engine_;
  ServerMetrics& metrics_;
  EngineServiceOptions options_;
  ModelConfig model_;
  int max_model_len_ = 0;
  int batch_slots_ = 1;  ///< requests one batch runs
  std::chrono::steady_clock::time_point t0_;

  mutable std::mutex mu_;       ///< guards the inbox, aborts and flags
  std::condition_variable cv_;
  std::vector<Pending> inbox_;
  std::vector<std::pair<uint64_t, bool>> aborts_;  ///< (id, stopped early)
  bool stop_ = false;
  bool draining_ = false;
  std::atomic<int> n_in_flight_{0};
  std::atomic<int> n_running_{0};

  mutable std::mutex engine_mu_;  ///< held by the engine thread while it works (check_idle_clean)
  std::unordered_map<uint64_t, Live> live_;  ///< engine thread only
  std::thread thread_;
};

}  // namespace servelab::server
