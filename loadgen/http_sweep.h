#pragma once
// The sweep's hook for scenarios with `target:`: one run point driven over HTTP.
#include <atomic>
#include <string>

#include "engine/model/tokenizer.h"
#include "loadgen/inprocess_driver.h"
#include "loadgen/plan.h"
#include "loadgen/scenario.h"
#include "loadgen/structured_output.h"

namespace servelab::http_load {

/// Drives `plan` against scenario.target with the scenario's load mode (open loop, closed loop,
/// trace). With several replicas, appends {"run", "replicas": [{"url", "n_sent", "n_ok",
/// "n_failed", "share"}]} to out_dir/replicas.jsonl and prints nothing. With scrape_metrics, the
/// server's /metrics are scraped every 250 ms into out_dir/server_metrics.jsonl meanwhile. With
/// `structured`, the requests it picks carry their schema (workload.structured_output).
DriveStats run_http_point(const Scenario& scenario, const StrategySpec& strategy, const Plan& plan,
                          const std::string& run_label,
                          const RecordSinks& sinks, const Tokenizer* tokenizer, const std::string& out_dir,
                          const std::atomic<bool>* stop, bool scrape_metrics = false,
                          const StructuredRequests* structured = nullptr);

}  // namespace servelab::http_load
