#pragma once
// SimAcceptance: how often the simulator accepts drafts. The sim runs no model, so a draft is
// accepted with a probability the user gives or a real run measured: per_position[j] = P(draft j
// accepted | drafts 0..j-1 accepted), vLLM's per-position view made conditional. The sim backend
// makes a verification draw equal its draft with that probability (SimBackend::set_acceptance),
// so the engine's own acceptance, KV truncation, adaptive k and rate meter run unchanged.
// Optionally requests differ (request_scale): each request draws a scale s of its rejections from
// what a real run's requests measured, so a request that rejected more in the real run has a
// counterpart in the sim that does too (results/sim-validation/request_acceptance.py recovers each
// request's counts from its records; request_spread takes the sampling noise out of them).
#include <cstdint>
#include <string>
#include <vector>

namespace servelab {

struct SimAcceptance {
  /// Conditional acceptance of draft j (index 0 = first draft), each in [0, 1]; 1 to 16 entries.
  std::vector<double> per_position;
  /// Where the figures came from, for reports: "scenario" or the summary.json path.
  std::string source;
  /// Per-request rejection scales, mean 1 (empty: every request alike). A request draws one entry s
  /// (keyed by its seed: SimBackend::set_acceptance) and accepts draft j with probability
  /// at(j, s) = 1 - s (1 - per_position[j]), clamped to [0, 1]; the mean over requests of each
  /// conditional rate stays per_position[j].
  std::vector<double> request_scale;

  /// Throws std::invalid_argument naming the bad entry.
  void validate() const;
  /// The acceptance of draft j; 0 beyond the list (a position the source never drafted).
  double at(int j) const;
  /// The acceptance of draft j for a request of rejection scale s: 1 - s (1 - at(j)) in [0, 1].
  double at(int j, double s) const;
  /// Expected accepted drafts of a k-token draft: p0 + p0 p1 + ... + p0...p(k-1).
  double expected_accepted(int k) const;

  /// From spec_decode counters: num_drafts, num_accepted_tokens_per_pos (A) and, when the run
  /// recorded it, num_draft_tokens_per_pos (D: drafts of more than j tokens). With adaptive k the
  /// drafts differ in length, so A[j] / A[j - 1] undercounts; A[j] / D[j] = p0...pj holds for any
  /// mix of lengths (acceptance depends on the position alone), and pj is its ratio to the one
  /// before. Without D every draft is taken to be of the longest length (fixed k, vLLM's view).
  /// Throws std::invalid_argument when there are no drafts or the counters disagree.
  static SimAcceptance from_counters(int64_t num_drafts, const std::vector<int64_t>& accepted_per_pos,
                                     const std::vector<int64_t>& drafted_per_pos);
  /// From a run's summary.json (`servelab run` output): the spec_decode counters of every run of
  /// strategy `strategy` (its label; empty: every run that speculated) summed. Throws
  /// std::runtime_error naming the file: unreadable, not a summary, or no such runs with drafts.
  static SimAcceptance from_summary(const std::string& path, const std::string& strategy);

  /// One request of a real run (request_acceptance.py's "requests"): tried[j] verifications that
  /// reached draft j (drafts < j accepted), accepted[j] of them that kept it; n_output its tokens.
  struct RequestCounts {
    std::vector<int64_t> tried, accepted;
    int n_output = 0;
  };
  /// The spread of acceptance between requests, measured: each request's rejections over those
  /// expected at the pooled rates (ŝ = O / E) vary by sampling noise and by what differs between
  /// requests. The noise's variance is measured by replaying every request at the pooled rates
  /// (its length, k_max and, when `adaptive`, the engine's adaptive-k rule; `replays` times, seeded),
  /// which also holds the fixed output length (a request of 256 tokens that rejects more verifies
  /// more). What the real ŝ vary by beyond it is the requests' own spread, σ² = var(ŝ) − noise;
  /// the scales are the measured ŝ shrunk towards their mean by sqrt(σ² / var(ŝ)) (none of the
  /// spread left when var(ŝ) <= noise: every scale 1), floored at 0 and rescaled to mean 1.
  struct Spread {
    std::vector<double> scale;  ///< one a request, mean 1
    double observed_var = 0.0;  ///< var(ŝ) of the requests given
    double noise_var = 0.0;     ///< var(ŝ) of the replays at the pooled rates
  };
  static Spread request_spread(const std::vector<RequestCounts>& requests, int k_max, bool adaptive,
                               int replays = 16, uint64_t seed = 0);
  /// Reads request_acceptance.py's JSON (k_max and every request's counts). Throws
  /// std::runtime_error naming the file and the bad entry.
  static std::vector<RequestCounts> read_requests(const std::string& path, int& k_max);
  /// Sets request_scale from a requests file (read_requests, request_spread under adaptive k as
  /// `adaptive` says). Throws std::runtime_error naming the file.
  void add_request_spread(const std::string& path, bool adaptive);
};

}  // namespace servelab
