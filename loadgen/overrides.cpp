#include "loadgen/overrides.h"

#include <cctype>
#include <optional>

namespace servelab {

namespace {

/// "strategies[0].kv" → {"strategies", "0", "kv"}; nullopt on an empty component or bad brackets.
std::optional<std::vector<std::string>> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string cur;
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '.') {
      if (cur.empty() && (i == 0 || path[i - 1] != ']')) return std::nullopt;
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else if (c == '[') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
      const size_t close = path.find(']', i);
      if (close == std::string::npos || close == i + 1) return std::nullopt;
      parts.push_back(path.substr(i + 1, close - i - 1));
      i = close;
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  else if (path.empty() || path.back() == '.') return std::nullopt;
  if (parts.empty()) return std::nullopt;
  return parts;
}

std::optional<size_t> parse_index(const std::string& s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  return static_cast<size_t>(std::stoul(s));
}

const char* kind_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return "a plain value";
    case YAML::NodeType::Null: return "empty";
    default: return "undefined";
  }
}

}  // namespace

std::vector<AppliedOverride> apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides,
                                             std::vector<std::string>& errors) {
  std::vector<AppliedOverride> applied;
  for (const std::string& text : overrides) {
    auto fail = [&](const std::string& msg) { errors.push_back("--set " + text + ": " + msg); };
    const size_t eq = text.find('=');
    if (eq == std::string::npos) {
      fail("expected key.path=value (e.g. --set workload.rates=[1,2,4])");
      continue;
    }
    const std::string key_path = text.substr(0, eq);
    const auto parts = split_path(key_path);
    if (!parts) {
      fail("bad key path '" + key_path + "' (use dotted keys, list indices as numbers: strategies.0.kv.kind)");
      continue;
    }
    YAML::Node value;
    try {
      value = YAML::Load(text.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      fail("value is not valid YAML: " + e.msg);
      continue;
    }
    if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);

    YAML::Node cur;
    cur.reset(root);
    std::string norm;  // normalized path, as error messages name it
    bool ok = true;
    for (size_t i = 0; i < parts->size() && ok; ++i) {
      const std::string& part = (*parts)[i];
      const bool last = i + 1 == parts->size();
      if (cur.IsSequence()) {
        const auto idx = parse_index(part);
        if (!idx) {
          fail((norm.empty() ? "the top level" : norm) + " is a list; '" + part + "' is not an index");
          ok = false;
          break;
        }
        if (*idx >= cur.size()) {
          fail(norm + " has " + std::to_string(cur.size()) + " entr" + (cur.size() == 1 ? "y" : "ies") +
               " (index " + part + " is out of range)");
          ok = false;
          break;
        }
        norm += "[" + part + "]";
        if (last) {
          cur[*idx] = value;
        } else {
          YAML::Node next = cur[*idx];
          cur.reset(next);
        }
      } else if (cur.IsMap() || cur.IsNull()) {
        norm += (norm.empty() ? "" : ".") + part;
        if (last) {
          cur[part] = value;
        } else {
          const YAML::Node& ccur = cur;
          if (!ccur[part].IsDefined() || ccur[part].IsNull()) cur[part] = YAML::Node(YAML::NodeType::Map);
          YAML::Node next = cur[part];
          cur.reset(next);
        }
      } else {
        fail(norm + " is " + kind_name(cur) + " (" + cur.Scalar() + "), so it has no key '" + part + "'");
        ok = false;
      }
    }
    if (ok) applied.push_back({norm, text});
  }
  return applied;
}

}  // namespace servelab
