#include "engine/backend/profiler.h"
#include "engine/backend/profile_sustained.h"

#include "engine/backend/step_input.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>

#include "engine/backend/make_backend.h"
#include "engine/backend/profile_lora.h"
#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "engine/splitmix64.h"

namespace servelab {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void check_positive(const std::vector<int>& v, const std::string& name, int max) {
  if (v.empty()) throw std::invalid_argument(name + ": give at least one value");
  for (int x : v)
    if (x < 1 || x > max)
      throw std::invalid_argument(name + " (" + std::to_string(x) + ") must be in [1, " + std::to_string(max) + "]");
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g GB", bytes / 1e9);
  return buf;
}

/// bf16 bits of x (round to nearest even), for the K/V fill of 2-byte arenas.
uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace

const char* to_string(ProfilePhase p) {
  switch (p) {
    case ProfilePhase::prefill: return "prefill";
    case ProfilePhase::decode: return "decode";
    case ProfilePhase::chunk: return "chunk";
    case ProfilePhase::mixed: return "mixed";
    case ProfilePhase::verify: return "verify";
  }
  return "?";
}

int64_t ProfilePoint::n_slots() const {
  int64_t n = 0;
  for (const Seq& s : seqs) n += (int64_t(s.context) + s.n_new + kProfileBlockSize - 1) / kProfileBlockSize * kProfileBlockSize;
  return n;
}

int ProfilePoint::max_len() const {
  int n = 0;
  for (const Seq& s : seqs) n = std::max(n, s.context + s.n_new);
  return n;
}

std::string ProfilePoint::describe() const {
  int64_t rows = 0, max_context = 0;
  for (const Seq& s : seqs) {
    rows += s.n_new;
    max_context = std::max<int64_t>(max_context, s.context);
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s %zu seqs, %lld rows, context %lld", to_string(phase), seqs.size(),
                static_cast<long long>(rows), static_cast<long long>(max_context));
  std::string out = buf;
  if (n_padding > 0) out += " + " + std::to_string(n_padding) + " padding rows";
  return out;
}

void ProfileOptions::validate() const {
  check_positive(prefill_lens, "prefill lengths", 1 << 20);
  check_positive(batch_sizes, "batch sizes", 4096);
  if (!extra_decode_batches.empty()) check_positive(extra_decode_batches, "extra decode batch sizes", 4096);
  check_positive(contexts, "contexts", 1 << 20);
  check_positive(chunk_lens, "chunk lengths", 1 << 20);
  check_positive(prompt_lens, "prompt lengths", 1 << 20);
  for (int k : verify_ks)
    if (k < 1 || k > 16) throw std::invalid_argument("verify k (" + std::to_string(k) + ") must be in [1, 16]");
  if (max_rows < 1) throw std::invalid_argument("max_rows (" + std::to_string(max_rows) + ") must be >= 1");
  if (max_len < 0) throw std::invalid_argument("max_len (" + std::to_string(max_len) + ") must be >= 0 (0 = no cap)");
  if (repeats < 1) throw std::invalid_argument("repeats (" + std::to_string(repeats) + ") must be >= 1");
  if (!(min_point_s >= 0.0)) throw std::invalid_argument("min_point_s must be >= 0");
  if (warmup < 0 || warmup > 100) throw std::invalid_argument("warmup (" + std::to_string(warmup) + ") must be in [0, 100]");
  if (!(warmup_s >= 0.0 && warmup_s <= 600.0)) throw std::invalid_argument("warmup_s must be in [0, 600] seconds");
  if (lead_in < 0 || lead_in > 100) throw std::invalid_argument("lead_in (" + std::to_string(lead_in) + ") must be in [0, 100]");
  if (lead_in > 0 && !interleave) throw std::invalid_argument("lead_in needs interleave (decodes before each timed step of a round)");
  if (lead_in_self && !interleave) throw std::invalid_argument("lead_in_self needs interleave (a twin before each timed step of a round)");
  if (lora_rank < 0 || lora_rank > 256) throw std::invalid_argument("lora_rank (" + std::to_string(lora_rank) + ") must be in [0, 256]");
  if (lora_rank > 0) check_positive(lora_adapters, "LoRA adapter counts", 1024);
  if (!(sustained_s >= 0.0 && sustained_s <= 600.0))
    throw std::invalid_argument("sustained_s (" + std::to_string(sustained_s) + ") must be in [0, 600] seconds");
  if (max_kv_bytes < 0)
    throw std::invalid_argument("max_kv_bytes (" + std::to_string(max_kv_bytes) + ") must be >= 0 (0 = no cap)");
  if (kv_spread && max_kv_bytes == 0)
    throw std::invalid_argument("kv_spread needs max_kv_bytes: the arena the sequences spread over (--kv-gb)");
  if (kv_spread && kv_kind != KvKind::naive)
    throw std::invalid_argument("kv_spread applies to naive KV (paged blocks are placed by the manager's free list)");
}

void ProfileOptions::check_fits(const ModelConfig& model) const {
  int longest = 1;
  for (const ProfilePoint& p : profile_grid(*this)) longest = std::max(longest, p.max_len());
  if (longest > model.max_position)
    throw std::invalid_argument("the profile grid's longest sequence (" + std::to_string(longest) + " tokens) exceeds " +
                                model.name + "'s max length " + std::to_string(model.max_position));
}

/// The grid's batch sizes, ascending, each once (the middle one sets the mixed steps and the lead-in).
static std::vector<int> sorted_batches(const ProfileOptions& o) {
  std::vector<int> batches = o.batch_sizes;
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  return batches;
}

std::vector<ProfilePoint> profile_grid(const ProfileOptions& o) {
  o.validate();
  std::vector<ProfilePoint> points;
  using Seq = ProfilePoint::Seq;
  auto add = [&](ProfilePhase phase, std::vector<Seq> seqs) { points.push_back({phase, std::move(seqs)}); };
  for (int t : o.prefill_lens) add(ProfilePhase::prefill, {{0, t}});
  for (int p : o.prompt_lens)
    for (int b : o.batch_sizes)
      if (b > 1 && int64_t(b) * p <= o.max_rows) add(ProfilePhase::prefill, std::vector<Seq>(b, {0, p}));
  // A point of `rows` new rows at context c, moved earlier where it would pass max_len.
  const auto start = [&](int c, int rows) { return o.max_len > 0 ? std::max(0, std::min(c, o.max_len - rows)) : c; };
  for (int b : o.batch_sizes)
    for (int c : o.contexts) add(ProfilePhase::decode, std::vector<Seq>(b, {start(c, 1), 1}));
  for (int b : o.extra_decode_batches)
    for (int c : o.contexts) add(ProfilePhase::decode, std::vector<Seq>(b, {start(c, 1), 1}));
  if (o.spread_decodes) {  // the same points with contexts spread around c (profile_spread.h)
    std::vector<int> spread = o.batch_sizes;
    spread.insert(spread.end(), o.extra_decode_batches.begin(), o.extra_decode_batches.end());
    for (int b : spread)
      for (int c : o.contexts) {
        if (b < 2 || c < 4) continue;
        std::vector<Seq> seqs;
        for (int ctx : spread_contexts(c, b, o.spread_shape)) seqs.push_back({start(ctx, 1), 1});
        add(ProfilePhase::decode, std::move(seqs));
      }
  }
  const std::vector<int> batches = sorted_batches(o);
  const int c_mid = o.contexts[o.contexts.size() / 2];
  if (o.padded_decodes) {  // static batching's decodes once some sequences finished
    // At the bucket edges too: a padded step runs outside the decode graphs, but its GEMMs still
    // change algorithm per row bucket (cuda: 9 rows cost ~12% more than 8).
    std::vector<int> padded = batches;
    padded.insert(padded.end(), o.extra_decode_batches.begin(), o.extra_decode_batches.end());
    std::sort(padded.begin(), padded.end());
    padded.erase(std::unique(padded.begin(), padded.end()), padded.end());
    for (int b : padded)
      if (b >= 2) {
        const int real = (b + 1) / 2;
        points.push_back({ProfilePhase::decode, std::vector<Seq>(real, {c_mid, 1}), b - real});
      }
  }
  for (int t : o.chunk_lens) {
    int last = -1;
    for (int c : o.contexts)  // contexts ascend: a start moved down may equal the one before
      if (const int at = start(c, t); at != last) {
        add(ProfilePhase::chunk, {{at, t}});
        last = at;
      }
  }
  // Mixed: decodes at the middle context plus one chunk, at the middle and the largest batch. The
  // chunk takes what the step's token budget (max_rows) leaves beside the decodes, as the engine's
  // chunked prefill does: a 512-row chunk beside 11 decodes is 501 rows under a budget of 512 (on
  // an H200 a llama3-8b mixed step of 523 rows cost 2.6 ms more than its twin of 512, 18.7 ms:
  // results/sim-validation/mixed-2026-11-30/, grid-3773).
  std::vector<int> mixed_batches = {batches[batches.size() / 2]};
  if (batches.back() != mixed_batches[0]) mixed_batches.push_back(batches.back());
  for (int b : mixed_batches) {
    int last = -1;
    for (int t : o.chunk_lens) {
      const int chunk = b < o.max_rows ? std::min(t, o.max_rows - b) : t;
      if (chunk == last) continue;  // two chunk lengths capped alike
      last = chunk;
      std::vector<Seq> seqs(b, {c_mid, 1});
      seqs.push_back({start(c_mid, chunk), chunk});
      add(ProfilePhase::mixed, std::move(seqs));
    }
  }
  // Verification: every sequence scores its last token and k drafts (k + 1 rows, all drawn).
  for (int k : o.verify_ks)
    for (int b : batches)  // like decodes, every batch size (max_rows bounds batched prefills only)
      for (int c : o.contexts) add(ProfilePhase::verify, std::vector<Seq>(b, {start(c, k + 1), k + 1, k}));
  return points;
}

ProfilePlan plan_profile(const ProfileOptions& options, int64_t kv_bytes_per_slot) {
  if (kv_bytes_per_slot < 1)
    throw std::invalid_argument("kv_bytes_per_slot (" + std::to_string(kv_bytes_per_slot) + ") must be >= 1");
  const int64_t max_slots = options.max_kv_bytes > 0 ? options.max_kv_bytes / kv_bytes_per_slot : INT64_MAX;
  ProfilePlan plan;
  int64_t smallest = INT64_MAX;
  for (ProfilePoint& p : profile_grid(options)) {
    const int64_t need = p.n_slots();
    smallest = std::min(smallest, need);
    if (need > max_slots) {
      plan.skipped.push_back(std::move(p));
      continue;
    }
    plan.n_slots = std::max(plan.n_slots, need);
    plan.max_len = std::max(plan.max_len, p.max_len());
    plan.points.push_back(std::move(p));
  }
  if (plan.points.empty())
    throw std::invalid_argument("no profile grid point fits a KV budget of " + gb(double(options.max_kv_bytes)) +
                                ": the smallest needs " + gb(double(smallest) * double(kv_bytes_per_slot)) +
                                " (raise the budget, or use smaller batches and contexts)");
  if (options.kv_spread) plan.n_slots = max_slots;  // the whole budget, as the runs' arena
  return plan;
}

std::string sim_hardware_for_device(const std::string& description) {
  std::string d = description;
  std::transform(d.begin(), d.end(), d.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto has = [&](const char* s) { return d.find(s) != std::string::npos; };
  if (has("h200")) return "h200";
  if (has("h100")) return "h100";  // the preset is the SXM part (80 GB HBM3)
  if (has("a100") && has("80gb")) return "a100-80gb";
  if (has("l40s")) return "l40s";
  return "";
}

struct ProfileRunner::State {
  Backend& backend;
  std::unique_ptr<KvManager> kv;
  std::mt19937_64 rng;
  std::uniform_int_distribution<TokenId> token;
  uint64_t next_id = 1;
  bool spread = false;
  State(Backend& b, uint64_t seed) : backend(b), rng(seed), token(2, std::max(2, b.config().vocab_size - 1)) {}
};

ProfileRunner::ProfileRunner(Backend& backend, int64_t n_slots, int max_len, uint64_t seed, bool fill_kv,
                             int64_t fill_chunk_bytes, KvKind kv_kind, bool spread)
    : state_(std::make_unique<State>(backend, seed)) {
  state_->spread = spread;
  KvConfig kv_config;
  kv_config.kind = kv_kind;
  kv_config.reserve = NaiveReserve::oracle;  // naive: a region of exactly the sequence's tokens
  kv_config.block_size = kProfileBlockSize;
  kv_config.prefix_caching = false;  // random prompts share nothing; keep every step honest
  kv_config.max_model_len = std::max(1, max_len);
  backend.init_kv(n_slots);
  state_->kv = make_kv_manager(kv_config, n_slots);
  if (!fill_kv) return;
  // Random K/V in [-1, 1] at the arena's element size (2: bf16, 4: fp32): fill_chunk_bytes of slots
  // drawn here into a host pool and written by swap_in, then repeated across the arena by one copy_slots
  // call (many runs of that chunk: the cuda backend copies them in one launch of many blocks), so
  // a 60 GB GPU arena fills by device copies instead of 60 GB over the host link.
  // A tensor-parallel backend's slot is one GPU's share; its swap layout holds every rank's.
  const int64_t slot_bytes = backend.kv_bytes_per_slot() * backend.caps().tensor_parallel;
  const ModelConfig& m = backend.config();
  const int64_t elem = slot_bytes / std::max<int64_t>(1, 2ll * m.n_layers * m.kv_dim());
  const int64_t first = std::clamp<int64_t>(fill_chunk_bytes / slot_bytes, 1, n_slots);
  std::unique_ptr<HostKvPool> pool = backend.make_host_pool(first);
  std::byte* host = pool->data();  // the backend's own pool layout: random bytes fill any layout
  if (host == nullptr) return;     // a backend without K/V memory (sim)
  const size_t n_bytes = size_t(pool->bytes());
  uint64_t state = seed ^ 0x6b765f66696c6cull;
  const auto uniform = [&] { return float(splitmix64_next(state) >> 40) * (2.0f / 16777216.0f) - 1.0f; };
  if (elem == 4) {
    for (size_t i = 0; i + 4 <= n_bytes; i += 4) {
      const float x = uniform();
      std::memcpy(host + i, &x, 4);
    }
  } else {
    for (size_t i = 0; i + 2 <= n_bytes; i += 2) {
      const uint16_t x = bf16_bits(uniform());
      std::memcpy(host + i, &x, 2);
    }
  }
  const KvSwap run{0, 0, first};
  backend.swap_in(std::span<const KvSwap>(&run, 1), *pool);
  std::vector<KvCopy> copies;
  for (int64_t at = first; at < n_slots; at += first) copies.push_back({0, at, std::min(first, n_slots - at)});
  if (!copies.empty()) backend.copy_slots(copies);
}

ProfileRunner::~ProfileRunner() = default;

ProfileSample ProfileRunner::run(const ProfilePoint& p, int warmup, int repeats, double min_s) {
  State& st = *state_;
  KvManager& kv = *st.kv;
  std::vector<Sequence> seqs(p.seqs.size());
  std::vector<Sequence> spacers;  // spread: untimed allocations that push the next sequence on
  spacers.reserve(seqs.size());
  // Spread: the arena's free room shared evenly, one gap after each region but the last.
  int64_t point_slots = 0;
  for (const ProfilePoint::Seq& q : p.seqs) point_slots += q.context + q.n_new;
  const int64_t gap = st.spread ? std::max<int64_t>(0, kv.free_slots() - point_slots) / int64_t(seqs.size()) : 0;
  auto release_all = [&](size_t n_seqs) {
    for (size_t j = 0; j < n_seqs; ++j) kv.release(seqs[j]);
    for (Sequence& s : spacers) kv.release(s);
  };
  Batch batch;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = seqs[i];
    const int n = p.seqs[i].context + p.seqs[i].n_new;
    s.id = s.request_id = st.next_id++;
    s.tokens.resize(n);
    for (TokenId& t : s.tokens) t = st.token(st.rng);
    s.n_prompt = n;
    s.sampling.max_tokens = 1;
    if (!kv.can_allocate(s, n)) {
      release_all(i);
      throw std::logic_error("profile: the KV arena is too small for " + p.describe());
    }
    kv.allocate(s, n);
    if (gap > 0 && i + 1 < seqs.size() && gap <= std::numeric_limits<int>::max()) {
      Sequence& sp = spacers.emplace_back();
      sp.id = sp.request_id = st.next_id++;
      sp.tokens.assign(size_t(gap), 2);
      sp.n_prompt = static_cast<int>(gap);
      sp.sampling.max_tokens = 1;
      if (kv.can_allocate(sp, static_cast<int>(gap))) kv.allocate(sp, static_cast<int>(gap));
      else spacers.pop_back();
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i) {  // a verifying sequence holds its drafts apart from its tokens
    const int n_draft = p.seqs[i].n_draft;
    if (n_draft <= 0) continue;
    seqs[i].spec_tokens.assign(seqs[i].tokens.end() - n_draft, seqs[i].tokens.end());
    seqs[i].tokens.resize(seqs[i].tokens.size() - size_t(n_draft));
    seqs[i].n_prompt -= n_draft;
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    batch.entries.push_back({&seqs[i], p.seqs[i].n_new, true});
    batch.entries.back().lora_slot = p.seqs[i].lora_slot;
  }
  batch.n_padding_tokens = p.n_padding;
  ProfileSample sample;
  sample.phase = p.phase;
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i].n_computed = p.seqs[i].context;
  Step step;  // built once: the engine builds a step outside the backend's time too
  build_step_input(batch, kv, st.backend.config().vocab_size, step);
  if (std::any_of(p.seqs.begin(), p.seqs.end(), [](const ProfilePoint::Seq& q) { return q.lora_slot >= 0; }))
    for (const ProfilePoint::Seq& q : p.seqs) step.seq_lora_slot.push_back(q.lora_slot);  // as the engine tells a pricing backend
  sample.shape = StepShape::of(step);
  auto once = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    const StepOutput res = st.backend.execute(step);
    const auto t1 = std::chrono::steady_clock::now();
    return res.predicted_s ? *res.predicted_s : std::chrono::duration<double>(t1 - t0).count();
  };
  for (int w = 0; w < warmup; ++w) once();
  double total = 0.0;
  for (int r = 0; r < repeats && (r == 0 || total < min_s); ++r) {
    const double t = once();
    sample.times_s.push_back(t);
    total += t;
  }
  sample.step_s = median(sample.times_s);
  release_all(seqs.size());
  return sample;
}

