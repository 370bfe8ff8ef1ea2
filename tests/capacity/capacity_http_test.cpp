// Capacity probes of a scenario with `target:` go to that server over HTTP (as `servelab run`
// does), never to an in-process engine: a scripted server's answers decide the attainment.
#include <gtest/gtest.h>

#include "analysis/capacity.h"
#include "analysis/metrics.h"
#include "loadgen/capacity_probe.h"
#include "loadgen/scenario.h"
#include "tests/loadgen/http_test_util.h"

namespace servelab {
namespace {

using namespace http_load::test;

std::string http_scenario(const std::string& url) {
  return "target: {url: \"" + url + "\"}\n"
         "workload: {arrival: {process: poisson}, rates: [1], n_requests: 6, warmup_requests: 1,\n"
         "           prompt_tokens: 8, output_tokens: 3}\n"
         "slo: {ttft_ms: 5000, tpot_ms: 5000}\n"
         "capacity: {rate_lo: 50, max_probes: 2}\n";
}

analysis::SloSpec slo_of(const Scenario& sc) { return {sc.slo.ttft_ms, sc.slo.tpot_ms, sc.slo.attainment}; }

std::string text_chunk(const std::string& text, const char* finish = nullptr) {
  return std::string("data: {\"choices\":[{\"index\":0,\"text\":\"") + text + "\",\"finish_reason\":" +
         (finish ? std::string("\"") + finish + "\"" : "null") + "}]}\n\n";
}

TEST(CapacityHttp, ProbesGoToTheTargetServer) {
  ScriptedServer ok([](tcp::socket& s, const std::string&) {
    write_all(s, sse_response(text_chunk("a") + text_chunk("b") + text_chunk("c", "length") + "data: [DONE]\n\n"));
  });
  const Scenario sc = load_scenario_text(http_scenario(ok.url()), "http.yaml");
  ASSERT_TRUE(sc.target.has_value());
  const PointRunner runner(sc);
  PointRunOptions o;
  const PointRun run = runner.run(0, 50.0, o);
  EXPECT_EQ(run.label, "http@50");
  EXPECT_EQ(ok.n_requests(), 7);  // the warm-up request too
  ASSERT_EQ(run.records.size(), 7u);
  EXPECT_TRUE(run.steps.empty());
  const analysis::RunMetrics m = analysis::compute_metrics(run.label, run.records, {}, slo_of(sc));
  EXPECT_EQ(m.n_requests, 6u);
  EXPECT_DOUBLE_EQ(m.slo_attainment, 1.0);
  EXPECT_EQ(m.n_ok, 6u);
}

TEST(CapacityHttp, AServerThatFailsEveryRequestHasNoCapacity) {
  ScriptedServer failing([](tcp::socket& s, const std::string&) {
    write_all(s, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nConnection: close\r\n"
                 "Content-Length: 45\r\n\r\n{\"error\":{\"message\":\"down\",\"code\":500,\"x\":1}}");
  });
  const Scenario sc = load_scenario_text(http_scenario(failing.url()), "http.yaml");
  const PointRunner runner(sc);
  analysis::BisectionOptions bo;
  bo.rate_lo = 50;
  bo.max_probes = 2;
  const analysis::StrategyCapacity c = analysis::find_capacity(
      "http",
      [&](double rate) {
        const PointRun run = runner.run(0, rate);
        return analysis::probe_from_metrics(rate, analysis::compute_metrics(run.label, run.records, {}, slo_of(sc)),
                                            run.wall_s);
      },
      bo);
  EXPECT_FALSE(c.found);
  ASSERT_FALSE(c.probes.empty());
  EXPECT_EQ(c.probes[0].slo_attainment, 0.0);
  EXPECT_GE(failing.n_requests(), 7);
}

}  // namespace
}  // namespace servelab
