#include "engine/spec/draft_warm_up.h"

#include <algorithm>

namespace servelab {

std::vector<DraftWarmRound> draft_warm_up_plan(const WarmShapes& shapes, const StepLimits& limits) {
  std::vector<DraftWarmRound> plan;
  const int longest = limits.max_context - 1;  // a sequence drafting k = 1 holds at most max_context - 1 tokens
  if (longest < 2 || limits.max_seqs < 1) return plan;
  // Eager catch-up steps: each row bucket once, then each draw count once.
  for (int rows : shapes.step_rows) {
    if (rows < 2 || rows > limits.max_rows) continue;
    DraftWarmRound r;
    for (int left = rows; left > 0;) {
      // No piece of 1 row after a longer one: a step whose every sequence computes one row is a
      // decode step (graphed), so split as evenly as the longest allows.
      const int n = (left + longest - 1) / longest;
      const int piece = (left + n - 1) / n;
      r.lengths.push_back(piece);
      left -= piece;
    }
    if (static_cast<int>(r.lengths.size()) > limits.max_seqs) continue;
    plan.push_back(std::move(r));
  }
  std::vector<int> draws{1};
  for (int s : shapes.step_rows)
    if (s > 1 && s <= limits.max_seqs && 2 * s <= limits.max_rows) draws.push_back(s);
  if (!shapes.step_rows.empty())
    for (int s : draws) plan.push_back(DraftWarmRound{std::vector<int>(size_t(s), 2), 1, false});
  // Decode graphs: two one-row steps at each (batch, context) bucket, k = 3 (its third draft
  // step replays the graph). Largest batch first and sampled first: the buffers a graph bakes in
  // (sampled rows, the draws' distributions) reach their size before anything is captured.
  const int k = 3;
  if (longest < k) return plan;
  for (const bool sampled : {true, false})
    for (int context : shapes.decode_contexts) {
      const int reach = std::min(context, longest);  // the context of the last one-row step
      const int length = std::max(2, reach - (k - 1));
      for (auto b = shapes.decode_batches.rbegin(); b != shapes.decode_batches.rend(); ++b) {
        const int n = std::min(*b, limits.max_seqs);
        if (n < 1) continue;  // a catch-up past max_rows runs in chunks (ModelProposer::catch_up_in_chunks)
        DraftWarmRound r{std::vector<int>(size_t(n), 2), k, sampled};
        r.lengths[0] = length;
        plan.push_back(std::move(r));
      }
    }
  return plan;
}

}  // namespace servelab
