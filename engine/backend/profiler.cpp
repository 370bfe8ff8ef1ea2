#include "engine/backend/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/kv/kv_manager.h"

namespace servelab {
namespace {

constexpr int kBlockSize = 16;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// One grid point: per sequence, the context already cached and the positions computed.
struct Point {
  ProfilePhase phase = ProfilePhase::prefill;
  struct Seq {
    int context = 0;
    int n_new = 0;
  };
  std::vector<Seq> seqs;
  int64_t n_slots() const {
    int64_t n = 0;
    for (const Seq& s : seqs) n += (s.context + s.n_new + kBlockSize - 1) / kBlockSize * kBlockSize;
    return n;
  }
};

std::vector<Point> grid(const ProfileOptions& o) {
  std::vector<Point> points;
  auto add = [&](ProfilePhase phase, std::vector<Point::Seq> seqs) { points.push_back({phase, std::move(seqs)}); };
  for (int t : o.prefill_lens) add(ProfilePhase::prefill, {{0, t}});
  for (int b : o.batch_sizes)
    if (b > 1 && int64_t(b) * o.prompt_len <= o.max_rows) add(ProfilePhase::prefill, std::vector<Point::Seq>(b, {0, o.prompt_len}));
  for (int b : o.batch_sizes)
    for (int c : o.contexts) add(ProfilePhase::decode, std::vector<Point::Seq>(b, {c, 1}));
  for (int t : o.chunk_lens)
    for (int c : o.contexts) add(ProfilePhase::chunk, {{c, t}});
  // Mixed: decodes at the middle context plus one chunk, at the middle and the largest batch.
  std::vector<int> batches = o.batch_sizes;
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  std::vector<int> mixed_batches = {batches[batches.size() / 2]};
  if (batches.back() != mixed_batches[0]) mixed_batches.push_back(batches.back());
  const int c_mid = o.contexts[o.contexts.size() / 2];
  for (int b : mixed_batches)
    for (int t : o.chunk_lens) {
      std::vector<Point::Seq> seqs(b, {c_mid, 1});
      seqs.push_back({c_mid, t});
      add(ProfilePhase::mixed, std::move(seqs));
    }
  return points;
}

void check_positive(const std::vector<int>& v, const std::string& name, int max) {
  if (v.empty()) throw std::invalid_argument(name + ": give at least one value");
  for (int x : v)
    if (x < 1 || x > max)
      throw std::invalid_argument(name + " (" + std::to_string(x) + ") must be in [1, " + std::to_string(max) + "]");
}

}  // namespace

const char* to_string(ProfilePhase p) {
  switch (p) {
    case ProfilePhase::prefill: return "prefill";
    case ProfilePhase::decode: return "decode";
    case ProfilePhase::chunk: return "chunk";
    case ProfilePhase::mixed: return "mixed";
  }
  return "?";
}

void ProfileOptions::validate() const {
  check_positive(prefill_lens, "prefill lengths", 1 << 20);
  check_positive(batch_sizes, "batch sizes", 4096);
  check_positive(contexts, "contexts", 1 << 20);
  check_positive(chunk_lens, "chunk lengths", 1 << 20);
  if (prompt_len < 1) throw std::invalid_argument("prompt_len (" + std::to_string(prompt_len) + ") must be >= 1");
  if (max_rows < 1) throw std::invalid_argument("max_rows (" + std::to_string(max_rows) + ") must be >= 1");
  if (repeats < 1) throw std::invalid_argument("repeats (" + std::to_string(repeats) + ") must be >= 1");
  if (!(min_point_s >= 0.0)) throw std::invalid_argument("min_point_s must be >= 0");
}

void ProfileOptions::check_fits(const ModelConfig& model) const {
  int longest = prompt_len;
  for (int t : prefill_lens) longest = std::max(longest, t);
  const int c_max = *std::max_element(contexts.begin(), contexts.end());
  longest = std::max(longest, c_max + std::max(1, *std::max_element(chunk_lens.begin(), chunk_lens.end())));
  if (longest > model.max_position)
    throw std::invalid_argument("the profile grid's longest sequence (" + std::to_string(longest) + " tokens) exceeds " +
                                model.name + "'s max length " + std::to_string(model.max_position));
}

ProfileReport profile_backend(Backend& backend, const ProfileOptions& options,
                              const std::function<void(const std::string&)>& progress) {
  options.validate();
  const ModelConfig& model = backend.config();
  options.check_fits(model);
  const auto t_start = std::chrono::steady_clock::now();
  const std::vector<Point> points = grid(options);

  int64_t n_slots = 0;
  int max_len = 1;
  for (const Point& p : points) {
    n_slots = std::max(n_slots, p.n_slots());
    for (const Point::Seq& s : p.seqs) max_len = std::max(max_len, s.context + s.n_new);
  }
  KvConfig kv_config;
  kv_config.kind = KvKind::paged;
  kv_config.block_size = kBlockSize;
  kv_config.prefix_caching = false;  // random prompts share nothing; keep every step honest
  kv_config.max_model_len = max_len;
  backend.init_kv(n_slots);
  std::unique_ptr<KvManager> kv = make_kv_manager(kv_config, n_slots);

  ProfileReport report;
  report.backend = backend.name();
  report.model = model;
  report.kv_dtype_bytes = static_cast<int>(backend.kv_bytes_per_slot() / (2ll * model.n_layers * model.kv_dim()));
  report.options = options;

  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<TokenId> token(2, model.vocab_size - 1);
  uint64_t next_id = 1;

  auto run_point = [&](const Point& p, int repeats, double min_s) {
    std::vector<Sequence> seqs(p.seqs.size());
    Batch batch;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Sequence& s = seqs[i];
      const int n = p.seqs[i].context + p.seqs[i].n_new;
      s.id = s.request_id = next_id++;
      s.tokens.resize(n);
      for (TokenId& t : s.tokens) t = token(rng);
      s.n_prompt = n;
      s.sampling.max_tokens = 1;
      if (!kv->can_allocate(s, n)) throw std::logic_error("profile: the KV arena is too small for the grid");
      kv->allocate(s, n);
    }
    for (size_t i = 0; i < seqs.size(); ++i) batch.entries.push_back({&seqs[i], p.seqs[i].n_new, true});
    ProfileSample sample;
    sample.phase = p.phase;
    double total = 0.0;
    for (int r = 0; r < repeats && (r == 0 || total < min_s); ++r) {
      for (size_t i = 0; i < seqs.size(); ++i) seqs[i].n_computed = p.seqs[i].context;
      if (r == 0) sample.shape = StepShape::of(batch);
      const auto t0 = std::chrono::steady_clock::now();
      const ForwardResult res = backend.forward(batch, *kv);
      const auto t1 = std::chrono::steady_clock::now();
      const double t = res.predicted_s ? *res.predicted_s : std::chrono::duration<double>(t1 - t0).count();
      sample.times_s.push_back(t);
      total += t;
    }
    sample.step_s = median(sample.times_s);
    for (Sequence& s : seqs) kv->release(s);
    return sample;
  };

