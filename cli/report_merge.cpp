#include "cli/report_merge.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace servelab::cli {
namespace {

namespace fs = std::filesystem;

/// A RunInfo from a label alone: "NAME@max" → max, "NAME@<rate>" → open at that rate, anything
/// else as runs.json reads a run without mode or rate (analysis::from_json).
analysis::RunInfo run_from_label(const std::string& label, int n_records) {
  nlohmann::ordered_json j = {{"label", label}, {"n_requests", n_records}};
  const auto at = label.rfind('@');
  if (at != std::string::npos && at + 1 < label.size()) {
    const std::string suffix = label.substr(at + 1);
    char* end = nullptr;
    const double rate = std::strtod(suffix.c_str(), &end);
    if (end && *end == '\0' && rate > 0 && std::isfinite(rate)) j["rate"] = rate;
    j["strategy"] = label.substr(0, at);
  }
  return j.get<analysis::RunInfo>();
}

}  // namespace

std::string peer_runs_path(const std::string& records_path) {
  std::string base = records_path;
  const std::string ext = ".jsonl";
  if (base.size() > ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0)
    base.resize(base.size() - ext.size());
  return base + ".run.json";
}

void add_peer_records(analysis::ReportInput& in, const std::string& records_path) {
  if (!fs::exists(records_path)) throw std::runtime_error(records_path + ": missing");
  std::set<std::string> taken;
  for (const auto& r : in.runs) taken.insert(r.label);
  for (const auto& r : in.records) taken.insert(r.run);

  bool cut = false;
  std::vector<RequestRecord> records = read_records(records_path, &cut);
  std::map<std::string, int> counts;  // label → records, in first-seen order below
  std::vector<std::string> order;
  for (const auto& r : records) {
    if (taken.count(r.run))
      throw std::runtime_error(records_path + ": run " + r.run +
                               " is already in the report (each run's records must come from one file)");
    if (counts[r.run]++ == 0) order.push_back(r.run);
  }

  std::vector<analysis::RunInfo> runs;
  std::set<std::string> described;
  const std::string sidecar = peer_runs_path(records_path);
  if (fs::exists(sidecar)) {
    try {
      const auto j = nlohmann::ordered_json::parse(analysis::read_text_file(sidecar));
      for (const auto& e : j.at("runs")) {
        auto info = e.get<analysis::RunInfo>();
        info.validate();
        if (taken.count(info.label))
          throw std::invalid_argument("run " + info.label + " is already in the report");
        if (!described.insert(info.label).second)
          throw std::invalid_argument("run " + info.label + " is listed twice");
        runs.push_back(std::move(info));
      }
    } catch (const std::exception& e) {
      throw std::runtime_error(sidecar + ": " + e.what());
    }
  }
  for (const auto& label : order)
    if (!described.count(label)) runs.push_back(run_from_label(label, counts[label]));

  for (auto& r : runs) in.runs.push_back(std::move(r));
  in.records.insert(in.records.end(), std::make_move_iterator(records.begin()),
                    std::make_move_iterator(records.end()));
  in.cut_short = in.cut_short || cut;
}

void write_merged_records(const std::string& dir, const analysis::ReportInput& in) {
  fs::create_directories(dir);
  std::string text;
  for (const auto& r : in.records) text += record_line(r);
  analysis::write_text_file((fs::path(dir) / "records.jsonl").string(), text);
  const std::string steps = (fs::path(dir) / "steps.jsonl").string();
  if (in.steps.empty()) {
    fs::remove(steps);  // an earlier merge's, when --force overwrites
    return;
  }
  text.clear();
  for (const auto& s : in.steps) text += step_line(s);
  analysis::write_text_file(steps, text);
}

}  // namespace servelab::cli
