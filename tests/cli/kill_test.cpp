// kill -9 during `servelab run`: whatever moment the process dies, records.jsonl holds one whole
// JSON line per request that finished before the kill (none lost, none torn), and `servelab
// report` renders the folder, saying the run was cut short. Also: a run refuses to overwrite an
// earlier output folder unless --force. The CPU backend runs in real time (2 req/s), so the kills,
// sent once k records are on disk (polled, no fixed sleep), land mid-run.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "loadgen/records/record.h"
#include "tests/cli/cli_test_util.h"
#include "tests/cli/spawn_util.h"

namespace servelab::cli_test {
namespace {

/// Complete ('\n'-terminated) lines of a file.
std::vector<std::string> whole_lines(const std::string& path) {
  const std::string text = read_text(path);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(text.substr(start, nl - start));
  return lines;
}

/// Runs the slow scenario, SIGKILLs it once `k` records are on disk (k = 0: once runs.json is),
/// then checks the records and the report.
void kill_after(size_t k) {
  SCOPED_TRACE("kill after " + std::to_string(k) + " records");
  TempDir tmp;
  const std::string scenario = tmp.file("slow.yaml"), out = tmp.file("out"), log = tmp.file("log.txt");
  write_text(scenario, slow_scenario(3));
  const std::string records = out + "/records.jsonl";
  const pid_t pid = spawn_servelab({"run", scenario, "--out", out, "--no-plots", "--quiet"}, log);
  ASSERT_GT(pid, 0);
  int status = 0;
  bool exited = false;
  std::vector<std::string> seen;  // whole lines on disk just before the kill
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    if (fs::exists(out + "/runs.json") && fs::exists(records)) {
      seen = whole_lines(records);
      if (seen.size() >= k) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(exited) << "servelab exited before the kill\n" << read_text(log);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ASSERT_GE(seen.size(), k) << "no " << k << " records within 90 s\n" << read_text(log);

  // Every line parses as a record, and every request seen finished before the kill is still there.
  const std::string text = read_text(records);
  const auto lines = whole_lines(records);
  ASSERT_GE(lines.size(), seen.size());
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(lines[i], seen[i]);
  for (const auto& l : lines) EXPECT_NO_THROW(nlohmann::json::parse(l).get<RequestRecord>()) << l;
  EXPECT_LT(lines.size(), 84u);  // 2 × (40 + warm-up) would mean the run finished

  // The folder renders, and says it was cut short.
  const CliResult r = run_servelab({"report", out, "--no-plots", "--quiet"}, tmp);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("run cut short"), std::string::npos) << r.output;
  EXPECT_NE(read_text(out + "/report.md").find("run cut short"), std::string::npos);
}

TEST(KillNine, RecordsSurviveAndReportSaysCutShort) {
  SERVELAB_REQUIRE_BINARY();
  for (size_t k : {0u, 1u, 3u, 7u}) kill_after(k);
}

TEST(KillNine, ReportDropsATornLastLineAndSaysCutShort) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string scenario = tmp.file("fast.yaml"), out = tmp.file("out");
  write_text(scenario, R"(name: fast
model: {preset: tiny}
backend: {kind: sim}
strategies: [{label: c, batching: continuous}]
workload: {rates: [5], n_requests: 6, prompt_tokens: 16, output_tokens: 4}
)");
  ASSERT_EQ(run_servelab({"run", scenario, "--out", out, "--quiet", "--no-plots"}, tmp).code, 0);
  // What a kill in the middle of a write leaves: a last line without its end.
  const std::string text = read_text(out + "/records.jsonl");
  write_text(out + "/records.jsonl", text + text.substr(0, text.find('\n') / 2));
  const CliResult r = run_servelab({"report", out, "--no-plots", "--quiet"}, tmp);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("run cut short"), std::string::npos) << r.output;
  // A torn line in the middle is damage, not a cut: refused with the line number.
  write_text(out + "/records.jsonl", text.substr(0, text.find('\n') / 2) + "\n" + text);
  const CliResult bad = run_servelab({"report", out, "--no-plots", "--quiet"}, tmp);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("records.jsonl:1:"), std::string::npos) << bad.output;
}

TEST(RunOutputFolder, RefusesAFolderWithFilesUnlessForce) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string scenario = tmp.file("fast.yaml"), out = tmp.file("out");
  write_text(scenario, R"(name: fast
model: {preset: tiny}
backend: {kind: sim}
strategies: [{label: c, batching: continuous}]
workload: {rates: [5], n_requests: 4, prompt_tokens: 16, output_tokens: 4}
)");
  fs::create_directories(out);  // an empty folder is fine
  ASSERT_EQ(run_servelab({"run", scenario, "--out", out, "--quiet", "--no-plots"}, tmp).code, 0);
  const std::string before = read_text(out + "/records.jsonl");
  const CliResult again = run_servelab({"run", scenario, "--out", out, "--quiet", "--no-plots"}, tmp);
  EXPECT_EQ(again.code, 2) << again.output;
  EXPECT_NE(again.output.find("--force"), std::string::npos) << again.output;
  EXPECT_EQ(read_text(out + "/records.jsonl"), before);
  EXPECT_EQ(run_servelab({"run", scenario, "--out", out, "--quiet", "--no-plots", "--force"}, tmp).code, 0);
}

}  // namespace
}  // namespace servelab::cli_test
