#pragma once
// Where a driver's finished records go, and what it reports about a run: shared by the
// in-process driver and the HTTP driver (which does not link the engine).
#include <functional>

#include "engine/finished_request.h"
#include "loadgen/records/record.h"
#include "loadgen/records/step_record.h"

namespace servelab {

/// Where finished records go (records.jsonl writer, progress line, tests).
struct RecordSinks {
  std::function<void(const RequestRecord&)> on_record;
  std::function<void(const StepRecord&)> on_step;
  /// In-process runs: called with each finished request and its record before on_record (adds
  /// what only the engine's result holds, e.g. structured output's text); optional.
  std::function<void(const FinishedRequest&, RequestRecord&)> annotate;
  /// Whether the records handed to on_record carry every token's time (token_times_s). An
  /// in-process driver leaves them out when false (a copy a request the sinks would drop).
  bool token_times = true;
};

struct DriveStats {
  int n_sent = 0;
  int n_finished = 0;
  int n_tokens = 0;
  int64_t n_steps = 0;   ///< engine steps that ran (in-process runs; 0 over HTTP)
  double end_s = 0.0;
  bool stopped = false;  ///< ended by the stop flag (Ctrl-C); unfinished requests were aborted
};

}  // namespace servelab
