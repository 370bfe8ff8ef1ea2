#pragma once
// Synthetic records and steps for the summary/report/compare tests: seeded, so every run of the
// tests sees the same bytes; times with awkward fractions so rounding paths are exercised.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "analysis/summary.h"
#include "loadgen/records/record.h"
#include "loadgen/records/step_record.h"

namespace servelab::analysis::testing_data {

struct SyntheticRun {
  analysis::RunInfo info;
  double ttft_s = 0.05;  ///< typical time to first token
  double tpot_s = 0.02;  ///< typical gap between tokens
};

/// n Poisson-spaced requests of `info.label` at `info.rate` req/s, each 1–12 output tokens with
/// jittered gaps, 1 in 10 with a 2-token chunk, one failed request, one warm-up request.
inline void append_run(const SyntheticRun& run, int n, uint64_t seed, std::vector<RequestRecord>& records,
                       std::vector<StepRecord>& steps) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::exponential_distribution<double> gap(run.info.rate);
  double t = 0.0;
  for (int i = 0; i < n; ++i) {
    t += gap(rng);
    RequestRecord r;
    r.run = run.info.label;
    r.id = static_cast<uint64_t>(i);
    r.arrival_s = t;
    r.sent_s = t + 0.0001 * u(rng);
    r.prompt_tokens = 16 + static_cast<int>(u(rng) * 100);
    r.output_tokens = 1 + static_cast<int>(u(rng) * 12);
    double tok = t + run.ttft_s * (0.5 + u(rng));
    r.first_token_s = tok;
    for (int k = 0; k < r.output_tokens; ++k) {
      if (k > 0 && !(i % 10 == 3 && k == 1)) tok += run.tpot_s * (0.5 + u(rng));
      r.token_times_s.push_back(tok);
    }
    r.end_s = tok + 0.0002;
    if (i == n / 2) {
      r.status = RecordStatus::error;
      r.error = "synthetic failure";
      r.token_times_s.resize(1);
      r.output_tokens = 1;
    }
    if (i == 0) r.warmup = true;
    records.push_back(r);
  }
  // Steps every 10 ms over the run with a KV arena of 4096 slots.
  for (double s = 0.0; s < t; s += 0.01) {
    StepRecord st;
    st.run = run.info.label;
    st.start_s = s;
    st.duration_s = 0.009;
    st.batch_size = 1 + static_cast<int>(u(rng) * 8);
    st.n_tokens = st.batch_size;
    st.kv_capacity = 4096;
    st.kv_stored = 200 + static_cast<int64_t>(u(rng) * 800);
    st.kv_reserved = static_cast<int64_t>(u(rng) * 600);
    st.kv_internal_frag = static_cast<int64_t>(u(rng) * 100);
    st.kv_external_frag = static_cast<int64_t>(u(rng) * 300);
    st.kv_free = st.kv_capacity - st.kv_stored - st.kv_reserved - st.kv_internal_frag - st.kv_external_frag;
    steps.push_back(st);
  }
}

inline analysis::RunInfo run_info(const std::string& batching, const std::string& kv, double rate, int n) {
  analysis::RunInfo info;
  info.batching = batching;
  info.kv = kv;
  info.backend = "sim";
  info.rate = rate;
  info.n_requests = n - 1;  // one is warm-up
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", rate);
  info.label = batching + "-" + kv + "@" + buf;
  info.config = {{"max_num_seqs", 8}};
  return info;
}

}  // namespace servelab::analysis::testing_data
