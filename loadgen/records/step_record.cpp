#include "loadgen/records/json_int.h"
#include "loadgen/records/step_record.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "loadgen/records/jsonl.h"

namespace servelab {

double StepRecord::kv_utilization() const {
  const int64_t used = kv_stored + kv_reserved + kv_internal_frag;
  return used > 0 ? static_cast<double>(kv_stored) / static_cast<double>(used) : 0.0;
}

void to_json(nlohmann::json& j, const StepRecord& s) {
  j = nlohmann::json{{"run", s.run},
                     {"start_s", s.start_s},
                     {"duration_s", s.duration_s},
                     {"batch_size", s.batch_size},
                     {"n_tokens", s.n_tokens},
                     {"n_padding_tokens", s.n_padding_tokens},
                     {"n_waiting", s.n_waiting},
                     {"n_running", s.n_running},
                     {"n_preempted", s.n_preempted},
                     {"n_swap_pool_full", s.n_swap_pool_full},
                     {"kv", {{"capacity", s.kv_capacity},
                             {"stored", s.kv_stored},
                             {"reserved", s.kv_reserved},
                             {"internal_frag", s.kv_internal_frag},
                             {"external_frag", s.kv_external_frag},
                             {"free", s.kv_free}}}};
  if (s.spec_drafts > 0 || s.spec_draft_s > 0)  // drafted for, verified or not
    j["spec_decode"] = {{"num_drafts", s.spec_drafts},
                        {"num_draft_tokens", s.spec_draft_tokens},
                        {"num_accepted_tokens", s.spec_accepted_tokens},
                        {"num_accepted_tokens_per_pos", s.spec_accepted_per_pos},
                        {"num_draft_tokens_per_pos", s.spec_drafted_per_pos},
                        {"draft_s", s.spec_draft_s},
                        {"catch_up_s", s.spec_catch_up_s}};
  if (s.spec_probe_drafts > 0)
    j["spec_decode"]["probe"] = {{"num_drafts", s.spec_probe_drafts},
                                 {"num_draft_tokens", s.spec_probe_draft_tokens},
                                 {"num_accepted_tokens", s.spec_probe_accepted_tokens}};
  if (s.n_loras > 0 || s.n_lora_waits > 0) {
    j["lora"] = {{"n_loras", s.n_loras}, {"n_loads", s.n_lora_loads}};
    if (s.n_lora_waits > 0) j["lora"]["n_waits"] = s.n_lora_waits;
  }
  if (s.n_masks > 0 || s.jump_forward_tokens > 0)
    j["structured"] = {{"n_masks", s.n_masks}, {"mask_s", s.mask_s}, {"jump_forward_tokens", s.jump_forward_tokens}};
  if (s.forward_s > 0) {
    j["host"] = {{"before_s", s.host_before_s}, {"forward_s", s.forward_s}, {"after_s", s.host_after_s}};
    if (s.device_s > 0) j["host"]["device_s"] = s.device_s;
  }
  if (s.max_context > 0) j["max_context"] = s.max_context;
  if (s.roofline) j["roofline"] = *s.roofline;
}

void from_json(const nlohmann::json& j, StepRecord& s) {
  s.run = j.at("run").get<std::string>();
  s.start_s = j.at("start_s").get<double>();
  s.duration_s = j.at("duration_s").get<double>();
  s.batch_size = json_int<int>(j.at("batch_size"));
  s.n_tokens = json_int<int>(j.at("n_tokens"));
  s.n_padding_tokens = json_int_or(j, "n_padding_tokens", 0);
  s.n_waiting = json_int_or(j, "n_waiting", 0);
  s.n_running = json_int_or(j, "n_running", 0);
  s.n_preempted = json_int_or(j, "n_preempted", 0);
  s.n_swap_pool_full = json_int_or(j, "n_swap_pool_full", 0);
  if (auto sd = j.find("spec_decode"); sd != j.end() && sd->is_object()) {
    s.spec_drafts = json_int_or(*sd, "num_drafts", 0);
    s.spec_draft_tokens = json_int_or(*sd, "num_draft_tokens", 0);
    s.spec_accepted_tokens = json_int_or(*sd, "num_accepted_tokens", 0);
    if (auto pp = sd->find("num_accepted_tokens_per_pos"); pp != sd->end() && pp->is_array())
      for (const auto& v : *pp) s.spec_accepted_per_pos.push_back(json_int<int>(v));
    if (auto dp = sd->find("num_draft_tokens_per_pos"); dp != sd->end() && dp->is_array())
      for (const auto& v : *dp) s.spec_drafted_per_pos.push_back(json_int<int>(v));
    if (auto d = sd->find("draft_s"); d != sd->end() && d->is_number()) s.spec_draft_s = d->get<double>();
    if (auto c = sd->find("catch_up_s"); c != sd->end() && c->is_number()) s.spec_catch_up_s = c->get<double>();
    if (auto pr = sd->find("probe"); pr != sd->end() && pr->is_object()) {
      s.spec_probe_drafts = json_int_or(*pr, "num_drafts", 0);
      s.spec_probe_draft_tokens = json_int_or(*pr, "num_draft_tokens", 0);
      s.spec_probe_accepted_tokens = json_int_or(*pr, "num_accepted_tokens", 0);
    }
  }
  if (auto l = j.find("lora"); l != j.end() && l->is_object()) {
    s.n_loras = json_int_or(*l, "n_loras", 0);
    s.n_lora_loads = json_int_or(*l, "n_loads", 0);
    s.n_lora_waits = json_int_or(*l, "n_waits", 0);
  }
  if (auto so = j.find("structured"); so != j.end() && so->is_object()) {
    s.n_masks = json_int_or(*so, "n_masks", 0);
    s.mask_s = so->value("mask_s", 0.0);
    s.jump_forward_tokens = json_int_or(*so, "jump_forward_tokens", 0);
  }
  if (auto h = j.find("host"); h != j.end() && h->is_object()) {
    s.host_before_s = h->value("before_s", 0.0);
    s.forward_s = h->value("forward_s", 0.0);
    s.host_after_s = h->value("after_s", 0.0);
    s.device_s = h->value("device_s", 0.0);
  }
  s.max_context = json_int_or(j, "max_context", 0);
  if (auto r = j.find("roofline"); r != j.end() && r->is_object()) s.roofline = r->get<StepRoofline>();
  const auto& kv = j.at("kv");
  s.kv_capacity = json_int<int64_t>(kv.at("capacity"));
  s.kv_stored = json_int<int64_t>(kv.at("stored"));
  s.kv_reserved = json_int<int64_t>(kv.at("reserved"));
  s.kv_internal_frag = json_int<int64_t>(kv.at("internal_frag"));
  s.kv_external_frag = json_int<int64_t>(kv.at("external_frag"));
  s.kv_free = json_int<int64_t>(kv.at("free"));
}

void StepRecord::validate() const {
  auto time = [](const char* field, double t) {
    if (!std::isfinite(t) || t < 0.0)
      throw std::invalid_argument(std::string(field) + " must be finite and >= 0 s (got " + nlohmann::json(t).dump() + ")");
  };
  time("start_s", start_s);
  time("duration_s", duration_s);
  time("spec_decode.draft_s", spec_draft_s);
  time("spec_decode.catch_up_s", spec_catch_up_s);
  time("host.before_s", host_before_s);
  time("host.forward_s", forward_s);
  time("host.after_s", host_after_s);
  time("host.device_s", device_s);
  auto count = [](const char* field, int64_t v) {
    if (v < 0) throw std::invalid_argument(std::string(field) + " must be >= 0 (got " + std::to_string(v) + ")");
  };
  count("batch_size", batch_size);
  count("n_tokens", n_tokens);
  count("n_padding_tokens", n_padding_tokens);
  count("max_context", max_context);
  count("spec_decode.num_drafts", spec_drafts);
  count("spec_decode.num_draft_tokens", spec_draft_tokens);
  count("spec_decode.num_accepted_tokens", spec_accepted_tokens);
  count("spec_decode.probe.num_drafts", spec_probe_drafts);
  count("spec_decode.probe.num_draft_tokens", spec_probe_draft_tokens);
  count("spec_decode.probe.num_accepted_tokens", spec_probe_accepted_tokens);
  for (int v : spec_accepted_per_pos) count("spec_decode.num_accepted_tokens_per_pos[]", v);
  count("n_waiting", n_waiting);
  count("n_running", n_running);
  count("n_preempted", n_preempted);
  count("n_swap_pool_full", n_swap_pool_full);
  count("lora.n_loras", n_loras);
  count("lora.n_loads", n_lora_loads);
  count("lora.n_waits", n_lora_waits);
  count("structured.n_masks", n_masks);
  count("structured.jump_forward_tokens", jump_forward_tokens);
  time("structured.mask_s", mask_s);
  count("kv.capacity", kv_capacity);
  count("kv.stored", kv_stored);
  count("kv.reserved", kv_reserved);
  count("kv.internal_frag", kv_internal_frag);
  count("kv.external_frag", kv_external_frag);
  count("kv.free", kv_free);
  if (roofline) roofline->validate();
}

std::vector<StepRecord> read_steps(const std::string& path, bool* cut_tail) {
  return read_jsonl<StepRecord>(path, [](const StepRecord& s, int) { s.validate(); }, cut_tail);
}

std::string step_line(const StepRecord& s) { return nlohmann::json(s).dump() + "\n"; }

}  // namespace servelab
