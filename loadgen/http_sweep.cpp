#include "loadgen/http_sweep.h"

#include <chrono>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "loadgen/http/http_driver.h"
#include "loadgen/http/server_metrics.h"
#include "loadgen/sources.h"

namespace servelab::http_load {

DriveStats run_http_point(const Scenario& scenario, const StrategySpec& strategy, const Plan& plan,
                          const std::string& run_label,
                          const RecordSinks& sinks, const Tokenizer* tokenizer, const std::string& out_dir,
                          const std::atomic<bool>* stop, bool scrape_metrics,
                          const StructuredRequests* structured) {
  // Adapters by name only: each request's goes out as its `model` (request_body).
  std::unique_ptr<RequestSource> source =
      make_source(scenario, strategy_plan(plan, strategy), run_adapters(scenario, strategy, false));
  HttpDriverOptions o;
  o.target = *scenario.target;
  o.tokenizer = tokenizer;
  o.structured = structured;
  // The server's own state on the run's time axis (the driver's clock starts right after this).
  std::unique_ptr<MetricsScraper> scraper;
  if (scrape_metrics && !out_dir.empty())
    scraper = std::make_unique<MetricsScraper>(o.target, run_label, out_dir + "/server_metrics.jsonl",
                                               std::chrono::steady_clock::now());
  const HttpDriveStats st = drive_http(*source, o, run_label, sinks, [&plan](uint64_t id) { return plan.is_warmup(id); }, stop);
  scraper.reset();
  if (st.replicas.size() > 1 && !out_dir.empty()) {
    nlohmann::ordered_json j;
    j["run"] = run_label;
    j["replicas"] = nlohmann::json::array();
    for (const ReplicaShare& r : st.replicas)
      j["replicas"].push_back({{"url", r.url}, {"n_sent", r.n_sent}, {"n_ok", r.n_ok}, {"n_failed", r.n_failed},
                               {"share", st.stats.n_sent ? double(r.n_sent) / st.stats.n_sent : 0.0}});
    std::ofstream(out_dir + "/replicas.jsonl", std::ios::app) << j.dump() << "\n";
  }
  return st.stats;
}

}  // namespace servelab::http_load
