#include "loadgen/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/model/tokenizer.h"
#include "loadgen/arrivals.h"
#include "loadgen/copied_spans.h"
#include "loadgen/lora_workload.h"
#include "loadgen/rng.h"

namespace servelab {

namespace {
/// A duration_s run at a tiny rate could ask for more requests than anyone can send.
constexpr int kMaxPlannedRequests = 10'000'000;
}  // namespace

Planner::Planner(const Scenario& scenario) : scenario_(scenario) {
  const auto& w = scenario_.workload;
  const int max_len = scenario_.engine.max_model_len;
  if (w.mode == LoadMode::trace) {
    trace_ = load_trace(w.trace);
  } else if (w.prompt.from_dataset() || w.output.from_dataset()) {
    const LengthSpec& spec = w.prompt.from_dataset() ? w.prompt : w.output;
    std::unique_ptr<Tokenizer> tok;
    if (!w.tokenizer.empty()) tok = load_bpe_tokenizer(w.tokenizer);
    else if (!scenario_.model.path.empty()) tok = load_tokenizer_from_dir(scenario_.model.path);
    if (tok) {
      length_counting_ = "tokenizer:" + (w.tokenizer.empty() ? scenario_.model.path + "/tokenizer.json" : w.tokenizer);
      // Prompts are the dataset's own text when its ids are ids of this model.
      text_prompts_ = w.prompt.from_dataset() && tok->vocab_size() <= scenario_.model.vocab_size;
    }
    Dataset all = load_dataset(spec.dataset, spec.dataset_format, tok.get());
    dataset_.path = all.path;
    dataset_.format = all.format;
    dataset_.n_skipped = all.n_skipped;
    for (const LengthPair& e : all.entries) {
      const int p = w.prompt.from_dataset() ? e.prompt_tokens : 1;
      const int o = w.output.from_dataset() ? e.output_tokens : 1;
      if (int64_t{w.max_prefix_tokens()} + p + o <= max_len) {
        dataset_.entries.push_back(e);
        if (!text_prompts_) dataset_.entries.back().prompt_ids.clear();  // not needed: save the memory
      }
      else ++n_dataset_dropped_;
    }
    if (dataset_.entries.empty())
      throw std::runtime_error(spec.dataset + ": no entry fits engine.max_model_len (" + std::to_string(max_len) +
                               " tokens with a shared prefix of " + std::to_string(w.shared_prefix_tokens) + ")");
  }
  prompts_ = std::make_shared<PromptMaker>(scenario_);
  // Text prompts: the ids move to the prompt maker; an empty text (as no text) gives random ids.
  for (LengthPair& e : dataset_.entries)
    texts_.push_back(text_prompts_ && !e.prompt_ids.empty() ? prompts_->add_text(std::move(e.prompt_ids)) : -1);
}

Planner::Lengths Planner::fit(int prompt, int output, bool& clipped, int64_t room) const {
  clipped = false;
  if (prompt + int64_t{output} > room) {
    clipped = true;
    prompt = static_cast<int>(std::max<int64_t>(1, room - output));
    if (prompt + int64_t{output} > room) output = static_cast<int>(std::max<int64_t>(1, room - prompt));
  }
  return {prompt, output};
}

std::vector<double> Planner::unit_times(double rate, int n_units, Plan& plan) const {
  const auto& w = scenario_.workload;
  Rng arrivals = Rng::stream(scenario_.seed, RngStream::arrivals);
  if (w.mode != LoadMode::open_loop) return std::vector<double>(static_cast<size_t>(n_units), 0.0);
  const int n_warmup_units = w.sessions.enabled() ? (w.warmup_requests + w.sessions.turns - 1) / w.sessions.turns
                                                  : w.warmup_requests;
  RateRamp ramp;
  const bool ramped = w.arrival.ramp_to > 0;
  if (ramped) {
    // Over duration_s, or over the time n units take on average: n = duration·(from + to)/2.
    ramp = {rate, w.arrival.ramp_to, w.duration_s > 0 ? w.duration_s : 2.0 * std::max(1, n_units) / (rate + w.arrival.ramp_to)};
    plan.ramp_to = ramp.to;
    plan.ramp_duration_s = ramp.duration;
  }
  if (n_units > 0) return ramped ? ramp_arrival_times(w.arrival, ramp, n_units, arrivals)
                                 : arrival_times(w.arrival, rate, n_units, arrivals);
  // duration_s: the warm-up units come first, then every unit arriving within duration_s of the
  // first measured one.
  std::vector<double> times;
  double t = 0.0, u = 0.0, t_measured = 0.0;
  for (int i = 0;; ++i) {
    if (i > 0) {
      if (ramped) t = ramp.time_at(u += arrival_gap(w.arrival, 1.0, arrivals));
      else t += arrival_gap(w.arrival, rate, arrivals);
    }
    if (i == n_warmup_units) t_measured = t;
    if (i >= n_warmup_units && t - t_measured >= w.duration_s) break;
    times.push_back(t);
    if (times.size() > static_cast<size_t>(kMaxPlannedRequests))
      throw std::invalid_argument("workload.duration_s at this rate gives more than " +
                                  std::to_string(kMaxPlannedRequests) + " requests");
  }
  return times;
}

Plan Planner::make(double rate, PlanPrompts prompts) const {
  const auto& w = scenario_.workload;
  Plan plan;
  plan.mode = w.mode;
  plan.seed = scenario_.seed;
  plan.concurrency = w.mode == LoadMode::closed_loop ? (rate >= 1 ? static_cast<int>(rate) : w.concurrency) : 0;
  plan.n_dataset_dropped = n_dataset_dropped_;
  plan.max_concurrency = w.mode == LoadMode::open_loop ? w.arrival.max_concurrency : 0;
  const int64_t max_len = scenario_.engine.max_model_len;
  const int64_t room = max_len - w.shared_prefix_tokens;

  struct Item {
    double t = 0;
    Lengths len;
    int group = -1, session = -1, turn = 0;
    int text = -1;  ///< the dataset prompt's ids (PromptMaker::add_text), −1 none
  };
  std::vector<Item> items;
  if (w.mode == LoadMode::trace) {
    const size_t limit = w.n_requests > 0 ? static_cast<size_t>(w.n_requests + w.warmup_requests) : trace_.size();
    for (const TraceEntry& e : trace_) {
      const double t = e.timestamp_s / w.trace_speed;  // replayed at trace_speed× the recorded pace
      if (items.size() >= limit || (w.duration_s > 0 && t >= w.duration_s)) break;
      bool clipped = false;
      items.push_back({t, fit(e.prompt_tokens, e.output_tokens, clipped, room)});
      plan.n_clipped += clipped;
    }
  } else {
    if (w.mode == LoadMode::open_loop) {
      if (!(rate > 0)) throw std::invalid_argument("plan rate must be > 0 requests/s (got " + std::to_string(rate) + ")");
      plan.rate = rate;
    }
    const int turns = w.sessions.enabled() ? w.sessions.turns : 1;
    const int n_total = w.n_requests > 0 ? w.n_requests + w.warmup_requests : 0;
    const std::vector<double> units = unit_times(rate, n_total > 0 ? (n_total + turns - 1) / turns : 0, plan);
    Rng prompt_rng = Rng::stream(scenario_.seed, RngStream::prompt_lengths);
    Rng output_rng = Rng::stream(scenario_.seed, RngStream::output_lengths);
    Rng group_rng = Rng::stream(scenario_.seed, RngStream::prefix_group_choice);
    std::vector<size_t> order;
    if (!dataset_.entries.empty()) {
      // One seeded shuffle of the entries, cycled if the plan is longer than the dataset.
      order.resize(dataset_.entries.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      Rng shuffle = Rng::stream(scenario_.seed, RngStream::dataset_order);
      for (size_t i = order.size(); i > 1; --i)
        std::swap(order[i - 1], order[static_cast<size_t>(shuffle.uniform_int(0, static_cast<int64_t>(i) - 1))]);
    }
    size_t drawn = 0;  // requests whose lengths were drawn (dropped session turns included)
    for (size_t u = 0; u < units.size(); ++u) {
      const PrefixGroups& groups = prompts_->groups();
      const int group = groups.choose(group_rng);
      int64_t context = 0;  // a session's earlier prompts and replies (its prefixes included)
      bool session_full = false;
      for (int k = 0; k < turns; ++k) {
        if (n_total > 0 && drawn >= static_cast<size_t>(n_total)) break;
        int p = w.prompt.dist.sample(prompt_rng);
        int o = w.output.dist.sample(output_rng);
        int text = -1;
        if (!order.empty()) {
          const size_t entry = order[drawn % order.size()];
          const LengthPair& e = dataset_.entries[entry];
          if (w.prompt.from_dataset()) p = e.prompt_tokens;
          if (w.output.from_dataset()) o = e.output_tokens;
          text = texts_[entry];
        }
        ++drawn;
        const int64_t left = room - static_cast<int64_t>(groups.tokens(group).size()) - context;
        if (session_full || left < 2) {  // no room for 1 token of prompt and 1 of output
          session_full = true;
          ++plan.n_turns_dropped;
          continue;
        }
        bool clipped = false;
        const Lengths len = fit(p, o, clipped, left);
        plan.n_clipped += clipped;
        items.push_back({units[u], len, group, w.sessions.enabled() ? static_cast<int>(u) : -1, k, text});
        context += len.prompt + int64_t{len.output} + (k == 0 ? static_cast<int64_t>(groups.tokens(group).size()) : 0);
      }
    }
    if (w.sessions.enabled()) plan.n_sessions = static_cast<int>(units.size());
  }

  plan.requests.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    PlannedRequest& r = plan.requests[i];
    const Item& it = items[i];
    r.id = i;
    r.intended_s = it.t;
    // A copied span replaces random own ids (not a dataset's text) where one fits: one draw per
    // request from its own stream, which then draws the document's edits (PromptMaker::tokens).
    Rng span_stream = Rng::stream(scenario_.seed, RngStream::copied_spans, i);
    r.copied_span = it.text < 0 && it.len.prompt >= kCopiedSpanMinPrompt && draws_copied_span(w.copied_spans, span_stream);
    r.recipe = {i, it.len.prompt, it.turn == 0, it.group, it.text, r.copied_span};
    if (prompts == PlanPrompts::held) r.prompt = prompts_->tokens(r.recipe);
    r.output_tokens = it.len.output;
    r.warmup = i < static_cast<size_t>(w.warmup_requests);
    r.prefix_group = it.group;
    r.session = it.session;
    r.turn = it.turn;
    r.think_time_s = it.session >= 0 && it.turn > 0 ? w.sessions.think_time_s : 0.0;
    plan.n_warmup += r.warmup;
  }
  draw_lora_adapters(plan, w.lora);
  if (prompts == PlanPrompts::on_demand) plan.prompts = prompts_;
  return plan;
}

void draw_lora_adapters(Plan& plan, const LoraWorkloadSpec& spec) {
  const LoraChooser chooser(spec);
  for (size_t i = 0; i < plan.requests.size(); ++i) {
    PlannedRequest& r = plan.requests[i];
    r.lora.clear();
    if (!spec.enabled()) continue;
    // one draw per request from its own stream; a session keeps one adapter over its turns
    Rng rng = Rng::stream(plan.seed, RngStream::lora_choice, r.session >= 0 ? uint64_t(r.session) : i);
    r.lora = chooser.choose(rng);
  }
}

std::vector<TokenId> Plan::prompt(size_t i, size_t room) const {
  const PlannedRequest& r = requests.at(i);
  if (prompts) return prompts->tokens(r.recipe, room);
  std::vector<TokenId> out;
  out.reserve(r.prompt.size() + room);
  out.assign(r.prompt.begin(), r.prompt.end());
  return out;
}

Plan make_plan(const Scenario& scenario, double rate) { return Planner(scenario).make(rate); }

std::string length_counting(const Scenario& scenario) {
  const auto& w = scenario.workload;
  if (!w.tokenizer.empty()) return "tokenizer:" + w.tokenizer;
  if (!scenario.model.path.empty() && std::filesystem::exists(scenario.model.path + "/tokenizer.json"))
    return "tokenizer:" + scenario.model.path + "/tokenizer.json";
  return "bytes/4";
}

namespace {

PlanSummary::Stats stats_of(std::vector<double> v) {
  PlanSummary::Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0, sq = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  const double sd = std::sqrt(sq / static_cast<double>(v.size()));
  s.cv = s.mean > 0 ? sd / s.mean : 0.0;
  // Nearest rank: the smallest sample with at least q of the samples at or below it.
  auto q = [&](double f) {
    const size_t k = static_cast<size_t>(std::ceil(f * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
  };
  s.p50 = q(0.5);
  s.p90 = q(0.9);
  s.p99 = q(0.99);
  s.min = v.front();
  s.max = v.back();
  return s;
}

}  // namespace

PlanSummary summarize(const Plan& plan) {
  PlanSummary s;
  s.n_requests = static_cast<int>(plan.requests.size());
  s.n_warmup = plan.n_warmup;
  s.n_clipped = plan.n_clipped;
  s.n_dataset_dropped = plan.n_dataset_dropped;
  std::vector<double> gaps, prompts, outputs;
  for (size_t i = 0; i < plan.requests.size(); ++i) {
    const PlannedRequest& r = plan.requests[i];
    if (i > 0) gaps.push_back(r.intended_s - plan.requests[i - 1].intended_s);
    prompts.push_back(static_cast<double>(r.prompt.size()));
    outputs.push_back(r.output_tokens);
    s.total_prompt_tokens += static_cast<int64_t>(r.prompt.size());
    s.total_output_tokens += r.output_tokens;
    s.n_copied_spans += r.copied_span;
  }
  if (!plan.requests.empty()) s.duration_s = plan.requests.back().intended_s - plan.requests.front().intended_s;
  s.gaps_s = stats_of(gaps);
  s.prompt_tokens = stats_of(prompts);
  s.output_tokens = stats_of(outputs);
  return s;
}

std::string format_plan_summary(const Plan& plan, const std::string& scenario_name) {
  const PlanSummary s = summarize(plan);
  std::ostringstream o;
  char buf[256];
  o << "plan " << scenario_name;
  if (plan.mode == LoadMode::open_loop) o << " @ " << plan.rate << " req/s";
  if (plan.ramp_to > 0) o << " ramping to " << plan.ramp_to << " req/s over " << plan.ramp_duration_s << " s";
  if (plan.max_concurrency > 0) o << ", at most " << plan.max_concurrency << " in flight";
  else if (plan.mode == LoadMode::closed_loop) o << ", closed loop at concurrency " << plan.concurrency;
  else if (plan.mode == LoadMode::trace) o << ", trace replay";
  o << " (seed " << plan.seed << ")\n";
  o << "  requests  " << s.n_requests - s.n_warmup;
  if (s.n_warmup > 0) o << " (+" << s.n_warmup << " warm-up)";
  if (plan.mode != LoadMode::closed_loop) {
    std::snprintf(buf, sizeof buf, ", intended over %.3f s", s.duration_s);
    o << buf;
  }
  o << "\n";
  auto row = [&](const char* name, const PlanSummary::Stats& st, const char* fmt) {
    std::string f = std::string("  %-9s mean ") + fmt + "  p50 " + fmt + "  p90 " + fmt + "  p99 " + fmt + "  min " + fmt +
                    "  max " + fmt + "  cv %.2f\n";
    std::snprintf(buf, sizeof buf, f.c_str(), name, st.mean, st.p50, st.p90, st.p99, st.min, st.max, st.cv);
    o << buf;
  };
  if (plan.mode != LoadMode::closed_loop && s.n_requests > 1) row("gaps (s)", s.gaps_s, "%.4f");
  row("prompt", s.prompt_tokens, "%.1f");
  row("output", s.output_tokens, "%.1f");
  o << "  tokens    " << s.total_prompt_tokens << " prompt + " << s.total_output_tokens << " output\n";
  if (s.n_clipped > 0) o << "  clipped   " << s.n_clipped << " requests cut to fit max_model_len\n";
  if (s.n_dataset_dropped > 0) o << "  dropped   " << s.n_dataset_dropped << " dataset entries longer than max_model_len\n";
  if (s.n_copied_spans > 0)
    o << "  copied    " << s.n_copied_spans << " requests reproduce a document (workload.copied_spans)\n";
  if (plan.n_sessions > 0)
    o << "  sessions  " << plan.n_sessions << " (prompt lengths above are each turn's own tokens; earlier turns come in front"
      << (plan.n_turns_dropped > 0 ? "; " + std::to_string(plan.n_turns_dropped) + " turns dropped: no room in max_model_len" : std::string())
      << ")\n";
  return o.str();
}

nlohmann::json plan_to_json(const Plan& plan) {
  nlohmann::json reqs = nlohmann::json::array();
  for (const PlannedRequest& r : plan.requests) {
    nlohmann::json j = {{"id", r.id},
                        {"intended_s", r.intended_s},
                        {"prompt_tokens", r.prompt.size()},
                        {"output_tokens", r.output_tokens},
                        {"warmup", r.warmup},
                        {"prompt", r.prompt}};
    if (r.prefix_group >= 0) j["prefix_group"] = r.prefix_group;
    if (!r.lora.empty()) j["lora"] = r.lora;
    if (r.copied_span) j["copied_span"] = true;
    if (r.session >= 0) {
      j["session"] = r.session;
      j["turn"] = r.turn;
      j["think_time_s"] = r.think_time_s;
    }
    reqs.push_back(std::move(j));
  }
  nlohmann::json out = {{"mode", to_string(plan.mode)}, {"rate", plan.rate},          {"concurrency", plan.concurrency},
                        {"seed", plan.seed},            {"n_warmup", plan.n_warmup},  {"n_clipped", plan.n_clipped},
                        {"n_dataset_dropped", plan.n_dataset_dropped}};
  if (plan.ramp_to > 0) {
    out["ramp_to"] = plan.ramp_to;
    out["ramp_duration_s"] = plan.ramp_duration_s;
  }
  if (plan.max_concurrency > 0) out["max_concurrency"] = plan.max_concurrency;
  if (plan.n_sessions > 0) {
    out["n_sessions"] = plan.n_sessions;
    out["n_turns_dropped"] = plan.n_turns_dropped;
  }
  out["requests"] = reqs;
  return out;
}

}  // namespace servelab
