// libFuzzer harness: the readers behind `servelab report DIR`. Input: runs.json, records.jsonl and
// steps.jsonl separated by lines "\n----\n". Any folder must be reported (no plots) or refused with
// a std::exception (the CLI's exit 2) — never a crash or hang.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>

#include "analysis/report.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servelab;
  const auto parts = fuzz::split_parts(std::string_view(reinterpret_cast<const char*>(data), size), "\n----\n", 3);
  const std::string dir = fuzz::scratch_dir() + "/run";
  std::filesystem::create_directories(dir);
  fuzz::write_scratch("run/runs.json", parts[0]);
  fuzz::write_scratch("run/records.jsonl", parts.size() > 1 ? parts[1] : std::string_view());
  if (parts.size() > 2) fuzz::write_scratch("run/steps.jsonl", parts[2]);
  else std::filesystem::remove(dir + "/steps.jsonl");
  try {
    analysis::ReportOptions opts;
    opts.plots = false;
    (void)analysis::render_reports(dir, opts);
  } catch (const std::exception&) {
  }
  return 0;
}
