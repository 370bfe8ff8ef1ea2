// What a user sees when a command line is wrong: the message names the word or flag they typed.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "tests/cli/cli_test_util.h"
#include "tests/cli/spawn_util.h"

namespace servelab::cli_test {
namespace {

TEST(UsageErrors, UnknownCommandIsNamed) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const CliResult r = run_servelab({"bogus"}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("unknown command 'bogus'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bench"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("A subcommand is required"), std::string::npos) << r.output;
}

TEST(UsageErrors, ServeModelFolderMissingSaysSo) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const CliResult r = run_servelab({"serve", "--model", "/no/such/dir", "--port", "0"}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--model /no/such/dir: no such folder"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("unknown model preset"), std::string::npos) << r.output;
}

TEST(UsageErrors, ServeRefusesKnobsOfTheOtherPolicy) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  CliResult r = run_servelab({"serve", "--batching", "static", "--chunked-prefill", "--port", "0"}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--chunked-prefill applies to --batching continuous, not --batching static"), std::string::npos)
      << r.output;
  r = run_servelab({"serve", "--kv", "naive", "--block-size", "32", "--port", "0"}, tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--block-size applies to --kv paged, not --kv naive"), std::string::npos) << r.output;
}

/// Starts `servelab serve ARGS`, waits (up to 60 s) for its "on http://" banner, stops it with
/// SIGTERM and returns what it printed ("" when it never started).
std::string serve_banner(const std::vector<std::string>& args, TempDir& tmp) {
  const std::string log = tmp.file("serve.log");
  const pid_t pid = spawn_servelab(args, log);
  if (pid <= 0) return "";
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && text.find("on http://") == std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    text = read_text(log);
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return text;
}

TEST(UsageErrors, ServeBannerNamesBatchingAndKv) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const std::string text =
      serve_banner({"serve", "--backend", "sim", "--port", "0", "--kv", "naive", "--batching", "dynamic"}, tmp);
  EXPECT_NE(text.find("dynamic batching (max_batch_size 8)"), std::string::npos) << text;
  EXPECT_NE(text.find("naive KV ("), std::string::npos) << text;
}

TEST(UsageErrors, ServeSpeculativeConfigIsAppliedOrNamed) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  const CliResult bad = run_servelab({"serve", "--port", "0", "--speculative-config", R"({"method": "eagle"})"}, tmp);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("--speculative-config: method eagle is not supported"), std::string::npos) << bad.output;
  const std::string text =
      serve_banner({"serve", "--port", "0", "--speculative-config", R"({"method": "ngram", "num_speculative_tokens": 4})"}, tmp);
  EXPECT_NE(text.find("speculative ngram (k <= 4)"), std::string::npos) << text;
}

TEST(CapacityCli, NotBracketedSaysSoAndExitsNonZero) {
  SERVELAB_REQUIRE_BINARY();
  TempDir tmp;
  // A loose SLO that every probe meets: a lower bound, not a capacity.
  const CliResult r = run_servelab({"capacity", "scenarios/quick.yaml", "--strategy", "continuous-paged", "--out",
                                    tmp.file("cap"), "--no-plots", "-q", "--set", "capacity={max_probes: 2, n_requests: 40}",
                                    "--set", "slo.ttft_ms=1000000", "--set", "slo.tpot_ms=1000000"},
                                   tmp);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("not bracketed: >= 2 req/s"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("2.000"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace servelab::cli_test
