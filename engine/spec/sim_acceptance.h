#pragma once
// SimAcceptance: how often the simulator accepts drafts. The sim runs no model, so a draft is
// accepted with a probability the user gives or a real run measured: per_position[j] = P(draft j
// accepted | drafts 0..j-1 accepted), vLLM's per-position view made conditional. The sim backend
// makes a verification draw equal its draft with that probability (SimBackend::set_acceptance),
// so the engine's own acceptance, KV truncation, adaptive k and rate meter run unchanged.
#include <cstdint>
#include <string>
#include <vector>

namespace servelab {

struct SimAcceptance {
  /// Conditional acceptance of draft j (index 0 = first draft), each in [0, 1]; 1 to 16 entries.
  std::vector<double> per_position;
  /// Where the figures came from, for reports: "scenario" or the summary.json path.
  std::string source;

  /// Throws std::invalid_argument naming the bad entry.
  void validate() const;
  /// The acceptance of draft j; 0 beyond the list (a position the source never drafted).
  double at(int j) const;
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
};

}  // namespace servelab
