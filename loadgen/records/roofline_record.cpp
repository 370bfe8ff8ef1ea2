#include "loadgen/records/roofline_record.h"

#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace servelab {

const char* to_string(StepClass c) {
  switch (c) {
    case StepClass::prefill: return "prefill";
    case StepClass::decode: return "decode";
    case StepClass::mixed: return "mixed";
  }
  return "?";
}

StepClass parse_step_class(const std::string& s) {
  if (s == "prefill") return StepClass::prefill;
  if (s == "decode") return StepClass::decode;
  if (s == "mixed") return StepClass::mixed;
  throw std::invalid_argument("unknown step class '" + s + "' (known: prefill, decode, mixed)");
}

const char* to_string(CeilingSource s) {
  switch (s) {
    case CeilingSource::profile: return "profile";
    case CeilingSource::probe: return "probe";
    case CeilingSource::table: return "table";
  }
  return "?";
}

CeilingSource parse_ceiling_source(const std::string& s) {
  if (s == "profile") return CeilingSource::profile;
  if (s == "probe") return CeilingSource::probe;
  if (s == "table") return CeilingSource::table;
  throw std::invalid_argument("unknown ceiling source '" + s + "' (known: profile, probe, table)");
}

namespace {

void require_roofline_figure(const char* field, double v, bool positive) {
  if (!std::isfinite(v) || v < 0.0 || (positive && v == 0.0))
    throw std::invalid_argument(std::string(field) + " must be finite and " + (positive ? "> 0" : ">= 0") + " (got " +
                                nlohmann::json(v).dump() + ")");
}

template <typename Json>
void ceilings_to_json(Json& j, const RooflineCeilings& c) {
  j = Json::object();
  j["copy_bytes_s"] = c.copy_bytes_s;
  j["gemm_flops"] = c.gemm_flops;
  j["source"] = to_string(c.source);
  j["detail"] = c.detail;
}

template <typename Json>
void ceilings_from_json(const Json& j, RooflineCeilings& c) {
  c.copy_bytes_s = j.at("copy_bytes_s").template get<double>();
  c.gemm_flops = j.at("gemm_flops").template get<double>();
  c.source = parse_ceiling_source(j.value("source", std::string("table")));
  c.detail = j.value("detail", std::string());
  c.validate();
}

}  // namespace

void StepRoofline::validate() const {
  require_roofline_figure("roofline.s", seconds, false);
  require_roofline_figure("roofline.flops", flops, false);
  require_roofline_figure("roofline.bytes", bytes, false);
}

void RooflineCeilings::validate() const {
  require_roofline_figure("ceilings.copy_bytes_s", copy_bytes_s, true);
  require_roofline_figure("ceilings.gemm_flops", gemm_flops, true);
}

void to_json(nlohmann::json& j, const StepRoofline& r) {
  j = nlohmann::json{{"class", to_string(r.step_class)}, {"s", r.seconds}, {"flops", r.flops}, {"bytes", r.bytes}};
  if (const auto& s = r.shape)
    j["shape"] = {{"n_seqs", s->n_seqs},          {"n_sampled", s->n_sampled},           {"sum_context", s->sum_context},
                  {"prefill_pairs", s->prefill_pairs}, {"decode_context", s->decode_context}, {"verify_rows", s->verify_rows},
                  {"verify_pairs", s->verify_pairs}};
}

void from_json(const nlohmann::json& j, StepRoofline& r) {
  r.step_class = parse_step_class(j.at("class").get<std::string>());
  r.seconds = j.at("s").get<double>();
  r.flops = j.at("flops").get<double>();
  r.bytes = j.at("bytes").get<double>();
  if (const auto s = j.find("shape"); s != j.end()) {
    StepShapeRecord& h = r.shape.emplace();
    h.n_seqs = s->at("n_seqs").get<int64_t>();
    h.n_sampled = s->value("n_sampled", h.n_seqs);
    h.sum_context = s->at("sum_context").get<int64_t>();
    h.prefill_pairs = s->at("prefill_pairs").get<double>();
    h.decode_context = s->at("decode_context").get<double>();
    h.verify_rows = s->value("verify_rows", int64_t(0));
    h.verify_pairs = s->value("verify_pairs", 0.0);
  }
}

void to_json(nlohmann::json& j, const RooflineCeilings& c) { ceilings_to_json(j, c); }
void from_json(const nlohmann::json& j, RooflineCeilings& c) { ceilings_from_json(j, c); }
void to_json(nlohmann::ordered_json& j, const RooflineCeilings& c) { ceilings_to_json(j, c); }
void from_json(const nlohmann::ordered_json& j, RooflineCeilings& c) { ceilings_from_json(j, c); }

}  // namespace servelab
