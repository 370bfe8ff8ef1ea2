#pragma once
// `--set key.path=value` overrides, applied to a scenario's YAML tree before it is parsed, so an
// overridden value is checked exactly like one written in the file.
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace servelab {

/// One applied override: the key path in the form error messages use ("strategies[0].kv.kind")
/// and the override as the user typed it ("strategies.0.kv.kind=paged").
struct AppliedOverride {
  std::string path;
  std::string text;
};

/// Applies each "a.b.c=value" to `root` (value parsed as YAML: a scalar, or a flow list/map such
/// as [1,2,4] or {dist: fixed, value: 64}). A path component indexes a list when it is a number
/// ("strategies.0.kv.kind" or "strategies[0].kv.kind"); missing map keys are created (an
/// unknown one is then reported by the schema). Problems — no '=', an empty path, indexing into
/// a plain value, an index past the end, a value that is not YAML — are appended to `errors` as
/// "--set TEXT: message". Returns the overrides that were applied.
std::vector<AppliedOverride> apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides,
                                             std::vector<std::string>& errors);

}  // namespace servelab
