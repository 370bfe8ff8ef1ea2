// Ctrl-C during `servelab run`: the run in flight is aborted, the rest skipped, exit code 130, and
// the records already written stay in records.jsonl with a partial summary.json and report.md
// beside them. The CPU backend runs in real time; at 2 req/s the scenario would take ~20 s, so
// the signal (sent once the first record is on disk, polled, never a fixed sleep) lands mid-run.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_test_util.h"
#include "tests/cli/spawn_util.h"

namespace servelab::cli_test {
namespace {

/// Polls until `done()` or `timeout`; true when done.
template <typename F>
bool wait_for(F done, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

TEST(Interrupt, SigintKeepsRecordsWritesPartialReportAndExits130) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string scenario = tmp.file("slow.yaml"), out = tmp.file("out"), log = tmp.file("log.txt");
  write_text(scenario, slow_scenario(1));
  const std::string records = out + "/records.jsonl";

  const pid_t pid = spawn_servelab({"run", scenario, "--out", out, "--no-plots"}, log);
  ASSERT_GT(pid, 0);
  int status = 0;
  bool exited = false;
  const bool started = wait_for(
      [&] {
        if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) exited = true;
        return exited || (fs::exists(records) && !read_lines(records).empty());
      },
      std::chrono::seconds(60));
  if (!started || exited) {
    if (!exited) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    FAIL() << (exited ? "servelab exited before the first record" : "no record within 60 s") << "\n"
           << read_text(log);
  }
  const size_t n_before = read_lines(records).size();
  ASSERT_EQ(::kill(pid, SIGINT), 0);

  exited = wait_for([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, std::chrono::seconds(60));
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "servelab did not stop within 60 s of SIGINT\n" << read_text(log);
  }
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 130) << read_text(log);
  EXPECT_NE(read_text(log).find("interrupted"), std::string::npos) << read_text(log);

  // The records written before the signal are all still there, each a whole JSON line, and the
  // interrupted run did not get to send all 40 requests of both strategies.
  const auto lines = read_lines(records);
  EXPECT_GE(lines.size(), n_before);
  EXPECT_LT(lines.size(), 80u);
  for (const auto& l : lines) EXPECT_TRUE(nlohmann::json::accept(l)) << l;

  // A partial summary over what finished, and the markdown report beside it.
  ASSERT_TRUE(fs::exists(out + "/summary.json"));
  const auto summary = nlohmann::json::parse(read_text(out + "/summary.json"));
  ASSERT_FALSE(summary.at("runs").empty());
  EXPECT_EQ(summary.at("runs")[0].at("label"), "first@2");
  EXPECT_TRUE(fs::exists(out + "/report.md"));
}

}  // namespace
}  // namespace servelab::cli_test
