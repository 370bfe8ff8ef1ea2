#pragma once
// Helpers for the loadgen tests: temp files, and scenario errors with the temp folder cut off.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "loadgen/scenario.h"

namespace servelab::testing_util {

/// A file under a per-process temp folder, written with `text`; returns its path.
inline std::string write_temp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("servelab_loadgen_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

/// Writes yaml to scn.yaml and loads it; returns the error messages (empty when it loaded), each
/// starting "scn.yaml:LINE:COL: " (the temp folder cut off).
inline std::vector<std::string> scenario_errors(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  const std::string path = write_temp("scn.yaml", yaml);
  const std::string dir = path.substr(0, path.size() - std::string("scn.yaml").size());
  try {
    load_scenario(path, overrides);
  } catch (const ScenarioError& e) {
    std::vector<std::string> out;
    for (std::string m : e.messages) {
      if (m.rfind(dir, 0) == 0) m = m.substr(dir.size());
      out.push_back(m);
    }
    return out;
  }
  return {};
}

inline Scenario load_yaml(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return load_scenario(write_temp("ok.yaml", yaml), overrides);
}

/// A valid scenario to start from: one continuous strategy, two rates, small fixed lengths.
inline const char* kBaseScenario =
    "name: base\n"
    "strategies:\n"
    "  - batching: continuous\n"
    "workload:\n"
    "  rates: [1, 2]\n"
    "  n_requests: 10\n"
    "  prompt_tokens: 16\n"
    "  output_tokens: 8\n";

}  // namespace servelab::testing_util
