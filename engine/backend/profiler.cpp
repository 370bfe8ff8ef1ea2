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
constexpr int kMaxPrefillRepeats = 5;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Runs one batch and times it; the engine's bookkeeping (n_computed, appended tokens, KV
/// growth) happens outside the timed region.
class StepRunner {
 public:
  StepRunner(Backend& backend, KvManager& kv) : backend_(backend), kv_(kv) {}

  ProfileSample run(ProfilePhase phase, std::vector<Sequence>& seqs, bool append_sampled) {
    Batch batch;
    ProfileSample sample;
    sample.phase = phase;
    sample.batch_size = static_cast<int>(seqs.size());
    for (Sequence& s : seqs) {
      const int n_new = s.n_tokens() - s.n_computed;
      if (!kv_.can_grow(s, s.n_tokens()))
        throw std::logic_error("profile: the KV arena is too small for the planned sequences");
      kv_.grow(s, s.n_tokens());
      batch.entries.push_back({&s, n_new, true});
      sample.n_tokens += n_new;
      sample.sum_context += s.n_tokens();
      sample.n_sampled += 1;
    }
    const std::vector<KvCopy> copies = kv_.take_pending_copies();
    if (!copies.empty()) backend_.copy_slots(copies);
    const auto t0 = std::chrono::steady_clock::now();
    const ForwardResult r = backend_.forward(batch, kv_);
    const auto t1 = std::chrono::steady_clock::now();
    sample.step_s = r.predicted_s ? *r.predicted_s : std::chrono::duration<double>(t1 - t0).count();
    for (size_t i = 0; i < seqs.size(); ++i) {
      Sequence& s = seqs[i];
      s.n_computed = s.n_tokens();
      kv_.on_computed(s);
      if (append_sampled) s.tokens.push_back(r.sampled.at(i));
    }
    return sample;
  }

 private:
  Backend& backend_;
  KvManager& kv_;
};

}  // namespace

const char* to_string(ProfilePhase p) { return p == ProfilePhase::prefill ? "prefill" : "decode"; }

void ProfileOptions::validate() const {
  if (batch_sizes.empty()) throw std::invalid_argument("batch sizes: give at least one (e.g. 1,32)");
  for (int b : batch_sizes)
    if (b < 1 || b > 4096) throw std::invalid_argument("batch size (" + std::to_string(b) + ") must be in [1, 4096]");
  if (prompt_len < 1) throw std::invalid_argument("prompt_len (" + std::to_string(prompt_len) + ") must be >= 1");
  if (decode_steps < 1)
    throw std::invalid_argument("decode_steps (" + std::to_string(decode_steps) + ") must be >= 1");
  if (!(min_prefill_s >= 0.0)) throw std::invalid_argument("min_prefill_s must be >= 0");
}

void ProfileOptions::check_fits(const ModelConfig& model) const {
  const int64_t n_positions = int64_t(prompt_len) + decode_steps;
  if (n_positions >= model.max_position)
    throw std::invalid_argument("prompt_len + decode_steps (" + std::to_string(n_positions) + ") must be below " +
                                model.name + "'s max length " + std::to_string(model.max_position));
}

