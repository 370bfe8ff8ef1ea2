// workload.copied_spans: a share of the prompts reproduce a document (document, request, the
// document's first 4 ids), seeded and reproducible, with edits that repeat earlier bigrams.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loadgen/copied_spans.h"
#include "loadgen/plan.h"
#include "tests/loadgen/loadgen_test_util.h"

namespace servelab {
namespace copied_spans_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace testing_util;

Scenario copy_scenario(double fraction, double edit_rate, int seed = 3) {
  return load_yaml("seed: " + std::to_string(seed) +
                   "\n"
                   "backend: {kind: sim}\n"
                   "strategies: [{batching: continuous}]\n"
                   "workload:\n"
                   "  rates: [4]\n"
                   "  n_requests: 2000\n"
                   "  prompt_tokens: {dist: uniform, min: 40, max: 300}\n"
                   "  output_tokens: 8\n"
                   "  copied_spans: {fraction: " + std::to_string(fraction) + ", span_tokens: 128, edit_rate: " +
                   std::to_string(edit_rate) + "}\n");
}

TEST(CopiedSpans, AShareOfPromptsEndWithTheirDocumentsFirstIds) {
  const Plan plan = make_plan(copy_scenario(0.4, 0.0), 4);
  int copied = 0;
  for (const PlannedRequest& r : plan.requests) {
    const auto& p = r.prompt;
    const int n_doc = std::min(128, int(p.size()) - 5);
    const bool ends_with_start = std::equal(p.end() - 4, p.end(), p.begin());
    EXPECT_EQ(ends_with_start, r.copied_span) << "request " << r.id;
    if (!r.copied_span) continue;
    ++copied;
    // Without edits the document has no repeated bigram (ids from 2046, 128 of them: rare) and
    // the request between the document and the lead is random.
    std::set<std::pair<TokenId, TokenId>> bigrams;
    for (int i = 0; i + 1 < n_doc; ++i) bigrams.insert({p[size_t(i)], p[size_t(i) + 1]});
    EXPECT_GE(int(bigrams.size()), n_doc - 2);
  }
  EXPECT_NEAR(copied / 2000.0, 0.4, 0.03);
  EXPECT_EQ(summarize(plan).n_copied_spans, copied);
  EXPECT_NE(format_plan_summary(plan, "s").find("copied    " + std::to_string(copied) + " requests"), std::string::npos);
  EXPECT_EQ(plan_to_json(plan)["requests"][0].contains("copied_span"), plan.requests[0].copied_span);
  // Seeded: the same scenario gives the same prompts; another seed, others.
  EXPECT_EQ(make_plan(copy_scenario(0.4, 0.0), 4).requests[7].prompt, plan.requests[7].prompt);
  EXPECT_NE(make_plan(copy_scenario(0.4, 0.0, 4), 4).requests[7].prompt, plan.requests[7].prompt);
}

TEST(CopiedSpans, EditsRepeatEarlierBigramsAtTheirRate) {
  for (const double rate : {0.02, 0.1}) {
    const Plan plan = make_plan(copy_scenario(1.0, rate), 4);
    int64_t repeats = 0, positions = 0;
    for (const PlannedRequest& r : plan.requests) {
      const auto& p = r.prompt;
      const int n_doc = std::min(128, int(p.size()) - 5);
      std::set<std::pair<TokenId, TokenId>> seen;
      for (int q = 0; q + 1 < n_doc; ++q) {
        repeats += !seen.insert({p[size_t(q)], p[size_t(q) + 1]}).second;
        positions += q >= 8;
      }
    }
    // An edit takes two positions (the second is skipped), so about rate / (1 + rate) of them start one.
    EXPECT_NEAR(double(repeats) / double(positions), rate / (1 + rate), 0.25 * rate) << rate;
  }
}

TEST(CopiedSpans, BadSettingsAreNamedWithTheirLine) {
  const std::string head = "strategies: [{batching: continuous}]\nworkload:\n  rates: [1]\n";
  EXPECT_EQ(scenario_errors(head + "  copied_spans: {fraction: 1.5}\n"),
            std::vector<std::string>{"scn.yaml:4:28: workload.copied_spans.fraction must be in (0, 1] (got 1.5)"});
  EXPECT_EQ(scenario_errors(head + "  copied_spans: {fraction: 0.5, span_tokens: 4}\n"),
            std::vector<std::string>{"scn.yaml:4:46: workload.copied_spans.span_tokens must be >= 8 tokens (got 4)"});
  EXPECT_EQ(scenario_errors(head + "  copied_spans: {fraction: 0.5, edit_rate: 0.7}\n"),
            std::vector<std::string>{"scn.yaml:4:44: workload.copied_spans.edit_rate must be in [0, 0.5] (got 0.7)"});
  EXPECT_EQ(scenario_errors(head + "  copied_spans: {fraction: 0.5, span: 4}\n").size(), 1u);
}

TEST(CopiedSpans, ShortPromptsStayRandom) {
  CopiedSpansSpec spec;
  spec.fraction = 1.0;
  Rng ids(1), edits(2);
  EXPECT_THROW(copied_span_prompt(spec, kCopiedSpanMinPrompt - 1, 2048, ids, edits), std::invalid_argument);
  const std::vector<TokenId> p = copied_span_prompt(spec, kCopiedSpanMinPrompt, 2048, ids, edits);
  ASSERT_EQ(int(p.size()), kCopiedSpanMinPrompt);
  EXPECT_TRUE(std::equal(p.end() - 4, p.end(), p.begin()));
}

}  // namespace copied_spans_test
}  // namespace servelab
