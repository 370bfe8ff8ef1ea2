#pragma once
// In-process driver: feeds the engine from a RequestSource on a Clock and turns the engine's
// callbacks into RequestRecords and StepRecords, streamed to their sinks as requests finish.
#include <atomic>
#include <functional>
#include <string>
#include <unordered_map>

#include "engine/clock.h"
#include "engine/engine.h"
#include "engine/runner.h"
#include "loadgen/record_sinks.h"

namespace servelab {

/// Runs one strategy × rate: every request the source yields goes through `engine`; each
/// finished one becomes a RequestRecord labelled `run_label`. `warmup_ids` are marked warm-up.
///
/// sent_s: a request that came due while the engine was busy with a step is queued at its
/// intended time, as a server's accept queue would hold it (the wait counts in its TTFT); one that
/// came due while the driver slept is stamped when the driver woke, so lateness measures the
/// driver's own timing error. One the source held back (RequestSource::held_until: a
/// max-concurrency cap) is stamped when it was let go; its arrival_s stays the intended time.
DriveStats drive_in_process(Engine& engine, RequestSource& source, Clock& clock,
                            const std::string& run_label, const RecordSinks& sinks,
                            const std::function<bool(uint64_t)>& is_warmup = {},
                            const std::atomic<bool>* stop = nullptr);

}  // namespace servelab
