#include "analysis/server_state.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "loadgen/records/jsonl.h"

namespace servelab::analysis {

void from_json(const nlohmann::json& j, ServerSample& s) {
  s.run = j.at("run").get<std::string>();
  s.url = j.value("url", std::string());
  s.t_s = j.at("t_s").get<double>();
  if (!std::isfinite(s.t_s) || s.t_s < 0) throw std::invalid_argument("t_s must be finite and >= 0");
  s.engine = j.value("engine", std::string());
  auto get = [&](const char* key, double& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number()) throw std::invalid_argument(std::string(key) + " must be a number");
    out = j[key].get<double>();
  };
  get("running", s.running);
  get("waiting", s.waiting);
  get("kv_usage", s.kv_usage);
  get("preemptions", s.preemptions);
  get("ttft_count", s.ttft_count);
  get("ttft_sum_s", s.ttft_sum_s);
  get("spec_drafts", s.spec_drafts);
  get("spec_draft_tokens", s.spec_draft_tokens);
  get("spec_accepted_tokens", s.spec_accepted_tokens);
  if (auto it = j.find("spec_accepted_per_pos"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw std::invalid_argument("spec_accepted_per_pos must be an array of numbers");
    for (const auto& v : *it) {
      if (!v.is_number() || !(v.get<double>() >= 0)) throw std::invalid_argument("spec_accepted_per_pos must hold numbers >= 0");
      s.spec_accepted_per_pos.push_back(v.get<double>());
    }
  }
}

std::vector<ServerSample> read_server_samples(const std::string& path, bool* cut_tail) {
  return read_jsonl<ServerSample>(path, nullptr, cut_tail);
}

std::optional<ServerSpecCounters> server_spec_counters(const std::vector<ServerSample>& samples, const std::string& run) {
  // Per replica: its first and last sample that carry the counters, in time order.
  std::map<std::string, std::pair<const ServerSample*, const ServerSample*>> ends;
  for (const auto& s : samples) {
    if (s.run != run || std::isnan(s.spec_drafts)) continue;
    auto& [first, last] = ends[s.url];
    if (!first || s.t_s < first->t_s) first = &s;
    if (!last || s.t_s >= last->t_s) last = &s;
  }
  ServerSpecCounters c;
  for (const auto& [url, fl] : ends) {
    const ServerSample& first = *fl.first;
    const ServerSample& last = *fl.second;
    // A counter that went down means the server restarted during the run: that replica's figures
    // are not the run's, so it is left out (its first sample was taken before the restart).
    bool restarted = last.spec_drafts < first.spec_drafts || last.spec_draft_tokens < first.spec_draft_tokens ||
                     last.spec_accepted_tokens < first.spec_accepted_tokens;
    for (size_t p = 0; p < first.spec_accepted_per_pos.size(); ++p)
      restarted |= p >= last.spec_accepted_per_pos.size() || last.spec_accepted_per_pos[p] < first.spec_accepted_per_pos[p];
    if (restarted) continue;
    auto delta = [](double a, double b) -> int64_t {
      return std::isnan(a) || std::isnan(b) ? 0 : static_cast<int64_t>(std::llround(b - a));
    };
    c.num_drafts += delta(first.spec_drafts, last.spec_drafts);
    c.num_draft_tokens += delta(first.spec_draft_tokens, last.spec_draft_tokens);
    c.num_accepted_tokens += delta(first.spec_accepted_tokens, last.spec_accepted_tokens);
    const size_t n = last.spec_accepted_per_pos.size();
    if (c.num_accepted_tokens_per_pos.size() < n) c.num_accepted_tokens_per_pos.resize(n, 0);
    for (size_t p = 0; p < n; ++p)
      c.num_accepted_tokens_per_pos[p] +=
          delta(p < first.spec_accepted_per_pos.size() ? first.spec_accepted_per_pos[p] : 0.0, last.spec_accepted_per_pos[p]);
  }
  if (c.num_drafts <= 0) return std::nullopt;
  return c;
}

std::vector<ServerState> server_state_from_samples(const std::vector<ServerSample>& samples, const std::string& run) {
  std::vector<const ServerSample*> mine;
  for (const auto& s : samples)
    if (s.run == run) mine.push_back(&s);
  std::stable_sort(mine.begin(), mine.end(), [](auto* a, auto* b) { return a->t_s < b->t_s; });
  struct Replica {
    const ServerSample* latest = nullptr;
    double first_preemptions = NAN;
    double prev_count = NAN, prev_sum = NAN;
  };
  std::map<std::string, Replica> replicas;
  std::vector<ServerState> out;
  for (const ServerSample* s : mine) {
    Replica& rep = replicas[s->url];
    if (std::isnan(rep.first_preemptions)) rep.first_preemptions = s->preemptions;
    // The server's mean TTFT over the interval: new observations' time / their count.
    double ttft_ms = NAN;
    if (!std::isnan(rep.prev_count) && s->ttft_count > rep.prev_count)
      ttft_ms = (s->ttft_sum_s - rep.prev_sum) / (s->ttft_count - rep.prev_count) * 1000.0;
    rep.prev_count = s->ttft_count;
    rep.prev_sum = s->ttft_sum_s;
    rep.latest = s;
    ServerState st;
    st.t_s = s->t_s;
    st.ttft_ms = ttft_ms;
    double kv_sum = 0.0;
    int kv_n = 0;
    auto add = [](double& acc, double v) {
      if (std::isnan(v)) return;
      acc = std::isnan(acc) ? v : acc + v;
    };
    for (const auto& [url, r] : replicas) {
      add(st.running, r.latest->running);
      add(st.waiting, r.latest->waiting);
      if (!std::isnan(r.latest->preemptions) && !std::isnan(r.first_preemptions))
        add(st.preemptions, r.latest->preemptions - r.first_preemptions);
      if (!std::isnan(r.latest->kv_usage)) {
        kv_sum += r.latest->kv_usage;
        ++kv_n;
      }
    }
    if (kv_n > 0) st.kv_pct = kv_sum / kv_n * 100.0;
    out.push_back(st);
  }
  return out;
}

std::vector<ServerState> server_state_from_steps(const std::vector<StepRecord>& steps, const std::string& run) {
  std::vector<const StepRecord*> mine;
  for (const auto& s : steps)
    if (s.run == run) mine.push_back(&s);
  std::stable_sort(mine.begin(), mine.end(), [](auto* a, auto* b) { return a->start_s < b->start_s; });
  std::vector<ServerState> out;
  double preempted = 0.0;
  for (const StepRecord* s : mine) {
    preempted += s->n_preempted;
    ServerState st;
    st.t_s = s->start_s + s->duration_s;
    st.running = s->n_running;
    st.waiting = s->n_waiting;
    const double used = static_cast<double>(s->kv_stored + s->kv_reserved + s->kv_internal_frag);
    st.kv_pct = s->kv_capacity > 0 ? used * 100.0 / static_cast<double>(s->kv_capacity) : NAN;
    st.preemptions = preempted;
    out.push_back(st);
  }
  return out;
}

}  // namespace servelab::analysis
