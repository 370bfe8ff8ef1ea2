#pragma once
// What the engine hands back about a request: each output token as it is stamped, and the
// request with its timeline when it leaves. Plain types, so a request source or a driver for an
// external server (loadgen/http) uses them without linking the engine.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"

namespace servelab {

/// One output token of a request, stamped when the step that made it ended.
struct TokenEvent {
  uint64_t request_id = 0;
  int sample_index = 0;
  TokenId token = 0;
  double time_s = 0.0;
};

/// A request that left the engine (done, rejected or aborted) with its timeline.
///
/// Parallel samples (n > 1): every sample draws its first token from the one prefill (as vLLM
/// does), so they share first_token_s; after that they may run at different speeds (preemption)
/// and lengths (EOS). The record describes the request as one sample set, the way a client that
/// waits for all n samples sees it (vLLM reports n > 1 requests per request, finished with
/// their last sample):
///  - token_times_s[k]: when every sample had produced its k-th token or had already finished;
///    so it is non-decreasing, token_times_s[0] == first_token_s, and its last entry is when the
///    last sample finished (== end_s for a finished request).
///  - n_output: tokens of the longest sample (== token_times_s.size()); per-sample tokens are in
///    `outputs`. TPOT = (end_s − first_token_s) / (n_output − 1) is then the slowest sample's pace.
/// With n == 1 these are simply the one sequence's times.
struct FinishedRequest {
  uint64_t request_id = 0;
  FinishReason reason = FinishReason::none;  ///< sample 0's, for n > 1
  std::string error;               ///< why, for rejected/aborted
  double arrival_s = 0.0;          ///< the arrival handed to add()
  double scheduled_s = -1.0;       ///< start of the first step that computed any of it; -1 if none
  double first_token_s = -1.0;
  std::vector<double> token_times_s;   ///< the request's k-th token times (see above)
  double end_s = -1.0;
  int n_prompt = 0;
  int n_output = 0;                ///< tokens of the longest sample
  int preemptions = 0;             ///< over all samples
  std::vector<std::vector<TokenId>> outputs;  ///< generated tokens, one vector per sample
};

}  // namespace servelab
