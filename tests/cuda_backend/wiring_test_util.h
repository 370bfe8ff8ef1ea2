#pragma once
// Shared by the cuda backend's CPU wiring tests (cuda_wiring_test.cpp, dtype_wiring_test.cpp): the
// rest of a minimal scenario, and the error a scenario text raises.
#include <string>

#include "loadgen/scenario.h"

namespace servelab::wiringtest {

/// Everything a scenario needs besides `backend:`.
inline const std::string kRest =
    "model: {preset: tiny}\n"
    "strategies: [{batching: continuous}]\n"
    "workload: {arrival: {process: poisson}, rates: [2], n_requests: 4}\n";

/// The ScenarioError message `yaml` raises as t.yaml, or "" when it loads.
inline std::string errors_of(const std::string& yaml) {
  try {
    load_scenario_text(yaml, "t.yaml");
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

}  // namespace servelab::wiringtest
