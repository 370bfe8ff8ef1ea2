#pragma once
// Plan: every request of one run (a strategy × rate), fixed before the run starts (wrk2's "plan
// first, then send"): its intended send time, prompt token ids and output length. Seeded and
// reproducible; the same plan drives every strategy at that rate.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/request.h"
#include "loadgen/dataset.h"
#include "loadgen/prefix_groups.h"
#include "loadgen/prompt_maker.h"
#include "loadgen/scenario.h"

namespace servelab {

/// One request of a plan. Its id is its index in Plan::requests.
struct PlannedRequest {
  uint64_t id = 0;
  double intended_s = 0.0;        ///< open loop / trace: send time from the run's start; closed loop: 0 (released on a finish)
  /// Shared prefix, then this request's own tokens; ids in [2, vocab). Empty in a plan made with
  /// prompts on demand: Plan::prompt draws it from `recipe` when the request is sent.
  std::vector<TokenId> prompt;
  PromptRecipe recipe;            ///< how its prompt is drawn (Planner's plans; PromptMaker)
  int output_tokens = 0;          ///< exact output length (ignore_eos)
  bool warmup = false;            ///< sent, but left out of the metrics
  int prefix_group = -1;          ///< workload.prefix_groups index its prompt starts with (after the shared prefix); −1 none
  /// Sessions (workload.sessions): which session and turn. Turn 0 is sent at intended_s (the
  /// session's arrival); turn k > 0 is sent think_time_s after turn k−1's reply finished, with
  /// turn k−1's whole prompt and reply in front of `prompt` (its own new tokens), so here
  /// intended_s is only the session's arrival.
  int session = -1;               ///< −1 = not part of a session
  int turn = 0;
  double think_time_s = 0.0;
  std::string lora;               ///< workload.lora: the adapter it names ("" = the base model)
  bool copied_span = false;       ///< workload.copied_spans: its own tokens reproduce a document
};

/// All requests of one run, in send order (warm-up first).
struct Plan {
  LoadMode mode = LoadMode::open_loop;
  double rate = 0.0;              ///< requests/s (open loop); 0 for closed loop and trace
  int concurrency = 0;            ///< closed loop
  double ramp_to = 0.0;           ///< open loop with a ramp: rate at ramp_duration_s (rate is the start)
  double ramp_duration_s = 0.0;
  int max_concurrency = 0;        ///< open loop: cap on requests in flight (0 = none)
  int n_sessions = 0;             ///< workload.sessions: sessions in the plan
  uint64_t seed = 0;
  std::vector<PlannedRequest> requests;
  int n_warmup = 0;
  int n_clipped = 0;              ///< requests whose lengths were cut to fit max_model_len
  int n_dataset_dropped = 0;      ///< dataset entries left out because they cannot fit max_model_len
  int n_turns_dropped = 0;        ///< session turns left out: the conversation had no room left in max_model_len
  /// Set in a plan made with prompts on demand: draws each request's prompt from its recipe.
  std::shared_ptr<const PromptMaker> prompts;