  // Warm-up: first touch of the weights and of the BLAS threads.
  run_point(Point{ProfilePhase::prefill, {{0, std::min(8, model.max_position)}}}, 1, 0.0);
  for (size_t i = 0; i < points.size(); ++i) {
    ProfileSample s = run_point(points[i], options.repeats, options.min_point_s);
    if (progress) {
      char line[160];
      std::snprintf(line, sizeof line, "[%zu/%zu] %-7s seqs %4lld rows %5lld context %6lld: %10.3f ms", i + 1,
                    points.size(), to_string(s.phase), static_cast<long long>(s.shape.n_seqs),
                    static_cast<long long>(s.shape.n_rows()), static_cast<long long>(s.shape.max_context),
                    s.step_s * 1e3);
      progress(line);
    }
    report.samples.push_back(std::move(s));
  }
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  return report;
}

std::string profile_table(const ProfileReport& r) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "model %s (%.1fM params), backend %s, %s\n", r.model.name.c_str(),
                r.model.n_params() / 1e6, r.backend.c_str(), r.device.c_str());
  out << line;
  std::snprintf(line, sizeof line, "%-8s %6s %6s %8s %6s %12s %12s\n", "phase", "seqs", "rows", "context", "reps",
                "median_ms", "tokens/s");
  out << line;
  for (const ProfileSample& s : r.samples) {
    std::snprintf(line, sizeof line, "%-8s %6lld %6lld %8lld %6zu %12.3f %12.1f\n", to_string(s.phase),
                  static_cast<long long>(s.shape.n_seqs), static_cast<long long>(s.shape.n_rows()),
                  static_cast<long long>(s.shape.max_context), s.times_s.size(), s.step_s * 1e3,
                  s.shape.n_tokens / s.step_s);
    out << line;
  }
  return out.str();
}

std::string profile_json(const ProfileReport& r) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["schema"] = "servelab.profile/2";
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["hardware"] = r.hardware;
  j["tensor_parallel"] = r.tensor_parallel;
  j["commit"] = r.commit;
  j["date"] = r.date;
  const ModelConfig& m = r.model;
  j["model"] = {{"name", m.name},
                {"shape_hash", model_shape_hash(m)},
                {"n_params", m.n_params()},
                {"hidden_size", m.hidden_size},
                {"n_layers", m.n_layers},
                {"n_heads", m.n_heads},
                {"n_kv_heads", m.n_kv_heads},
                {"head_dim", m.head_dim()},
                {"intermediate_size", m.intermediate_size},
                {"vocab_size", m.vocab_size}};
  j["kv_dtype_bytes"] = r.kv_dtype_bytes;
  const ProfileOptions& o = r.options;
  j["options"] = {{"prefill_lens", o.prefill_lens}, {"batch_sizes", o.batch_sizes}, {"contexts", o.contexts},
                  {"prompt_len", o.prompt_len},     {"max_rows", o.max_rows},       {"chunk_lens", o.chunk_lens},
                  {"repeats", o.repeats},           {"min_point_s", o.min_point_s}, {"seed", o.seed}};
  j["wall_s"] = r.wall_s;
  ordered_json samples = ordered_json::array();
  for (const ProfileSample& s : r.samples) {
    const StepShape& h = s.shape;
    samples.push_back({{"phase", to_string(s.phase)},
                       {"n_seqs", h.n_seqs},
                       {"n_tokens", h.n_tokens},
                       {"n_padding_tokens", h.n_padding_tokens},
                       {"n_sampled", h.n_sampled},
                       {"sum_context", h.sum_context},
                       {"max_context", h.max_context},
                       {"prefill_pairs", h.prefill_pairs},
                       {"decode_context", h.decode_context},
                       {"attention_pairs", h.attention_pairs},
                       {"step_s", s.step_s},
                       {"times_s", s.times_s}});
  }
  j["samples"] = std::move(samples);
  return j.dump(2) + "\n";
}

}  // namespace servelab
