#include "loadgen/records/json_int.h"
#include "loadgen/records/record.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

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
                     {"scheduled_s", r.scheduled_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.scheduled_s)},
                     {"first_token_s", r.first_token_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.first_token_s)},
                     {"token_times_s", r.token_times_s},
                     {"end_s", r.end_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.end_s)},
                     {"prompt_tokens", r.prompt_tokens},
                     {"output_tokens", r.output_tokens},
                     {"status", to_string(r.status)},
                     {"error", r.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.error)},
                     {"preemptions", r.preemptions}};
  if (r.warmup) j["warmup"] = true;
  if (r.released_s >= 0) j["released_s"] = r.released_s;
  if (!r.lora.empty()) j["lora"] = r.lora;
  if (r.schema >= 0) {
    j["schema"] = r.schema;
    j["output_text"] = r.output_text;
  }
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
  r.scheduled_s = time_or_missing(j, "scheduled_s");
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
  r.lora = j.value("lora", std::string());
  r.released_s = time_or_missing(j, "released_s");
  r.schema = json_int_or(j, "schema", -1);
  r.output_text = j.value("output_text", std::string());
}

namespace {

std::string num(double x) {
  nlohmann::json j = x;
  return j.dump();
}

/// Throws when `t` is set (not -1) and is not finite, negative, or before `after`.
void check_time(const char* field, double t, const char* after_field, double after) {
  if (t == -1.0) return;
  if (!std::isfinite(t) || t < 0.0)
    throw std::invalid_argument(std::string(field) + " must be a finite time >= 0 s (got " + num(t) + ")");
  if (after >= 0.0 && t < after)
    throw std::invalid_argument(std::string(field) + " (" + num(t) + ") is before " + after_field + " (" +
                                num(after) + ")");
}

}  // namespace

void RequestRecord::validate() const {
  if (!std::isfinite(arrival_s) || arrival_s < 0.0)
    throw std::invalid_argument("arrival_s must be a finite time >= 0 s (got " + num(arrival_s) + ")");
  if (!std::isfinite(sent_s) || sent_s < 0.0)
    throw std::invalid_argument("sent_s must be a finite time >= 0 s (got " + num(sent_s) + ")");
  check_time("released_s", released_s, "arrival_s", arrival_s);
  if (released_s >= 0 && sent_s < released_s)
    throw std::invalid_argument("sent_s (" + num(sent_s) + ") is before released_s (" + num(released_s) + ")");
  check_time("scheduled_s", scheduled_s, "arrival_s", arrival_s);
  check_time("first_token_s", first_token_s, scheduled_s >= 0 ? "scheduled_s" : "arrival_s",
             scheduled_s >= 0 ? scheduled_s : arrival_s);
  double prev = first_token_s >= 0 ? first_token_s : arrival_s;
  std::string prev_field = first_token_s >= 0 ? "first_token_s" : "arrival_s";
  for (std::size_t i = 0; i < token_times_s.size(); ++i) {
    const double t = token_times_s[i];
    if (!std::isfinite(t) || t < prev)
      throw std::invalid_argument("token_times_s[" + std::to_string(i) + "] (" + num(t) + ") is before " +
                                  prev_field + " (" + num(prev) + "): times must not go backwards");
    prev = t;
    prev_field = "token_times_s[" + std::to_string(i) + "]";
  }
  check_time("end_s", end_s, prev_field.c_str(), prev);
  if (prompt_tokens < 0) throw std::invalid_argument("prompt_tokens must be >= 0 (got " + std::to_string(prompt_tokens) + ")");
  if (output_tokens < 0) throw std::invalid_argument("output_tokens must be >= 0 (got " + std::to_string(output_tokens) + ")");
  if (preemptions < 0) throw std::invalid_argument("preemptions must be >= 0 (got " + std::to_string(preemptions) + ")");
  if (schema < -1) throw std::invalid_argument("schema must be >= 0, or absent (got " + std::to_string(schema) + ")");
  if (token_times_s.size() > static_cast<std::size_t>(output_tokens))
    throw std::invalid_argument("token_times_s has " + std::to_string(token_times_s.size()) +
                                " entries but output_tokens is " + std::to_string(output_tokens));
}

std::vector<RequestRecord> read_records(const std::string& path, bool* cut_tail) {
  std::map<std::pair<std::string, uint64_t>, int> first_line;  // (run, id) -> line
  return read_jsonl<RequestRecord>(path, [&](const RequestRecord& r, int line) {
    r.validate();
    const auto [it, inserted] = first_line.emplace(std::make_pair(r.run, r.id), line);
    if (!inserted)
      throw std::invalid_argument("duplicate id " + std::to_string(r.id) + " in run " + r.run +
                                  " (first at line " + std::to_string(it->second) + ")");
  }, cut_tail);
}

namespace {

/// Text nlohmann's dump() writes as it is: printable ASCII without '"' and '\\'.
bool plain_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') return false;
  return true;
}

/// A double as nlohmann's dump() writes it (its own shortest round-trip digits; null if not finite).
void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[64];
  out.append(buf, nlohmann::detail::to_chars(buf, buf + sizeof buf, v));
}

void append_time_or_null(std::string& out, double v) {
  if (v < 0) out += "null";
  else append_double(out, v);
}

}  // namespace

std::string record_line(const RequestRecord& r) {
  // The HTTP driver writes one line per request at thousands of requests a second: build the
  // line directly, byte for byte what nlohmann::json(r).dump() gives (keys in std::map order).
  // Strings that would need escaping take the general path.
  if (!plain_ascii(r.run) || !plain_ascii(r.error) || r.schema >= 0)  // outputs may hold any text
    return nlohmann::json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::string s;
  s.reserve(256 + 20 * r.token_times_s.size());
  s += "{\"arrival_s\":";
  append_double(s, r.arrival_s);
  s += ",\"end_s\":";
  append_time_or_null(s, r.end_s);
  s += ",\"error\":";
  if (r.error.empty()) {
    s += "null";
  } else {
    s += '"';
    s += r.error;
    s += '"';
  }
  s += ",\"first_token_s\":";
  append_time_or_null(s, r.first_token_s);
  s += ",\"id\":" + std::to_string(r.id);
  if (!r.lora.empty()) s += ",\"lora\":" + nlohmann::json(r.lora).dump();
  s += ",\"output_tokens\":" + std::to_string(r.output_tokens);
  s += ",\"preemptions\":" + std::to_string(r.preemptions);
  s += ",\"prompt_tokens\":" + std::to_string(r.prompt_tokens);
  if (r.released_s >= 0) {
    s += ",\"released_s\":";
    append_double(s, r.released_s);
  }
  s += ",\"run\":\"";
  s += r.run;
  s += "\",\"scheduled_s\":";
  append_time_or_null(s, r.scheduled_s);
  s += ",\"sent_s\":";
  append_double(s, r.sent_s);
  s += ",\"status\":\"";
  s += to_string(r.status);
  s += "\",\"token_times_s\":[";
  for (size_t i = 0; i < r.token_times_s.size(); ++i) {
    if (i) s += ',';
    append_double(s, r.token_times_s[i]);
  }
  s += ']';
  if (r.warmup) s += ",\"warmup\":true";
  s += "}\n";
  return s;
}

}  // namespace servelab
