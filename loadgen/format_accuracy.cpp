#include "loadgen/format_accuracy.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "engine/backend/quant_check.h"
#include "engine/model/quantize_weights.h"
#include "loadgen/backend_spec.h"

namespace servelab {
namespace {

std::string reference_description(const BackendSpec& spec) {
  if (spec.kind == BackendKind::cpu) return "the unquantized weights with fp32 K/V on cpu";
  return std::string(to_string(spec.storage_dtype)) + " weights and K/V on " + to_string(spec.kind);
}

}  // namespace

std::map<std::string, analysis::FormatAccuracy> measure_strategy_accuracy(
    const Scenario& sc, const BackendFactory& backends, const std::function<void(const std::string&)>& on_format) {
  std::map<std::string, analysis::FormatAccuracy> out;
  const int positions = sc.report.accuracy_positions;
  if (positions <= 0) return out;
  const BackendSpec& spec = backends.spec();
  // The distinct formats, in the strategies' order, and which strategies run each.
  std::vector<std::pair<std::pair<Quantization, KvCacheDType>, std::vector<std::string>>> formats;
  for (const StrategySpec& st : sc.strategies) {
    const auto f = std::pair{strategy_quantization(sc, st), strategy_kv_cache_dtype(sc, st)};
    if (f.first == Quantization::none && f.second == KvCacheDType::auto_dtype) continue;
    auto it = std::find_if(formats.begin(), formats.end(), [&](const auto& e) { return e.first == f; });
    if (it == formats.end()) it = formats.insert(formats.end(), {f, {}});
    it->second.push_back(st.label);
  }
  if (formats.empty()) return out;
  const ModelConfig config = spec_model_config(spec);
  const std::optional<QuantScheme> checkpoint = spec.kind == BackendKind::sim ? std::nullopt : checkpoint_quant_scheme(spec.model);
  std::string note;
  if (spec.kind == BackendKind::sim) note = "the sim has no weights (run the scenario with backend cpu or cuda, or `servelab quant-check`)";
  else if (checkpoint)
    note = "a " + checkpoint->describe() + " checkpoint has no unquantized weights to compare against";

  std::vector<BackendVariant> variants;
  for (const auto& [f, labels] : formats) {
    const auto [q, kv] = f;
    const QuantScheme scheme = checkpoint ? *checkpoint : scheme_for_model(q, config, spec.fp8_per_channel);
    analysis::FormatAccuracy a;
    a.weights = scheme.quantized() ? scheme.describe() : std::string("unquantized");
    a.kv_cache_dtype = to_string(kv);
    a.note = note;
    a.linear_bytes_per_weight = double(linear_weight_bytes(config, scheme)) / (double(linear_weight_bytes(config, QuantScheme{})) / 2.0);
    for (const std::string& l : labels) out[l] = a;
    const std::string label = a.weights + " + " + a.kv_cache_dtype + " KV";
    variants.push_back({QuantVariant{label, scheme, kv}, [&backends, q, kv, label, &on_format] {
                          if (on_format) on_format(label);
                          return backends.make(q, kv);
                        }});
  }
  if (!note.empty()) return out;

  QuantCheckOptions o;
  o.n_positions = positions;
  // 8 streams, more where a stream of positions / 8 would not fit the model's positions.
  const int per_stream = std::max(1, config.max_position - 16);
  o.n_sequences = std::min(positions, std::max(8, (positions + per_stream - 1) / per_stream));
  o.seed = sc.seed;
  o.n_threads = spec.threads;
  const std::vector<QuantAccuracy> results = quant_check_backends(
      config, [&backends] { return backends.make(Quantization::none, KvCacheDType::auto_dtype); }, variants, o);
  for (size_t i = 0; i < formats.size(); ++i) {
    const QuantAccuracy& r = results[i];
    for (const std::string& l : formats[i].second) {
      analysis::FormatAccuracy& a = out[l];
      a.reference = reference_description(spec);
      a.positions = r.n_positions;
      a.top1_agreement = r.top1_agreement;
      a.mean_kl = r.mean_kl;
      a.max_kl = r.max_kl;
      a.max_logit_error = r.max_logit_error;
      a.rel_logit_error = r.rel_logit_error;
    }
  }
  return out;
}

}  // namespace servelab
