#include "loadgen/lora_workload.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "loadgen/rng.h"

namespace servelab {

std::vector<std::string> LoraWorkloadSpec::numbered(int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back("lora-" + std::to_string(i));
  return names;
}

LoraConfig LoraWorkloadSpec::engine_config() const {
  LoraConfig c;
  c.enabled = enabled();
  c.max_loras = max_loras;
  c.max_cpu_loras = max_cpu_loras;
  c.max_lora_rank = rank;
  c.group_prompts = group_prompts;
  c.admit_when_packed = admit_when_packed;
  c.admit_wait_s = admit_wait_s;
  return c;
}

LoraChooser::LoraChooser(const LoraWorkloadSpec& spec) : spec_(&spec) {
  double total = 0.0;
  for (size_t i = 0; i < spec.adapters.size(); ++i) {
    total += spec.distribution == LoraPopularity::zipf ? 1.0 / std::pow(double(i + 1), spec.zipf_s) : 1.0;
    cumulative_.push_back(total);
  }
  for (double& c : cumulative_) c /= total;
  if (!cumulative_.empty()) cumulative_.back() = 1.0;
}

std::string LoraChooser::choose(Rng& rng) const {
  if (cumulative_.empty()) return "";
  const double u = rng.uniform();
  if (u < spec_->base_fraction) return "";
  const double v = spec_->base_fraction < 1.0 ? (u - spec_->base_fraction) / (1.0 - spec_->base_fraction) : 0.0;
  const size_t i = size_t(std::upper_bound(cumulative_.begin(), cumulative_.end(), v) - cumulative_.begin());
  return spec_->adapters[std::min(i, cumulative_.size() - 1)];
}

double LoraChooser::probability(size_t i) const {
  return cumulative_[i] - (i == 0 ? 0.0 : cumulative_[i - 1]);
}

WorkloadAdapters::WorkloadAdapters(const LoraWorkloadSpec& spec, const ModelConfig& model, uint64_t seed,
                                   bool with_weights)
    : spec_(spec), model_(model), seed_(seed), with_weights_(with_weights) {
  for (size_t i = 0; i < spec_.adapters.size(); ++i) index_.emplace(spec_.adapters[i], i);
  cap_ = size_t(std::max(1, spec_.max_cpu_loras > 0 ? spec_.max_cpu_loras : spec_.max_loras));
}

WorkloadAdapters::~WorkloadAdapters() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  queued_.notify_all();
  if (worker_.joinable()) worker_.join();
}

size_t WorkloadAdapters::index_of(const std::string& name) const {
  const auto at = index_.find(name);
  if (at == index_.end()) throw std::invalid_argument("plan names LoRA adapter '" + name + "', which the run does not have");
  return at->second;
}

std::shared_ptr<LoraAdapter> WorkloadAdapters::draw(size_t i, int threads) const {
  std::shared_ptr<LoraAdapter> a;
  if (with_weights_) {
    static const std::vector<LoraTarget> all = {LoraTarget::q, LoraTarget::k, LoraTarget::v, LoraTarget::o,
                                                LoraTarget::gate, LoraTarget::up, LoraTarget::down};
    a = std::make_shared<LoraAdapter>(random_lora(model_, spec_.adapters[i], spec_.rank, float(spec_.rank), all,
                                                  seed_ * 0x9e3779b97f4a7c15ull + i + 1, threads));
  } else {
    a = std::make_shared<LoraAdapter>();
    a->name = spec_.adapters[i];
    a->rank = spec_.rank;
    a->alpha = float(spec_.rank);
    a->scale = 1.0f;
    a->targets.fill(true);
  }
  a->id = i + 1;
  return a;
}

std::shared_ptr<const LoraAdapter> WorkloadAdapters::keep(size_t i, std::shared_ptr<LoraAdapter> a) {
  ++drawn_;
  if (kept_.size() >= cap_) {  // drop the least recently asked for
    auto oldest = kept_.begin();
    for (auto k = kept_.begin(); k != kept_.end(); ++k)
      if (k->second.used < oldest->second.used) oldest = k;
    kept_.erase(oldest);
  }
  kept_[i] = Kept{a, ++clock_};
  return a;
}

std::shared_ptr<const LoraAdapter> WorkloadAdapters::get(const std::string& name) {
  const size_t i = index_of(name);
  Future pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto k = kept_.find(i); k != kept_.end()) {
      k->second.used = ++clock_;
      return k->second.adapter;
    }
    if (auto u = under_way_.find(i); u != under_way_.end()) pending = u->second;
  }
  if (pending.valid()) return pending.get();
  std::shared_ptr<LoraAdapter> a = draw(i, 0);
  std::lock_guard<std::mutex> lock(mutex_);
  return keep(i, std::move(a));
}

WorkloadAdapters::Future WorkloadAdapters::fetch(const std::string& name) {
  const size_t i = index_of(name);
  std::unique_lock<std::mutex> lock(mutex_);
  if (auto k = kept_.find(i); k != kept_.end()) {
    k->second.used = ++clock_;
    std::promise<std::shared_ptr<const LoraAdapter>> ready;
    ready.set_value(k->second.adapter);
    return ready.get_future().share();
  }
  if (auto u = under_way_.find(i); u != under_way_.end()) return u->second;
  if (!with_weights_) {  // name and shapes only: nothing to wait for
    std::promise<std::shared_ptr<const LoraAdapter>> ready;
    ready.set_value(keep(i, draw(i, 0)));
    return ready.get_future().share();
  }
  std::promise<std::shared_ptr<const LoraAdapter>> promise;
  Future future = promise.get_future().share();
  under_way_[i] = future;
  queue_.emplace_back(i, std::move(promise));
  if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
  lock.unlock();
  queued_.notify_all();
  return future;
}

bool WorkloadAdapters::holds(const std::string& name) const {
  const size_t i = index_of(name);
  std::lock_guard<std::mutex> lock(mutex_);
  return kept_.count(i) > 0 || under_way_.count(i) > 0;
}

int WorkloadAdapters::kept() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return int(kept_.size());
}

int64_t WorkloadAdapters::drawn() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return drawn_;
}

void WorkloadAdapters::work() {
  // Half the cores: the engine's thread and the cuda backend's packing run beside the draws.
  const int threads = std::max(1, int(std::thread::hardware_concurrency()) / 2);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queued_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;  // the queued promises break: nobody waits on them past the run
    auto [i, promise] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::shared_ptr<LoraAdapter> a;
    try {
      a = draw(i, threads);
    } catch (...) {
      lock.lock();
      under_way_.erase(i);
      promise.set_exception(std::current_exception());
      continue;
    }
    lock.lock();
    under_way_.erase(i);
    promise.set_value(keep(i, std::move(a)));
  }
}

}  // namespace servelab
