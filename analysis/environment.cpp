#include "loadgen/records/json_int.h"
#include "analysis/environment.h"

#include <array>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "servelab_build_info.h"  // generated in the build folder by scripts/build-info.cmake

namespace servelab::analysis {
namespace {

std::string read_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return "";
}

/// `s` quoted for a POSIX shell.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

}  // namespace

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::array<char, 32> buf{};
  std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf.data();
}

BuildInfo build_info() { return {SERVELAB_BUILD_COMMIT, SERVELAB_BUILD_DIRTY != 0}; }

std::string git_commit(const std::string& dir) {
  const std::string cmd = "git -C " + shell_quote(dir) + " rev-parse HEAD 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::array<char, 128> buf{};
  std::string out;
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p)) out += buf.data();
  const int rc = pclose(p);
  if (rc != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

Environment detect_environment(const std::string& device, const std::string& commit,
                               const std::string& servelab_version) {
  Environment e;
  e.device = device;
  e.cpu_model = read_cpu_model();
  e.n_cores = static_cast<int>(std::thread::hardware_concurrency());
  e.commit = commit;
  e.date = utc_now_iso8601();
  e.servelab_version = servelab_version;
  return e;
}

void to_json(nlohmann::ordered_json& j, const Environment& e) {
  j = nlohmann::ordered_json::object();
  j["device"] = e.device;
  j["cpu_model"] = e.cpu_model;
  j["n_cores"] = e.n_cores;
  j["commit"] = e.commit;
  j["dirty"] = e.dirty;
  j["date"] = e.date;
  j["servelab_version"] = e.servelab_version;
}

void from_json(const nlohmann::ordered_json& j, Environment& e) {
  e.device = j.value("device", std::string());
  e.cpu_model = j.value("cpu_model", std::string());
  e.n_cores = json_int_or(j, "n_cores", 0);
  e.commit = j.value("commit", std::string());
  e.dirty = j.value("dirty", false);
  e.date = j.value("date", std::string());
  e.servelab_version = j.value("servelab_version", std::string());
}

}  // namespace servelab::analysis
