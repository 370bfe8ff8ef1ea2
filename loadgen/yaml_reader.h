#pragma once
// Internal to loadgen: typed reading of a scenario's YAML nodes. Each read records the value's
// location under its key path (for later messages), checks its type, and reports a problem to
// the Diagnostics instead of throwing, so every error of a file is found in one pass.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "loadgen/overrides.h"
#include "loadgen/scenario.h"
#include "loadgen/scenario_parse.h"

namespace servelab::scenario_yaml {

inline std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }
inline std::string index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

inline std::string list_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

inline const char* type_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "nothing";
    default: return "a value";
  }
}

/// Shows what was written: 'abc' for a scalar, "a list" for a list.
inline std::string shown(const YAML::Node& n) { return n.IsScalar() ? "'" + n.Scalar() + "'" : type_name(n); }

inline std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return buf;
}

/// Present with a value: `key:` left empty (or `--set key=null`) counts as absent, so the default holds.
inline bool defined(const YAML::Node& n) { return n.IsDefined() && !n.IsNull(); }

template <class E>
using Options = std::vector<std::pair<std::string, E>>;

/// Base of the schema walk: locations, typed reads, map checks.
class YamlReader {
 public:
  YamlReader(const std::vector<AppliedOverride>& ov, Scenario& s, Diagnostics& d) : ov_(ov), s_(s), d_(d) {}

 protected:
  SourceLoc loc(const YAML::Node& n, const std::string& path) const {
    const AppliedOverride* best = nullptr;
    for (const auto& o : ov_) {
      const bool under = path == o.path || (path.size() > o.path.size() && path.compare(0, o.path.size(), o.path) == 0 &&
                                            (path[o.path.size()] == '.' || path[o.path.size()] == '['));
      if (under && (!best || o.path.size() > best->path.size())) best = &o;
    }
    if (!best && !(n.IsDefined() && n.Mark().line >= 0)) {
      // A node with no place in the file was created by an override below it
      // (--set workload.arival.cv=2 creates the key 'arival').
      for (const auto& o : ov_)
        if (o.path.size() > path.size() && o.path.compare(0, path.size(), path) == 0 &&
            (o.path[path.size()] == '.' || o.path[path.size()] == '[')) {
          best = &o;
          break;
        }
    }
    SourceLoc l;
    l.file = s_.source_file;
    if (best) {
      l.override_text = best->text;
      l.override_index = static_cast<int>(best - ov_.data());
    } else if (n.IsDefined() && n.Mark().line >= 0) {
      l.line = n.Mark().line + 1;
      l.col = n.Mark().column + 1;
    }
    return l;
  }
  void note(const YAML::Node& n, const std::string& path) { s_.source.set(path, loc(n, path)); }

  // -- typed reads: note the location, check the type, return whether `out` was set --
  bool scalar(const YAML::Node& n, const std::string& path, const char* expected) {
    note(n, path);
    if (n.IsScalar()) return true;
    d_.error(path, std::string("must be ") + expected + " (got " + type_name(n) + ")");
    return false;
  }
  template <class T>
  bool read_int(const YAML::Node& n, const std::string& path, T& out) {
    if (!scalar(n, path, "an integer")) return false;
    T v{};
    if (!YAML::convert<T>::decode(n, v)) {
      d_.error(path, std::string(std::is_unsigned_v<T> ? "must be a non-negative integer" : "must be an integer") +
                         " (got " + shown(n) + ")");
      return false;
    }
    out = v;
    return true;
  }
  bool read_double(const YAML::Node& n, const std::string& path, double& out) {
    if (!scalar(n, path, "a number")) return false;
    const std::string& t = n.Scalar();
    if (t == "inf" || t == "Infinity") return out = INFINITY, true;
    double v = 0;
    if (!YAML::convert<double>::decode(n, v) || std::isnan(v)) {
      d_.error(path, "must be a number (got " + shown(n) + ")");
      return false;
    }
    out = v;
    return true;
  }
  bool read_bool(const YAML::Node& n, const std::string& path, bool& out) {
    if (!scalar(n, path, "true or false")) return false;
    bool v = false;
    if (!YAML::convert<bool>::decode(n, v)) {
      d_.error(path, "must be true or false (got " + shown(n) + ")");
      return false;
    }
    out = v;
    return true;
  }
  bool read_string(const YAML::Node& n, const std::string& path, std::string& out) {
    if (!scalar(n, path, "a string")) return false;
    out = n.Scalar();
    return true;
  }
  template <class E>
  bool read_enum(const YAML::Node& n, const std::string& path, E& out, const Options<E>& options) {
    std::vector<std::string> names;
    for (const auto& o : options) names.push_back(o.first);
    if (!scalar(n, path, ("one of " + list_names(names)).c_str())) return false;
    for (const auto& o : options)
      if (n.Scalar() == o.first) return out = o.second, true;
    std::string msg = "must be one of " + list_names(names) + " (got " + shown(n) + ")";
    if (auto dym = did_you_mean(n.Scalar(), names); !dym.empty()) msg += "; did you mean '" + dym + "'?";
    d_.error(path, msg);
    return false;
  }
  bool read_path(const YAML::Node& n, const std::string& path, std::string& out) {
    std::string raw;
    if (!read_string(n, path, raw)) return false;
    if (raw.empty()) {
      d_.error(path, "must name a file (got an empty string)");
      return false;
    }
    out = resolve_input_path(raw, s_.source_file);
    return true;
  }

  /// Notes the map, checks it is one, reports unknown and duplicate keys. false: skip reading.
  bool check_map(const YAML::Node& n, const std::string& path, const std::vector<std::string>& allowed) {
    note(n, path);
    const std::string where = path.empty() ? "at the top level" : "in " + path;
    if (!n.IsMap()) {
      d_.error_at(path, (path.empty() ? std::string("a scenario") : path) + " must be a map of keys (" +
                            list_names(allowed) + ") (got " + type_name(n) + ")");
      return false;
    }
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      // A copy (a Node is a handle): it-> returns a temporary proxy, so a reference to its
      // `first` would dangle (ASan stack-use-after-scope, found by fuzz_scenario).
      const YAML::Node key = it->first;
      if (!key.IsScalar()) {
        d_.error_at(path, "keys " + where + " must be plain names");
        continue;
      }
      const std::string k = key.Scalar();
      const std::string kp = join(path, k);
      if (!seen.insert(k).second) {
        s_.source.set(kp + "#dup", loc(key, kp));
        d_.error_at(kp + "#dup", "duplicate key '" + k + "' " + where);
        continue;
      }
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        s_.source.set(kp, loc(key, kp));
        std::string msg = "unknown key '" + k + "' " + where + " (allowed: " + list_names(allowed) + ")";
        if (auto dym = did_you_mean(k, allowed); !dym.empty()) msg += "; did you mean '" + dym + "'?";
        d_.error_at(kp, msg);
      }
    }
    return true;
  }
  /// A section that may be left empty (`slo:` with nothing under it keeps the defaults).
  bool section(const YAML::Node& n, const std::string& path, const std::vector<std::string>& allowed) {
    if (n.IsNull()) return note(n, path), false;
    return check_map(n, path, allowed);
  }


  const std::vector<AppliedOverride>& ov_;
  Scenario& s_;
  Diagnostics& d_;
};

}  // namespace servelab::scenario_yaml