std::vector<int> bucket_edge_batches(const std::vector<int>& batch_sizes, const std::vector<int>& buckets) {
  std::vector<int> out;
  if (batch_sizes.empty()) return out;
  const int largest = *std::max_element(batch_sizes.begin(), batch_sizes.end());
  int below = 0;  // the bucket before b
  for (int b : buckets) {
    if (b > largest) break;
    const bool covered = std::any_of(batch_sizes.begin(), batch_sizes.end(), [&](int x) { return x > below && x <= b; });
    if (!covered) out.push_back(b);
    below = b;
  }
  return out;
}

const ProfilePoint* lead_in_point(const std::vector<ProfilePoint>& points, const ProfileOptions& o) {
  const std::vector<int> batches = sorted_batches(o);
  const int b_mid = batches[batches.size() / 2], c_mid = o.contexts[o.contexts.size() / 2];
  const ProfilePoint* any = nullptr;
  for (const ProfilePoint& p : points) {
    if (p.phase != ProfilePhase::decode || p.n_padding > 0) continue;
    if (int(p.seqs.size()) == b_mid && p.seqs[0].context == c_mid) return &p;
    if (!any) any = &p;
  }
  return any;
}

ProfileReport profile_backend(Backend& backend, const ProfileOptions& asked,
                              const std::function<void(const std::string&)>& progress) {
  asked.validate();
  ProfileOptions options = asked;
  const std::vector<int> buckets = backend.decode_row_buckets();
  if (options.bucket_edges) options.extra_decode_batches = bucket_edge_batches(options.batch_sizes, buckets);
  const ModelConfig& model = backend.config();
  options.check_fits(model);
  const auto t_start = std::chrono::steady_clock::now();
  const ProfilePlan plan = plan_profile(options, backend.kv_bytes_per_slot());

  ProfileReport report;
  report.backend = backend.name();
  report.model = model;
  report.tensor_parallel = backend.caps().tensor_parallel;
  report.kv_dtype_bytes = backend.kv_cache_spec().stored_element_bytes();
  report.options = options;
  report.kv_bytes_per_slot = backend.kv_bytes_per_slot();
  report.kv_arena_bytes = plan.n_slots * report.kv_bytes_per_slot;
  report.decode_row_buckets = buckets;
  report.skipped = plan.skipped;
  if (progress)
    for (const ProfilePoint& p : plan.skipped)
      progress("skipped (needs " + gb(double(p.n_slots()) * double(backend.kv_bytes_per_slot())) + " of KV, budget " +
               gb(double(options.max_kv_bytes)) + "): " + p.describe());

  ProfileRunner runner(backend, plan.n_slots, plan.max_len, options.seed, options.fill_kv, int64_t(256) << 20,
                       options.kv_kind, options.kv_spread);
  // Warm-up: first touch of the weights and of the BLAS threads, then steps for warmup_s: on the
  // 2-core VM a process's first ~0.2 s of steps run up to 2x slower (a one-token decode 1.0 ms
  // falling to 0.41 over its first repeats), which the grid's first points (the prefills) took.
  const ProfilePoint warm{ProfilePhase::prefill, {{0, std::min(8, plan.max_len)}}};
  const ProfilePoint* warm_decode = lead_in_point(plan.points, options);
  const auto t_warm = std::chrono::steady_clock::now();
  runner.run(warm, 0, 1, 0.0);
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t_warm).count() < options.warmup_s) {
    runner.run(warm, 0, 1, 0.0);
    if (warm_decode) runner.run(*warm_decode, 0, 1, 0.0);
  }
  std::vector<ProfileSample> timed;
  if (options.interleave) {
    for (int w = 0; w < options.warmup; ++w)
      for (const ProfilePoint& p : plan.points) runner.run(p, 0, 1, 0.0);
    std::vector<size_t> order(plan.points.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::mt19937_64 shuffle(options.seed ^ 0x696e746c76ull);
    timed.resize(plan.points.size());
    const ProfilePoint* lead = options.lead_in > 0 ? lead_in_point(plan.points, options) : nullptr;
    for (int r = 0; r < options.repeats; ++r) {
      std::shuffle(order.begin(), order.end(), shuffle);
      for (size_t i : order) {
        if (lead)
          for (int k = 0; k < options.lead_in; ++k) runner.run(*lead, 0, 1, 0.0);
        if (options.lead_in_self && plan.points[i].phase != ProfilePhase::decode) runner.run(plan.points[i], 0, 1, 0.0);
        ProfileSample one = runner.run(plan.points[i], 0, 1, 0.0);
        if (timed[i].times_s.empty()) timed[i] = std::move(one);
        else timed[i].times_s.push_back(one.times_s.front());
      }
    }
    for (ProfileSample& s : timed) s.step_s = median(s.times_s);
  }
  for (size_t i = 0; i < plan.points.size(); ++i) {
    ProfileSample s = options.interleave ? std::move(timed[i])
                                         : runner.run(plan.points[i], options.warmup, options.repeats, options.min_point_s);
    if (progress) {
      char line[160];
      std::snprintf(line, sizeof line, "[%zu/%zu] %-7s seqs %4lld rows %5lld context %6lld: %10.3f ms", i + 1,
                    plan.points.size(), to_string(s.phase), static_cast<long long>(s.shape.n_seqs),
                    static_cast<long long>(s.shape.n_rows()), static_cast<long long>(s.shape.max_context),
                    s.step_s * 1e3);
      progress(line);
    }
    report.samples.push_back(std::move(s));
  }
  if (options.sustained_s > 0) report.sustained = profile_sustained(runner, plan, report.samples, options, progress);
  if (options.lora_rank > 0) report.lora = profile_lora(backend, runner, options, plan, progress);
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  return report;
}

}  // namespace servelab
