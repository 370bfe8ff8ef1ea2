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

std::shared_ptr<const LoraAdapter> WorkloadAdapters::get(const std::string& name) {
  const auto at = index_.find(name);
  if (at == index_.end()) throw std::invalid_argument("plan names LoRA adapter '" + name + "', which the run does not have");
  const size_t i = at->second;
  if (auto k = kept_.find(i); k != kept_.end()) {
    k->second.used = ++clock_;
    return k->second.adapter;
  }
  std::shared_ptr<LoraAdapter> a;
  if (with_weights_) {
    static const std::vector<LoraTarget> all = {LoraTarget::q, LoraTarget::k, LoraTarget::v, LoraTarget::o,
                                                LoraTarget::gate, LoraTarget::up, LoraTarget::down};
    a = std::make_shared<LoraAdapter>(random_lora(model_, name, spec_.rank, float(spec_.rank), all,
                                                  seed_ * 0x9e3779b97f4a7c15ull + i + 1));
  } else {
    a = std::make_shared<LoraAdapter>();
    a->name = name;
    a->rank = spec_.rank;
    a->alpha = float(spec_.rank);
    a->scale = 1.0f;
    a->targets.fill(true);
  }
  a->id = i + 1;
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

}  // namespace servelab
