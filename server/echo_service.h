#pragma once
// EchoService: a fast responder with no model. Every request is answered at once with exactly
// max_tokens tokens (ids 'a'..'z' in turn, so byte tokenizers show letters). It exists to measure
// the HTTP load generator (scripts/bench-http-driver.sh): the server side costs next to nothing.
#include "server/service.h"

namespace servelab::server {

class EchoService final : public GenerationService {
 public:
  EchoService(const ModelConfig& model, ServerMetrics& metrics);
  void submit(const Request& request, std::shared_ptr<RequestChannel> channel) override;
  void abort(uint64_t) override {}
  void start_draining() override { draining_ = true; }
  int n_in_flight() const override { return 0; }
  const ModelConfig& model() const override { return model_; }
  int max_model_len() const override { return model_.max_position; }

 private:
  ModelConfig model_;
  ServerMetrics& metrics_;
  std::atomic<bool> draining_{false};
};

}  // namespace servelab::server
