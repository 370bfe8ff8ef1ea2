// run_engine on a virtual clock: arrivals honoured, callbacks complete, stop and closed loops.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>

#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace {

using namespace enginetest;

TEST(Runner, OpenLoopArrivalsAreHonouredAndAllFinish) {
  for (const SchedulerConfig& sched : {static_sched(4, 2.0), dynamic_sched(4, 1.0), continuous_sched(8, 256, true)}) {
    Engine engine(paged_config(sched, 1 << 20), sim_backend());
    std::vector<Timed> items;
    int expected_tokens = 0;
    for (int i = 0; i < 30; ++i) {
      // bursts and gaps: 3 requests every 4 ms, then a 50 ms pause after every 10
      const double t = 0.004 * (i / 3) + 0.05 * (i / 10);
      items.push_back({t, make_request(i, 8 + (i * 7) % 40, 2 + i % 9)});
      expected_tokens += 2 + i % 9;
    }
    RunResult r = run_virtual(engine, items);
    ASSERT_EQ(r.finished.size(), 30u) << to_string(sched.kind);
    EXPECT_EQ(r.n_tokens_delivered, expected_tokens);
    for (const Timed& it : items) {
      const FinishedRequest& f = r.at(it.request.id);
      EXPECT_EQ(f.reason, FinishReason::length);
      EXPECT_DOUBLE_EQ(r.intended.at(it.request.id), it.time_s);
      EXPECT_GE(r.sent.at(it.request.id), it.time_s);
      EXPECT_GE(f.arrival_s, it.time_s);
      EXPECT_GE(f.scheduled_s, f.arrival_s);
      EXPECT_GT(f.first_token_s, f.scheduled_s);
      EXPECT_EQ(f.token_times_s.size(), static_cast<size_t>(f.n_output));
      EXPECT_TRUE(std::is_sorted(f.token_times_s.begin(), f.token_times_s.end()));
      EXPECT_DOUBLE_EQ(f.end_s, f.token_times_s.back());
    }
    for (size_t i = 1; i < r.steps.size(); ++i)  // steps never overlap on the clock
      EXPECT_GE(r.steps[i].start_s, r.steps[i - 1].start_s + r.steps[i - 1].duration_s - 1e-12);
  }
}

TEST(Runner, IdleEngineSleepsUntilTheNextArrival) {
  Engine engine(paged_config(continuous_sched(8, 256, false), 1 << 20), sim_backend());
  RunResult r = run_virtual(engine, {{0.0, make_request(0, 8, 2)}, {10.0, make_request(1, 8, 2)}});
  ASSERT_EQ(r.finished.size(), 2u);
  EXPECT_DOUBLE_EQ(r.sent.at(1), 10.0);
  EXPECT_DOUBLE_EQ(r.at(1).scheduled_s, 10.0);
  EXPECT_LT(r.at(0).end_s, 0.01);
}

/// Every step takes `step_s`: a roofline device so fast that only its fixed per-step cost counts.
std::unique_ptr<Backend> fixed_step_backend(double step_s) {
  SimDevice device = SimDevice::preset("h100");
  device.peak_flops = 1e30;
  device.mem_bw_bytes_s = 1e30;
  device.step_overhead_s = step_s;
  return std::make_unique<SimBackend>(micro_model(), SimCostModel::roofline(device));
}

