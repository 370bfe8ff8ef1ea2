#pragma once
// Where a run was measured: written into summary.json so every committed figure says which
// device, CPU, commit and date it came from.
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace servelab::analysis {

/// The machine and code a run was measured on.
struct Environment {
  std::string device;            ///< e.g. "cpu (OpenBLAS)", "NVIDIA H200", "sim (cost model)"
  std::string cpu_model;         ///< /proc/cpuinfo "model name"
  int n_cores = 0;               ///< hardware threads
  std::string commit;            ///< git commit of the servelab build, "" or "unknown" when unknown
  bool dirty = false;            ///< the build's tree had changes not in `commit`
  std::string date;              ///< UTC, ISO 8601 ("2026-11-22T10:04:05Z"), taken when measured
  std::string servelab_version;  ///< e.g. "0.1.0"
};

/// Fills cpu_model, n_cores and date (now) from this machine; device, commit and version as given.
Environment detect_environment(const std::string& device, const std::string& commit,
                               const std::string& servelab_version);

/// What this binary was built from, embedded at build time (CMake writes it on every build, see
/// scripts/build-info.cmake), so it does not depend on the directory servelab runs in.
struct BuildInfo {
  std::string commit;  ///< full SHA-1 of HEAD, or "unknown" outside a git checkout
  bool dirty = false;  ///< uncommitted changes or new unignored files in the tree
};
BuildInfo build_info();

/// `git rev-parse HEAD` run in `dir` (a subprocess), or "" when git or the repository is missing.
std::string git_commit(const std::string& dir);

/// The current time as UTC ISO 8601 ("2026-11-22T10:04:05Z").
std::string utc_now_iso8601();

/// {"device", "cpu_model", "n_cores", "commit", "dirty", "date", "servelab_version"}.
void to_json(nlohmann::ordered_json& j, const Environment& e);
void from_json(const nlohmann::ordered_json& j, Environment& e);

}  // namespace servelab::analysis
