#include "engine/spec/draft_rounds.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "engine/splitmix64.h"

namespace servelab {

void DraftRoundOptions::validate() const {
  auto positive = [](const std::vector<int>& v, const char* name) {
    for (int x : v)
      if (x < 1) throw std::invalid_argument(std::string("draft rounds: ") + name + " must be >= 1 (got " + std::to_string(x) + ")");
  };
  positive(batch_sizes, "batch sizes");
  positive(ks, "k");
  positive(prompt_lens, "prompt lengths");
  if (ks.empty()) throw std::invalid_argument("draft rounds: give at least one k");
  if (context < 2) throw std::invalid_argument("draft rounds: context must be >= 2 (got " + std::to_string(context) + ")");
  if (warmup < 0) throw std::invalid_argument("draft rounds: warmup must be >= 0 (got " + std::to_string(warmup) + ")");
  if (repeats < 1) throw std::invalid_argument("draft rounds: repeats must be >= 1 (got " + std::to_string(repeats) + ")");
}

namespace draft_rounds_detail {

/// B running sequences of `len` seeded tokens, greedy, as the engine holds them before drafting
/// (every token but the last computed). Ids start at `first_id`.
std::vector<std::unique_ptr<Sequence>> round_sequences(int n, int len, int vocab, uint64_t first_id, uint64_t seed) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  uint64_t state = seed ^ (first_id * 0x9e3779b97f4a7c15ull);
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = s->request_id = first_id + uint64_t(i);
    for (int t = 0; t < len; ++t) s->tokens.push_back(TokenId(2 + splitmix64_next(state) % uint64_t(std::max(1, vocab - 2))));
    s->n_prompt = len - 1;
    s->n_computed = len - 1;
    s->status = SeqStatus::running;
    s->sampling.temperature = 0.0f;
    seqs.push_back(std::move(s));
  }
  return seqs;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace draft_rounds_detail

std::vector<DraftRound> profile_draft_rounds(ModelProposer& proposer, int vocab, const DraftRoundOptions& o,
                                             const std::function<void(const std::string&)>& progress) {
  using draft_rounds_detail::median_of;
  using draft_rounds_detail::round_sequences;
  o.validate();
  std::vector<DraftRound> out;
  uint64_t next_id = 1;
  // One propose_batch over `seqs` at k each; returns its wall seconds and leaves the drafts in drafts[i].
  std::vector<std::vector<TokenId>> drafts;
  auto round = [&](std::vector<std::unique_ptr<Sequence>>& seqs, int k) {
    drafts.assign(seqs.size(), {});
    std::vector<DraftTask> tasks;
    for (size_t i = 0; i < seqs.size(); ++i) tasks.push_back({seqs[i].get(), k, &drafts[i], nullptr});
    const auto t0 = std::chrono::steady_clock::now();
    proposer.propose_batch(tasks);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto forget = [&](std::vector<std::unique_ptr<Sequence>>& seqs) {
    for (const auto& s : seqs) proposer.forget(s->id);
  };
  auto report = [&](const DraftRound& r, const char* what) {
    if (!progress) return;
    char line[160];
    std::snprintf(line, sizeof line, "draft round (%s): %d seqs, k %d, context %d, catch-up %d rows a seq: %.3f ms%s", what,
                  r.n_seqs, r.k, r.context, r.catchup_rows, r.round_s * 1e3,
                  r.first_use_s > 0 ? (" (first use " + std::to_string(r.first_use_s * 1e3) + " ms)").c_str() : "");
    progress(line);
  };
  for (int k : o.ks)
    for (int b : o.batch_sizes) {
      auto seqs = round_sequences(b, o.context, vocab, next_id, o.seed);
      next_id += uint64_t(b);
      round(seqs, k);  // the copies' first round: their prompts caught up, not timed here
      std::vector<double> times;
      int context_sum = 0;
      for (int r = 0; r < o.warmup + o.repeats; ++r) {
        // The target accepted every draft and drew a bonus token: the next round catches up 2 rows.
        for (size_t i = 0; i < seqs.size(); ++i) {
          Sequence& s = *seqs[i];
          s.tokens.insert(s.tokens.end(), drafts[i].begin(), drafts[i].end());
          s.tokens.push_back(TokenId(2 + (s.tokens.back() + 1) % std::max(1, vocab - 2)));
          s.n_computed = s.n_tokens() - 1;
        }
        const int context = seqs.front()->n_tokens();
        const double t = round(seqs, k);
        if (r >= o.warmup) {
          times.push_back(t);
          context_sum += context;
        }
      }
      forget(seqs);
      DraftRound d{b, k, context_sum / o.repeats, 2, median_of(times), 0.0};
      out.push_back(d);
      report(d, "steady");
    }
  const int k = *std::max_element(o.ks.begin(), o.ks.end());
  for (int p : o.prompt_lens)
    for (int b : o.batch_sizes) {
      if (int64_t(b) * (p + 1) > o.max_prompt_rows) continue;
      std::vector<double> times;
      double first_use = 0.0;
      for (int r = 0; r < o.warmup + o.repeats; ++r) {  // fresh sequences each time: a first round
        auto seqs = round_sequences(b, p + 1, vocab, next_id, o.seed);
        next_id += uint64_t(b);
        const double t = round(seqs, k);
        if (r == 0) first_use = t;
        if (r >= o.warmup) times.push_back(t);
        forget(seqs);
      }
      DraftRound d{b, k, p + 1, p + 1, median_of(times), o.warmup > 0 ? first_use : 0.0};
      out.push_back(d);
      report(d, "first");
    }
  return out;
}

}  // namespace servelab