TEST(Runner, BatchingDelaysCountFromArrivalWhileTheEngineIsBusy) {
  // Two requests fill a batch at 0 and run one 4 ms step; a third comes due at 1 ms, while the
  // engine is busy. Its 5 ms wait (static max_wait_ms / dynamic max_queue_delay_ms) runs from
  // 1 ms, as Triton counts it, not from 4 ms when the runner got to it.
  for (const SchedulerConfig& sched : {static_sched(2, 5.0), dynamic_sched(2, 5.0)}) {
    Engine engine(paged_config(sched, 1 << 20), fixed_step_backend(0.004));
    RunResult r = run_virtual(engine, {{0.0, make_request(0, 8, 1)},
                                       {0.0, make_request(1, 8, 1)},
                                       {0.001, make_request(2, 8, 1)}});
    ASSERT_EQ(r.finished.size(), 3u);
    EXPECT_DOUBLE_EQ(r.at(0).scheduled_s, 0.0);
    EXPECT_DOUBLE_EQ(r.at(2).arrival_s, 0.001) << to_string(sched.kind);
    EXPECT_DOUBLE_EQ(r.sent.at(2), 0.001);
    EXPECT_DOUBLE_EQ(r.at(2).scheduled_s, 0.006) << to_string(sched.kind);
    EXPECT_DOUBLE_EQ(r.at(2).first_token_s, 0.010);
  }
}

TEST(Runner, RejectionsGoStraightToOnFinished) {
  Engine engine(paged_config(continuous_sched(8, 256, false), 1 << 20), sim_backend());
  RunResult r = run_virtual(engine, {{0.5, make_request(0, 300, 2)}});
  ASSERT_EQ(r.finished.size(), 1u);
  EXPECT_EQ(r.at(0).reason, FinishReason::rejected);
  EXPECT_DOUBLE_EQ(r.at(0).end_s, 0.5);
  EXPECT_TRUE(r.steps.empty());
}

TEST(Runner, StopFlagAbortsEverythingInFlight) {
  Engine engine(paged_config(continuous_sched(8, 256, false), 1 << 20), sim_backend());
  std::vector<Timed> items;
  for (int i = 0; i < 6; ++i) items.push_back({0.0, make_request(i, 8, 100)});
  items.push_back({100.0, make_request(6, 8, 2)});  // never sent
  ListSource source(items);
  VirtualClock clock;
  std::atomic<bool> stop{false};
  std::vector<FinishedRequest> finished;
  int steps = 0;
  RunnerCallbacks cb;
  cb.on_step = [&](const StepOutcome&) {
    if (++steps == 5) stop = true;
  };
  cb.on_finished = [&](const FinishedRequest& f) { finished.push_back(f); };
  run_engine(engine, source, clock, cb, &stop);
  EXPECT_EQ(steps, 5);
  ASSERT_EQ(finished.size(), 6u);
  for (const auto& f : finished) {
    EXPECT_EQ(f.reason, FinishReason::aborted);
    EXPECT_EQ(f.n_output, 5);
  }
  EXPECT_FALSE(engine.has_work());
}

/// Closed loop: `concurrency` requests in flight; each finish releases the next one.
class ClosedLoopSource final : public RequestSource {
 public:
  ClosedLoopSource(int n, int concurrency) : remaining_(n), slots_(concurrency) {}
  std::optional<double> next_time() const override {
    if (remaining_ == 0 || slots_ == 0) return std::nullopt;
    return release_time_;
  }
  Request take() override {
    --slots_;
    --remaining_;
    return make_request(next_id_++, 12, 4);
  }
  bool exhausted() const override { return remaining_ == 0; }
  void on_finished(const FinishedRequest&, double now) override {
    ++slots_;
    release_time_ = now;
  }

 private:
  int remaining_, slots_;
  uint64_t next_id_ = 0;
  double release_time_ = 0.0;
};

TEST(Runner, ClosedLoopSourceKeepsItsConcurrency) {
  Engine engine(paged_config(continuous_sched(8, 256, false), 1 << 20), sim_backend());
  ClosedLoopSource source(12, 3);
  VirtualClock clock;
  int finished = 0, max_running = 0;
  RunnerCallbacks cb;
  cb.on_finished = [&](const FinishedRequest& f) {
    EXPECT_EQ(f.reason, FinishReason::length);
    ++finished;
  };
  cb.on_step = [&](const StepOutcome& s) { max_running = std::max(max_running, s.n_running + s.n_waiting); };
  run_engine(engine, source, clock, cb);
  EXPECT_EQ(finished, 12);
  EXPECT_LE(max_running, 3);
}

}  // namespace
}  // namespace servelab
