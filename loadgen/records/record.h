#pragma once
// RequestRecord: one request's timings as the load generator saw them; one JSON line each in
// records.jsonl. Analysis reads only these (it never includes engine headers).
#include <algorithm>
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
  /// A max-concurrency cap held it: when a slot freed (the cap's wait, arrival_s to here, is the
  /// workload's, not the generator falling behind); -1 when not held. JSON: left out when -1.
  double released_s = -1.0;
  /// First admitted to a batch by the engine; -1 when never scheduled or unknown (HTTP runs,
  /// records written before the field existed). TTFT = (scheduled − arrival) queueing +
  /// (first token − scheduled) prefill.
  double scheduled_s = -1.0;
  double first_token_s = -1.0;        ///< -1 when no token came
  std::vector<double> token_times_s;  ///< every output token
  double end_s = -1.0;
  int prompt_tokens = 0;
  int output_tokens = 0;
  RecordStatus status = RecordStatus::ok;
  std::string error;                  ///< empty = null in JSON
  int preemptions = 0;
  bool warmup = false;                ///< left out of metrics
  std::string lora;                   ///< the LoRA adapter it named ("" = the base model; JSON: left out)
  /// Structured output (workload.structured_output): the index of the schema the request carried
  /// in the run folder's schemas.jsonl, -1 when unconstrained; and what it generated, which the
  /// report validates against that schema. JSON: both left out when -1.
  int schema = -1;
  std::string output_text;

  /// The generator's own delay: sent after it was due, or after the cap let it go.
  double lateness_s() const { return sent_s - std::max(arrival_s, released_s); }
  /// The wait a max-concurrency cap imposed (0 when not held).
  double cap_wait_s() const { return released_s > arrival_s ? released_s - arrival_s : 0.0; }

  /// Checks what any real record satisfies: every time finite and >= 0 (seconds from the run's
  /// start); arrival <= scheduled <= first token <= each token time (ascending) <= end; arrival
  /// <= end; token counts and preemptions >= 0; at most output_tokens token times. Times that
  /// are unset (-1) are skipped. Throws std::invalid_argument naming the field and the values.
  void validate() const;
};

/// The most requests one run may plan or record (10 million): far above any benchmark, and
/// small enough that counts, ids and their sums stay exact in int and double arithmetic.
inline constexpr int kMaxRequestsPerRun = 10'000'000;

void to_json(nlohmann::json& j, const RequestRecord& r);
void from_json(const nlohmann::json& j, RequestRecord& r);

/// Reads records.jsonl, validating each record (RequestRecord::validate) and rejecting a second
/// record with the same run and id. Throws std::runtime_error("path:line: message") on a bad line.
/// *cut_tail as read_jsonl (a last line cut by a kill is dropped).
std::vector<RequestRecord> read_records(const std::string& path, bool* cut_tail = nullptr);
/// One compact JSON line (with '\n').
std::string record_line(const RequestRecord& r);

}  // namespace servelab
