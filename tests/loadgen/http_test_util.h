#pragma once
// The scripted HTTP server (tests/loadgen_http/scripted_server.h) and a plan of requests for it,
// for the tests that drive it through a scenario's plan (capacity, bench, structured output).
#include "loadgen/plan.h"
#include "tests/loadgen_http/scripted_server.h"

namespace servelab::http_load::test {

/// n requests all due at t = 0 (prompt 4 tokens, 8 output tokens).
inline Plan burst_plan(int n, int output_tokens = 8) {
  Plan p;
  for (int i = 0; i < n; ++i) {
    PlannedRequest r;
    r.id = i;
    r.intended_s = 0.0;
    r.prompt = {5, 6, 7, 8};
    r.output_tokens = output_tokens;
    p.requests.push_back(r);
  }
  return p;
}

}  // namespace servelab::http_load::test
