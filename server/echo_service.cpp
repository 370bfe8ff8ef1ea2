#include "server/echo_service.h"

#include "server/api_error.h"

namespace servelab::server {

EchoService::EchoService(const ModelConfig& model, ServerMetrics& metrics) : model_(model), metrics_(metrics) {}

void EchoService::submit(const Request& request, std::shared_ptr<RequestChannel> channel) {
  if (draining_) {
    metrics_.on_rejected("draining");
    throw ApiError(503, "server_error", "", "draining", "the server is shutting down");
  }
  const int n = std::max(1, request.sampling.n);
  const int m = request.sampling.max_tokens;
  std::vector<std::pair<int, TokenId>> tokens;
  tokens.reserve(static_cast<size_t>(n) * m);
  FinishedRequest f;
  f.request_id = request.id;
  f.reason = FinishReason::length;
  f.n_prompt = static_cast<int>(request.prompt.size());
  f.outputs.resize(n);
  const int vocab = std::max(model_.vocab_size, 1);
  for (int i = 0; i < m; ++i)
    for (int s = 0; s < n; ++s) {
      const TokenId t = static_cast<TokenId>(('a' + (i + s) % 26) % vocab);
      tokens.emplace_back(s, t);
      f.outputs[s].push_back(t);
    }
  f.n_output = m;
  f.first_token_s = f.end_s = 0.0;
  f.token_times_s.assign(m, 0.0);
  FinishedTimings t;
  t.ttft_s = 0.0;
  t.n_prompt = f.n_prompt;
  t.n_output = n * m;
  t.finished_reason = "length";
  metrics_.on_finished(t);
  channel->push(tokens, std::move(f));
}

}  // namespace servelab::server
