// profile_table and profile_json: a ProfileReport as text and as the servelab.profile/2 JSON the
// sim's profiled cost model reads (engine/backend/cost_model_profile.cpp).
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/backend/cost_model.h"
#include "engine/backend/profile_lora.h"
#include "engine/backend/profiler.h"
#include "engine/backend/profile_sustained.h"
#include "engine/backend/step_shape_json.h"
#include "engine/backend/profile_sustained.h"
#include "engine/kv/kv_manager.h"

namespace servelab {

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
  if (r.host_overhead) {
    std::snprintf(line, sizeof line, "engine host work per step outside execute(): %.1f us + %.2f us per sequence\n",
                  r.host_overhead->per_step_s * 1e6, r.host_overhead->per_seq_s * 1e6);
    out << line;
  }
  if (r.lora) out << lora_profile_table(*r.lora, r.model, r.hardware);
  if (r.sustained) out << sustained_table(*r.sustained);
  return out.str();
}

std::string profile_json(const ProfileReport& r, const ProfileReport* draft) {
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
  j["kv_arena_bytes"] = r.kv_arena_bytes;
  if (!r.decode_row_buckets.empty()) j["decode_row_buckets"] = r.decode_row_buckets;
  const ProfileOptions& o = r.options;
  j["options"] = {{"prefill_lens", o.prefill_lens}, {"batch_sizes", o.batch_sizes}, {"contexts", o.contexts},
                  {"prompt_lens", o.prompt_lens}, {"extra_decode_batches", o.extra_decode_batches},     {"max_rows", o.max_rows},       {"chunk_lens", o.chunk_lens}, {"max_len", o.max_len},
                  {"repeats", o.repeats},           {"min_point_s", o.min_point_s}, {"warmup", o.warmup}, {"warmup_s", o.warmup_s},
                  {"max_kv_bytes", o.max_kv_bytes}, {"fill_kv", o.fill_kv},       {"seed", o.seed},
                  {"kv", to_string(o.kv_kind)},     {"kv_spread", o.kv_spread},
                  {"interleave", o.interleave},     {"lead_in", o.lead_in}, {"lead_in_self", o.lead_in_self},
                  {"padded_decodes", o.padded_decodes}, {"spread_decodes", o.spread_decodes}};
  if (o.spread_decodes) j["options"]["spread_shape"] = to_string(o.spread_shape);
  if (!o.verify_ks.empty()) j["options"]["verify_ks"] = o.verify_ks;
  ordered_json skipped = ordered_json::array();
  for (const ProfilePoint& p : r.skipped) {
    int64_t n_tokens = 0, max_context = 0;
    for (const ProfilePoint::Seq& s : p.seqs) {
      n_tokens += s.n_new;
      max_context = std::max<int64_t>(max_context, int64_t(s.context) + s.n_new);
    }
    skipped.push_back({{"phase", to_string(p.phase)},
                       {"n_seqs", p.seqs.size()},
                       {"n_tokens", n_tokens},
                       {"n_padding_tokens", p.n_padding},
                       {"max_context", max_context},
                       {"kv_bytes", p.n_slots() * r.kv_bytes_per_slot}});
  }
  j["skipped"] = std::move(skipped);
  j["wall_s"] = r.wall_s;
  ordered_json samples = ordered_json::array();
  for (const ProfileSample& s : r.samples) {
    samples.push_back({{"phase", to_string(s.phase)}});
    samples.back().update(step_shape_json(s.shape));
    samples.back()["step_s"] = s.step_s;
    samples.back()["times_s"] = s.times_s;
  }
  j["samples"] = std::move(samples);
  if (!r.all_reduce_s.empty()) {
    ordered_json ar = ordered_json::array();
    for (const auto& [bytes, s] : r.all_reduce_s) ar.push_back({{"bytes", bytes}, {"seconds", s}});
    j["all_reduce"] = std::move(ar);
  }
  if (r.host_overhead) {
    ordered_json pts = ordered_json::array();
    for (const auto& [seqs, s] : r.host_points) pts.push_back({{"seqs", seqs}, {"seconds", s}});
    j["host_overhead"] = {{"per_step_s", r.host_overhead->per_step_s}, {"per_seq_s", r.host_overhead->per_seq_s},
                          {"points", std::move(pts)}};
  }
  if (r.ceilings)
    j["ceilings"] = {{"copy_bytes_s", r.ceilings->copy_bytes_s}, {"gemm_flops", r.ceilings->gemm_flops},
                     {"detail", r.ceilings->detail}};
  if (!r.rounds.empty()) {
    ordered_json rounds = ordered_json::array();
    for (const DraftRound& d : r.rounds) {
      rounds.push_back({{"n_seqs", d.n_seqs}, {"k", d.k}, {"context", d.context}, {"catchup_rows", d.catchup_rows},
                        {"round_s", d.round_s}});
      if (d.first_use_s > 0) rounds.back()["first_use_s"] = d.first_use_s;
    }
    j["rounds"] = std::move(rounds);
  }
  if (r.lora) j["lora"] = lora_profile_json(*r.lora, r.model, r.hardware);
  if (r.sustained) j["sustained"] = sustained_json(*r.sustained);
  if (draft) j["draft"] = ordered_json::parse(profile_json(*draft));
  return j.dump(2) + "\n";
}

}  // namespace servelab
