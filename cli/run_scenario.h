#pragma once
// The body of `servelab run` after the scenario is loaded, shared with `servelab bench`.
#include <string>

#include "loadgen/scenario.h"

namespace servelab::cli {

/// Runs every point of `scenario` (in-process, or over HTTP with `target:`), writes records and
/// reports to out_dir (or the scenario's output_dir), prints the summary. Returns the exit code.
/// An out_dir already holding files is refused (exit 2) unless `force`.
/// Removes what a run writes into `dir` (records, reports, plots/), nothing else.
void remove_run_outputs(const std::string& dir);

int run_scenario(const Scenario& scenario, const std::string& out_dir, bool quiet, bool no_plots, bool force = false);

}  // namespace servelab::cli
