// run_engine with a source that hands out requests it still works on (RequestSource::ready: an
// in-process LoRA workload's adapter being drawn on a worker thread, as a server's HTTP session
// reads one before handing the request over): on a steady clock the runner holds such a request
// back while the engine runs the others, and adds it with the arrival it was taken at once ready;
// stopped meanwhile, it is reported aborted; on a virtual clock it is finished at once, unless
// the source prices the wait (ready_at: the sim's adapter reads), which the clock then jumps to.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <optional>
#include <set>

#include "tests/engine/engine_test_support.h"

namespace servelab {
namespace runner_held_test {  // named, not anonymous: a unity batch shares one translation unit

using namespace enginetest;

/// A list of requests; those in `waiting` are not ready until released.
class HeldSource final : public RequestSource {
 public:
  HeldSource(std::vector<Timed> items, std::set<uint64_t> waiting) : list_(std::move(items)), waiting_(std::move(waiting)) {}
  std::optional<double> next_time() const override { return list_.next_time(); }
  Request take() override { return list_.take(); }
  bool exhausted() const override { return list_.exhausted(); }
  bool ready(const Request& r) const override { return !waiting_.count(r.id); }
  std::optional<double> ready_at(const Request& r) const override {
    const auto at = ready_at_.find(r.id);
    return at == ready_at_.end() ? std::nullopt : std::optional<double>(at->second);
  }
  std::map<uint64_t, double> ready_at_;  // priced waits
  void finish(Request& r) override {
    waiting_.erase(r.id);  // a blocking finish: the request is complete when it returns
    finished_.push_back(r.id);
  }
  void release(uint64_t id) { waiting_.erase(id); }
  const std::vector<uint64_t>& finished() const { return finished_; }

 private:
  ListSource list_;
  std::set<uint64_t> waiting_;
  std::vector<uint64_t> finished_;
};

TEST(RunnerHeld, ARequestItsSourceWorksOnWaitsWhileTheOthersRun) {
  Engine engine(paged_config(continuous_sched(8, 256, false), 1 << 20), sim_backend());
  HeldSource source({{0.0, make_request(0, 8, 3)}, {0.0, make_request(1, 8, 3)}}, {0});
  SteadyClock clock;
  std::vector<FinishedRequest> finished;
  std::map<uint64_t, double> sent;
  RunnerCallbacks cb;
  cb.on_sent = [&](const Request& r, double, double at) { sent[r.id] = at; };
  cb.on_finished = [&](const FinishedRequest& f) {
    finished.push_back(f);
    if (f.request_id == 1) source.release(0);  // its adapter is read once the other is done
  };
  run_engine(engine, source, clock, cb);
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(finished[0].request_id, 1u);
  EXPECT_EQ(finished[1].request_id, 0u);
  EXPECT_EQ(finished[1].reason, FinishReason::length);
  EXPECT_DOUBLE_EQ(finished[1].arrival_s, sent.at(0)) << "the arrival it was taken at: its TTFT counts the wait";
  EXPECT_GT(finished[1].scheduled_s, finished[0].scheduled_s);  // in a later step
  EXPECT_EQ(source.finished(), (std::vector<uint64_t>{1, 0}));  // each finished once
}

TEST(RunnerHeld, StoppedWhileHeldItIsReportedAborted) {
  Engine engine(paged_config(continuous_sched(8, 256, false), 1 << 20), sim_backend());
  HeldSource source({{0.0, make_request(0, 8, 3)}, {0.0, make_request(1, 8, 3)}}, {0});  // 0 never ready
  SteadyClock clock;
  std::atomic<bool> stop{false};
  std::vector<FinishedRequest> finished;
  RunnerCallbacks cb;
  cb.on_finished = [&](const FinishedRequest& f) {
    finished.push_back(f);
    if (f.request_id == 1) stop = true;
  };
  run_engine(engine, source, clock, cb, &stop);
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(finished[1].request_id, 0u);
  EXPECT_EQ(finished[1].reason, FinishReason::aborted);
  EXPECT_FALSE(finished[1].error.empty());
  EXPECT_EQ(finished[1].n_prompt, 8);
}

/// Runs `source` to the end on a virtual clock; the requests in the order they finished.
std::vector<FinishedRequest> run_on_virtual_clock(HeldSource& source) {
  Engine engine(paged_config(continuous_sched(8, 256, false), 1 << 20), sim_backend());
  VirtualClock clock;
  std::vector<FinishedRequest> finished;
  RunnerCallbacks cb;
  cb.on_finished = [&](const FinishedRequest& f) { finished.push_back(f); };
  run_engine(engine, source, clock, cb);
  return finished;
}

TEST(RunnerHeld, OnAVirtualClockTheRequestIsFinishedWhenTaken) {
  HeldSource source({{0.0, make_request(0, 8, 3)}, {0.0, make_request(1, 8, 3)}}, {0});
  const std::vector<FinishedRequest> finished = run_on_virtual_clock(source);
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(source.finished(), (std::vector<uint64_t>{0, 1}));  // in plan order, none held
  EXPECT_DOUBLE_EQ(finished[0].scheduled_s, finished[1].scheduled_s);  // in one step
}

TEST(RunnerHeld, APricedWaitOnAVirtualClockLetsTheOthersRunFirst) {
  HeldSource source({{0.0, make_request(0, 8, 3)}, {0.0, make_request(1, 8, 3)}}, {});
  source.ready_at_[0] = 1.0;  // its adapter read ends at 1 s
  const std::vector<FinishedRequest> finished = run_on_virtual_clock(source);
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(finished[0].request_id, 1u);
  EXPECT_LT(finished[0].end_s, 1.0);
  EXPECT_EQ(finished[1].request_id, 0u);
  EXPECT_DOUBLE_EQ(finished[1].arrival_s, 0.0);
  EXPECT_DOUBLE_EQ(finished[1].scheduled_s, 1.0) << "the clock jumped to its ready time";
}

}  // namespace runner_held_test
}  // namespace servelab