ProfileReport profile_backend(Backend& backend, const ProfileOptions& options) {
  options.validate();
  const ModelConfig& model = backend.config();
  options.check_fits(model);
  const int n_final = options.prompt_len + options.decode_steps + 1;
  const int max_batch = *std::max_element(options.batch_sizes.begin(), options.batch_sizes.end());

  KvConfig kv_config;
  kv_config.kind = KvKind::paged;
  kv_config.block_size = kBlockSize;
  kv_config.prefix_caching = false;  // random prompts share nothing; keep every step honest
  kv_config.max_model_len = n_final;
  const int64_t blocks_per_seq = (n_final + kBlockSize - 1) / kBlockSize;
  const int64_t n_slots = int64_t(max_batch) * blocks_per_seq * kBlockSize;
  backend.init_kv(n_slots);
  std::unique_ptr<KvManager> kv = make_kv_manager(kv_config, n_slots);
  StepRunner runner(backend, *kv);

  ProfileReport report;
  report.backend = backend.name();
  report.model = model;
  report.kv_dtype_bytes = static_cast<int>(backend.kv_bytes_per_slot() / (2ll * model.n_layers * model.kv_dim()));
  report.options = options;

  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<TokenId> token(0, model.vocab_size - 1);
  uint64_t next_id = 1;
  auto fresh_sequences = [&](int n) {
    std::vector<Sequence> seqs(n);
    for (Sequence& s : seqs) {
      s.id = s.request_id = next_id++;
      s.tokens.resize(options.prompt_len);
      for (TokenId& t : s.tokens) t = token(rng);
      s.n_prompt = options.prompt_len;
      s.sampling.max_tokens = options.decode_steps + 1;
      kv->allocate(s, options.prompt_len);
    }
    return seqs;
  };
  auto release = [&](std::vector<Sequence>& seqs) {
    for (Sequence& s : seqs) kv->release(s);
  };

  // Warm-up: first touch of the weights and of the BLAS threads.
  {
    std::vector<Sequence> warm = fresh_sequences(1);
    warm[0].tokens.resize(std::min(options.prompt_len, 8));
    runner.run(ProfilePhase::prefill, warm, false);
    release(warm);
  }

  std::vector<int> prefill_batches = options.batch_sizes;
  prefill_batches.push_back(1);
  std::sort(prefill_batches.begin(), prefill_batches.end());
  prefill_batches.erase(std::unique(prefill_batches.begin(), prefill_batches.end()), prefill_batches.end());

  for (int b : prefill_batches) {
    std::vector<Sequence> seqs = fresh_sequences(b);
    std::vector<double> times;
    double total = 0.0;
    while (times.empty() || (total < options.min_prefill_s && times.size() < kMaxPrefillRepeats)) {
      for (Sequence& s : seqs) s.n_computed = 0;  // the same step again: same slots, same K/V
      const ProfileSample sample = runner.run(ProfilePhase::prefill, seqs, false);
      report.samples.push_back(sample);
      times.push_back(sample.step_s);
      total += sample.step_s;
    }
    const double m = median(times);
    report.figures.push_back({ProfilePhase::prefill, b, 0, int64_t(b) * options.prompt_len,
                              static_cast<int>(times.size()), m, double(b) * options.prompt_len / m});

    // Decode from the prefilled context when this batch size is one asked for.
    if (std::find(options.batch_sizes.begin(), options.batch_sizes.end(), b) == options.batch_sizes.end()) {
      release(seqs);
      continue;
    }
    for (Sequence& s : seqs) s.tokens.push_back(token(rng));  // the prefill's "sampled" token
    std::vector<double> step_times;
    for (int i = 0; i < options.decode_steps; ++i) {
      const ProfileSample sample = runner.run(ProfilePhase::decode, seqs, true);
      report.samples.push_back(sample);
      step_times.push_back(sample.step_s);
    }
    const double dm = median(step_times);
    report.figures.push_back({ProfilePhase::decode, b, options.prompt_len, b, options.decode_steps, dm, b / dm});
    release(seqs);
  }
  std::stable_sort(report.figures.begin(), report.figures.end(),
                   [](const ProfileFigure& a, const ProfileFigure& b) { return a.phase < b.phase; });
  return report;
}

std::string profile_table(const ProfileReport& r) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "model %s (%.1fM params), backend %s, %s\n", r.model.name.c_str(),
                r.model.n_params() / 1e6, r.backend.c_str(), r.device.c_str());
  out << line;
  std::snprintf(line, sizeof line, "%-8s %6s %8s %8s %6s %12s %12s\n", "phase", "batch", "context", "tokens",
                "steps", "median_ms", "tokens/s");
  out << line;
  for (const ProfileFigure& f : r.figures) {
    std::snprintf(line, sizeof line, "%-8s %6d %8d %8lld %6d %12.3f %12.1f\n", to_string(f.phase), f.batch_size,
                  f.context, static_cast<long long>(f.n_tokens), f.n_steps, f.median_step_s * 1e3, f.tokens_per_s);
    out << line;
  }
  return out.str();
}

std::string profile_json(const ProfileReport& r) {
  using nlohmann::json;
  json j;
  j["schema"] = "servelab.profile/1";
  j["backend"] = r.backend;
  j["device"] = r.device;
  const ModelConfig& m = r.model;
  j["model"] = {{"name", m.name},           {"n_params", m.n_params()},       {"hidden_size", m.hidden_size},
                {"n_layers", m.n_layers},   {"n_heads", m.n_heads},           {"n_kv_heads", m.n_kv_heads},
                {"head_dim", m.head_dim()}, {"intermediate_size", m.intermediate_size},
                {"vocab_size", m.vocab_size}};
  j["options"] = {{"batch_sizes", r.options.batch_sizes},
                  {"prompt_len", r.options.prompt_len},
                  {"decode_steps", r.options.decode_steps},
                  {"seed", r.options.seed}};
  j["kv_dtype_bytes"] = r.kv_dtype_bytes;
  json figures = json::array();
  for (const ProfileFigure& f : r.figures)
    figures.push_back({{"phase", to_string(f.phase)}, {"batch_size", f.batch_size}, {"context", f.context},
                       {"n_tokens", f.n_tokens}, {"n_steps", f.n_steps}, {"median_step_s", f.median_step_s},
                       {"tokens_per_s", f.tokens_per_s}});
  j["figures"] = std::move(figures);
  json samples = json::array();
  for (const ProfileSample& s : r.samples)
    samples.push_back({{"phase", to_string(s.phase)}, {"batch_size", s.batch_size}, {"n_tokens", s.n_tokens},
                       {"sum_context", s.sum_context}, {"n_sampled", s.n_sampled}, {"step_s", s.step_s}});
  j["samples"] = std::move(samples);
  return j.dump(2) + "\n";
}

}  // namespace servelab
