#pragma once
// RequestRecord: one request's timings as the load generator saw them; one JSON line each in
// records.jsonl. Analysis reads only these (it never includes engine headers).
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace servelab {

enum class RecordStatus { ok, error, rejected, aborted };
const char* to_string(RecordStatus s);
RecordStatus parse_record_status(const std::string& s);  ///< throws std::invalid_argument

/// Times in seconds from the run's start. arrival_s is the intended send time from the plan.
struct RequestRecord {
  std::string run;                    ///< label of the strategy × rate run
  uint64_t id = 0;
  double arrival_s = 0.0;             ///< intended send time (coordinated-omission safe)
  double sent_s = 0.0;                ///< actual send time
  double first_token_s = -1.0;        ///< -1 when no token came
  std::vector<double> token_times_s;  ///< every output token
  double end_s = -1.0;
  int prompt_tokens = 0;
  int output_tokens = 0;
  RecordStatus status = RecordStatus::ok;
  std::string error;                  ///< empty = null in JSON
  int preemptions = 0;
  bool warmup = false;                ///< left out of metrics

  double lateness_s() const { return sent_s - arrival_s; }
};

void to_json(nlohmann::json& j, const RequestRecord& r);
void from_json(const nlohmann::json& j, RequestRecord& r);

/// Reads records.jsonl. Throws std::runtime_error("path:line: message") on a bad line.
std::vector<RequestRecord> read_records(const std::string& path, bool* cut_tail = nullptr);
/// One compact JSON line (with '\n').
std::string record_line(const RequestRecord& r);

}  // namespace servelab
