#include "loadgen/lora_workload.h"

#include <algorithm>
#include <cmath>

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

std::vector<std::shared_ptr<const LoraAdapter>> make_workload_adapters(const LoraWorkloadSpec& spec, const ModelConfig& model,
                                                                       uint64_t seed, bool with_weights) {
  const std::vector<LoraTarget> all = {LoraTarget::q, LoraTarget::k, LoraTarget::v, LoraTarget::o,
                                       LoraTarget::gate, LoraTarget::up, LoraTarget::down};
  std::vector<std::shared_ptr<const LoraAdapter>> out;
  for (size_t i = 0; i < spec.adapters.size(); ++i) {
    std::shared_ptr<LoraAdapter> a;
    if (with_weights) {
      a = std::make_shared<LoraAdapter>(
          random_lora(model, spec.adapters[i], spec.rank, float(spec.rank), all, seed * 0x9e3779b97f4a7c15ull + i + 1));
    } else {
      a = std::make_shared<LoraAdapter>();
      a->name = spec.adapters[i];
      a->rank = spec.rank;
      a->alpha = float(spec.rank);
      a->scale = 1.0f;
      a->targets.fill(true);
    }
    a->id = i + 1;
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace servelab
