// libFuzzer harness: the scenario loader with `--set` overrides. Input: YAML text, then optionally
// "\n#--set\n" and one override per line. Any bytes must give a Scenario or a ScenarioError (the
// CLI's exit 2), never a crash, hang or another exception.
// Built only with -DSERVELAB_FUZZ=ON and clang (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "loadgen/scenario.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servelab;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto parts = fuzz::split_parts(in, "\n#--set\n", 2);
  std::vector<std::string> overrides;
  if (parts.size() == 2) {
    for (auto line : fuzz::split_parts(parts[1], "\n", 16)) overrides.emplace_back(line);
  }
  const std::string file = fuzz::scratch_dir() + "/scenario.yaml";
  try {
    const Scenario s = load_scenario_text(std::string(parts[0]), file, overrides);
    (void)describe(s);
    (void)s.sweep_rates();
  } catch (const ScenarioError& e) {
    if (e.messages.empty()) std::abort();  // an error must say what is wrong
  }
  return 0;
}
