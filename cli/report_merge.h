#pragma once
// `servelab report DIR --add FILE... --out NEW`: records that another tool wrote in servelab's
// format (a peer engine replaying the same plan, e.g. scripts/hf-offline-peer.py) joined to a run
// folder's, so one report shows them side by side.
//
// FILE is a records.jsonl (RequestRecord lines, loadgen/records/record.h). Its runs are described
// by an optional sidecar beside it, FILE less ".jsonl" plus ".run.json":
//   {"runs": [{"label": "hf-static@max", "strategy": "hf-static", "batching": "static",
//              "backend": "hf-transformers", "mode": "max", "n_requests": 1000, "config": {...}}]}
// (each entry as a runs.json run, analysis::RunInfo). A label with records but no entry gets one
// from the label alone: "NAME@max" or "NAME@<rate>" give the mode and rate, and n_requests is the
// number of its records (so a sidecar is what lets a cut-short peer run show as cut short).
#include <string>

#include "analysis/report.h"

namespace servelab::cli {

/// The sidecar path of a records file: "x/peer.jsonl" -> "x/peer.run.json" ("x/peer" -> "x/peer.run.json").
std::string peer_runs_path(const std::string& records_path);

/// Adds FILE's records, and a RunInfo for each of its run labels, to `in`. Throws
/// std::runtime_error("FILE[:line]: message") on a malformed file or sidecar, on a label that `in`
/// already holds (two sources would mix in one run). A sidecar run with no records is kept (it
/// reports as a run with no measured records); a records file cut in its last line sets
/// in.cut_short.
void add_peer_records(analysis::ReportInput& in, const std::string& records_path);

/// Writes `in`'s records and steps to DIR/records.jsonl and DIR/steps.jsonl (steps only when there
/// are any), so DIR re-renders with `servelab report DIR` alone.
void write_merged_records(const std::string& dir, const analysis::ReportInput& in);

}  // namespace servelab::cli
