#pragma once
// Multi-LoRA workloads: which adapter each planned request names (`workload.lora`), drawn from a
// popularity distribution with its own seeded stream, and the adapters an in-process engine runs.
//
//   workload:
//     lora:
//       adapters: [sql, chat, math]   # or count: 64 (named lora-0 .. lora-63)
//       distribution: zipf            # uniform (default) | zipf: P(i) ∝ 1 / (i + 1)^zipf_s
//       zipf_s: 1.0
//       base_fraction: 0.1            # share of requests naming no adapter (the base model)
//       rank: 16                      # in-process: random adapters of this rank (q, k, v, o, gate, up, down)
//       max_loras: 4                  # in-process engine: adapters running at once (default 1)
//       max_cpu_loras: 0              # in-process engine: adapters kept in host memory (0 = max_loras)
//       group_prompts: true           # in-process engine: a step's prompts of one adapter together
//       admit_when_packed: true       # in-process engine: a request whose adapter is still being
//                                     # packed for its load lets others go first
//       admit_wait_s: 0.5             # in-process engine: ... for at most this long after its arrival
// Over HTTP (`bench`, `target:`) each request's adapter goes out as its `model` field, so the same
// scenario measures vLLM's LoRA path (serve the adapters under these names there).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/lora/lora_adapter.h"
#include "engine/lora/lora_config.h"

namespace servelab {

class Rng;

enum class LoraPopularity { uniform, zipf };

struct LoraWorkloadSpec {
  std::vector<std::string> adapters;  ///< names; from count when given as count: N
  LoraPopularity distribution = LoraPopularity::uniform;
  double zipf_s = 1.0;
  double base_fraction = 0.0;         ///< in [0, 1]
  int rank = 16;
  int max_loras = 1;
  int max_cpu_loras = 0;
  bool group_prompts = true;
  bool admit_when_packed = true;
  double admit_wait_s = 0.5;
  bool enabled() const { return !adapters.empty(); }
  /// "lora-0" .. "lora-{count-1}".
  static std::vector<std::string> numbered(int count);
  /// The engine's LoRA settings for an in-process run (max_lora_rank = rank).
  LoraConfig engine_config() const;
};

/// Picks each request's adapter: weights from the distribution, one uniform draw per request.
class LoraChooser {
 public:
  explicit LoraChooser(const LoraWorkloadSpec& spec);
  /// The adapter of one request ("" = the base model), from one uniform draw of rng.
  std::string choose(Rng& rng) const;
  /// The probability of adapter i (excluding base_fraction), for tests and docs.
  double probability(size_t i) const;

 private:
  const LoraWorkloadSpec* spec_;
  std::vector<double> cumulative_;  // ascending, ends at 1
};

/// The adapters a run serves, by name: a random adapter of `model`'s shapes per name (rank
/// spec.rank, every target, alpha = rank, seeded by (seed, its index), ids 1..N), drawn the first
/// time a request names it, as a server reads an adapter from disk on its first request, rather
/// than all at the start: 512 rank-16 adapters of a 7B model are 82 GB in fp32. At most
/// max_cpu_loras (0: max_loras) of the drawn ones are kept here, the least recently asked for
/// dropped first (requests holding one keep it alive; one asked for again is drawn again,
/// identically, with its id, so its slot and prefix-cache entries stay valid). Without
/// `with_weights` (the sim backend and HTTP, which never read them) only name, id, rank and
/// targets, kept and dropped alike: the sim prices packing an adapter object the backend has no
/// image of, as the cuda backend packs one drawn again.
///
/// fetch() draws on a worker thread of its own (one draw at a time, on half the cores), as a
/// server's HTTP session reads an adapter from disk before handing the request to the engine
/// (server/request_prepare.cpp): the in-process run holds that request back meanwhile
/// (LoraSource::ready) while the engine goes on with the others. Thread-safe.
class WorkloadAdapters {
 public:
  using Future = std::shared_future<std::shared_ptr<const LoraAdapter>>;
  WorkloadAdapters(const LoraWorkloadSpec& spec, const ModelConfig& model, uint64_t seed, bool with_weights);
  ~WorkloadAdapters();  ///< finishes the draw under way, drops the queued ones
  WorkloadAdapters(const WorkloadAdapters&) = delete;
  WorkloadAdapters& operator=(const WorkloadAdapters&) = delete;
  /// The adapter `name`, drawn now on this thread unless kept or under way (then waited for).
  /// std::invalid_argument when the workload has no adapter of that name.
  std::shared_ptr<const LoraAdapter> get(const std::string& name);
  /// The adapter `name`: ready when kept (or without weights), else drawn on the worker (one
  /// future per adapter under way). std::invalid_argument for an unknown name.
  Future fetch(const std::string& name);
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  /// Whether `name` is kept here or being drawn (a fetch of it now reads nothing new).
  bool holds(const std::string& name) const;
  /// On the sim (no weights to draw): what reading each adapter takes (Backend::lora_read_seconds),
  /// which LoraSource holds a request back for on the virtual clock. Set before the run.
  void price_reads(std::function<double(const LoraAdapter&)> seconds) { read_seconds_ = std::move(seconds); }
  bool prices_reads() const { return bool(read_seconds_); }
  double read_seconds(const LoraAdapter& adapter) const { return read_seconds_ ? read_seconds_(adapter) : 0.0; }
  size_t size() const { return index_.size(); }
  int kept() const;        ///< adapters held here now
  int64_t drawn() const;   ///< adapters drawn so far (again after a drop counts)

 private:
  struct Kept {
    std::shared_ptr<const LoraAdapter> adapter;
    uint64_t used = 0;
  };
  size_t index_of(const std::string& name) const;
  std::shared_ptr<LoraAdapter> draw(size_t i, int threads) const;
  std::shared_ptr<const LoraAdapter> keep(size_t i, std::shared_ptr<LoraAdapter> a);  // lock held
  void work();

  LoraWorkloadSpec spec_;
  ModelConfig model_;
  uint64_t seed_ = 0;
  bool with_weights_ = false;
  size_t cap_ = 0;
  std::unordered_map<std::string, size_t> index_;
  mutable std::mutex mutex_;
  std::condition_variable queued_;
  std::unordered_map<size_t, Kept> kept_;
  std::unordered_map<size_t, Future> under_way_;  // drawn or queued on the worker
  std::deque<std::pair<size_t, std::promise<std::shared_ptr<const LoraAdapter>>>> queue_;
  uint64_t clock_ = 0;
  int64_t drawn_ = 0;
  bool stop_ = false;
  std::thread worker_;  // started by the first fetch that needs it
  std::function<double(const LoraAdapter&)> read_seconds_;
};

}  // namespace servelab