  /// Request i's prompt: requests[i].prompt copied, or drawn now from its recipe when the plan
  /// draws prompts on demand (the same ids either way), with capacity for `room` more ids.
  std::vector<TokenId> prompt(size_t i, size_t room = 0) const;
  bool is_warmup(uint64_t id) const { return id < requests.size() && requests[id].warmup; }
  int n_measured() const { return static_cast<int>(requests.size()) - n_warmup; }
};

/// Builds plans for one scenario: loads its dataset or trace once (throws std::runtime_error
/// "path:line: message" when one is missing or malformed), then makes a plan per rate.
///
/// Streams (see RngStream): arrivals from (seed, arrivals) — gaps drawn at rate 1 and scaled,
/// so every rate sees the same pattern; prompt and output lengths from their own streams, one
/// draw each per request in order; request i's token ids from (seed, tokens, i); the shared
/// prefix from (seed, shared_prefix). Changing the rate changes only the times; changing the
/// output distribution leaves prompts as they were.
///
/// Dataset texts are counted with workload.tokenizer, else the model folder's tokenizer.json,
/// else as ceil(bytes / 4) (length_counting()); with a tokenizer whose vocabulary fits the model,
/// prompts are the texts' own ids rather than random ones.
///
/// Lengths that do not fit engine.max_model_len (shared prefix + prompt + output): the prompt is
/// cut first (down to 1 token of its own), then the output (counted in n_clipped). Dataset entries
/// that do not fit are left out instead, as vLLM's benchmark filters ShareGPT.
/// Whether a plan holds every prompt's ids or draws them when each request is sent.
enum class PlanPrompts { held, on_demand };

/// Each request's adapter drawn from `spec` (none when it is not enabled()): one draw per request
/// from its own stream of (plan.seed, its index, or its session: a session keeps one adapter),
/// so a strategy with its own `lora:` gets its adapters over the same requests as the planner's.
void draw_lora_adapters(Plan& plan, const LoraWorkloadSpec& spec);

class Planner {
 public:
  explicit Planner(const Scenario& scenario);
  /// The plan at `rate` (open loop), at concurrency `rate` (closed loop: a sweep point; 0 = the
  /// scenario's concurrency); ignored for a trace. on_demand: every PlannedRequest::prompt is
  /// left empty and the plan keeps this planner's PromptMaker (Plan::prompt): what a run needs,
  /// at a fraction of the memory; held: what `servelab plan` prints and tests read.
  Plan make(double rate, PlanPrompts prompts = PlanPrompts::held) const;
  const Scenario& scenario() const { return scenario_; }
  /// How dataset texts were counted: "tokenizer:<tokenizer.json path>" or "bytes/4".
  const std::string& length_counting() const { return length_counting_; }
  /// Prompts are the dataset texts' own ids (a tokenizer whose vocabulary fits the model's).
  bool text_prompts() const { return text_prompts_; }

 private:
  struct Lengths {
    int prompt = 0;
    int output = 0;
  };
  Lengths fit(int prompt, int output, bool& clipped, int64_t room) const;
  /// Intended times of the open-loop (or closed-loop) units: requests, or sessions.
  std::vector<double> unit_times(double rate, int n_units, Plan& plan) const;
  Scenario scenario_;
  Dataset dataset_;                    ///< entries that fit (when a length comes from a dataset)
  int n_dataset_dropped_ = 0;
  std::vector<TraceEntry> trace_;
  /// The shared prefix, prefix groups and dataset texts: every prompt's ids (shared with plans
  /// made with prompts on demand).
  std::shared_ptr<PromptMaker> prompts_;
  std::vector<int> texts_;             ///< per dataset entry, its text's PromptMaker index (text prompts)
  std::string length_counting_ = "bytes/4";
  bool text_prompts_ = false;
};

/// How a scenario's dataset texts are counted, without loading anything: "tokenizer:<path>" for
/// workload.tokenizer or the model folder's tokenizer.json, else "bytes/4" (ceil(bytes / 4)).
std::string length_counting(const Scenario& scenario);

/// make_plan(s, rate) = Planner(s).make(rate); use a Planner to make several.
Plan make_plan(const Scenario& scenario, double rate);

/// Distribution of a plan for `servelab plan`: count, span, gaps and lengths.
struct PlanSummary {
  struct Stats {
    double mean = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0, cv = 0;
  };
  int n_requests = 0;
  int n_warmup = 0;
  double duration_s = 0.0;   ///< last intended time − first
  Stats gaps_s;              ///< between consecutive intended times (open loop / trace)
  Stats prompt_tokens;
  Stats output_tokens;
  int64_t total_prompt_tokens = 0;
  int64_t total_output_tokens = 0;
  int n_clipped = 0;
  int n_dataset_dropped = 0;
  int n_copied_spans = 0;    ///< requests whose own tokens reproduce a document (workload.copied_spans)
};
PlanSummary summarize(const Plan& plan);
/// Multi-line text of summarize(plan), headed by the scenario name and rate.
std::string format_plan_summary(const Plan& plan, const std::string& scenario_name);
/// {"mode", "rate", "concurrency", "seed", "n_warmup", "n_clipped", "requests": [{"id",
/// "intended_s", "prompt_tokens", "output_tokens", "warmup", "prompt": [ids]}]}; a request with a
/// copied span has "copied_span": true.
nlohmann::json plan_to_json(const Plan& plan);

}  // namespace servelab
