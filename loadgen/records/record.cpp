#include "loadgen/records/json_int.h"
#include "loadgen/records/record.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "loadgen/records/jsonl.h"

namespace servelab {

const char* to_string(RecordStatus s) {
  switch (s) {
    case RecordStatus::ok: return "ok";
    case RecordStatus::error: return "error";
    case RecordStatus::rejected: return "rejected";
    case RecordStatus::aborted: return "aborted";
  }
  return "?";
}

RecordStatus parse_record_status(const std::string& s) {
  if (s == "ok") return RecordStatus::ok;
  if (s == "error") return RecordStatus::error;
  if (s == "rejected") return RecordStatus::rejected;
  if (s == "aborted") return RecordStatus::aborted;
  throw std::invalid_argument("unknown status '" + s + "' (expected ok, error, rejected, aborted)");
}

void to_json(nlohmann::json& j, const RequestRecord& r) {
  j = nlohmann::json{{"run", r.run},
                     {"id", r.id},
                     {"arrival_s", r.arrival_s},
                     {"sent_s", r.sent_s},
                     {"first_token_s", r.first_token_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.first_token_s)},
                     {"token_times_s", r.token_times_s},
                     {"end_s", r.end_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.end_s)},
                     {"prompt_tokens", r.prompt_tokens},
                     {"output_tokens", r.output_tokens},
                     {"status", to_string(r.status)},
                     {"error", r.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.error)},
                     {"preemptions", r.preemptions}};
  if (r.warmup) j["warmup"] = true;
}

namespace {
double time_or_missing(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return -1.0;
  return it->get<double>();
}
}  // namespace

void from_json(const nlohmann::json& j, RequestRecord& r) {
  r.run = j.at("run").get<std::string>();
  r.id = json_int<uint64_t>(j.at("id"));
  r.arrival_s = j.at("arrival_s").get<double>();
  r.sent_s = j.value("sent_s", r.arrival_s);
  r.first_token_s = time_or_missing(j, "first_token_s");
  r.token_times_s = j.value("token_times_s", std::vector<double>{});
  r.end_s = time_or_missing(j, "end_s");
  r.prompt_tokens = json_int<int>(j.at("prompt_tokens"));
  r.output_tokens = json_int<int>(j.at("output_tokens"));
  r.status = parse_record_status(j.at("status").get<std::string>());
  auto e = j.find("error");
  r.error = (e == j.end() || e->is_null()) ? std::string() : e->get<std::string>();
  r.preemptions = json_int_or(j, "preemptions", 0);
  r.warmup = j.value("warmup", false);
}

std::vector<RequestRecord> read_records(const std::string& path, bool* cut_tail) {
  return read_jsonl<RequestRecord>(path, cut_tail);
}

std::string record_line(const RequestRecord& r) {
  return nlohmann::json(r).dump() + "\n";
}

}  // namespace servelab
