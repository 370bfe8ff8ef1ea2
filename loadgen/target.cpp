#include "loadgen/target.h"

#include <stdexcept>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "loadgen/scenario.h"
#include "loadgen/scenario_parse.h"

namespace servelab {

void TargetSpec::validate(Diagnostics& diag) const {
  if (urls.empty() && !diag.failed("target.url")) diag.error("target.url", "is required (http://HOST:PORT)");
  for (size_t i = 0; i < urls.size(); ++i) {
    const std::string path = urls.size() == 1 ? "target.url" : "target.urls[" + std::to_string(i) + "]";
    try {
      parse_endpoint(urls[i]);
    } catch (const std::invalid_argument& e) {
      if (!diag.failed(path)) diag.error(path, e.what());
    }
  }
  for (size_t i = 0; i < urls.size(); ++i) {  // an endpoint URL against `api:`
    const std::string path = urls.size() == 1 ? "target.url" : "target.urls[" + std::to_string(i) + "]";
    try {
      const Endpoint e = parse_endpoint(urls[i]);
      if (e.api && api_given && *e.api != api && !diag.failed(path))
        diag.error(path, std::string("names the ") + to_string(*e.api) + " endpoint but target.api is " + to_string(api) +
                             " (give one)");
    } catch (const std::invalid_argument&) {
    }
  }
  if (!(max_error_rate >= 0 && max_error_rate <= 1) && !diag.failed("target.max_error_rate"))
    diag.error("target.max_error_rate", "must be in [0, 1] (got " + std::to_string(max_error_rate) + ")");
  if (!extra_body.empty() && !diag.failed("target.extra_body")) {
    const auto j = nlohmann::json::parse(extra_body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) diag.error("target.extra_body", "must be a JSON object (got " + extra_body + ")");
  }
  if (!(timeout_s > 0) && !diag.failed("target.timeout_s"))
    diag.error("target.timeout_s", "must be > 0 (got " + std::to_string(timeout_s) + ")");
}

namespace {

/// A YAML map or scalar as JSON text (numbers, booleans and null kept as such).
nlohmann::json yaml_to_json(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& kv : n) j[kv.first.as<std::string>()] = yaml_to_json(kv.second);
    return j;
  }
  if (n.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : n) j.push_back(yaml_to_json(e));
    return j;
  }
  if (!n.IsDefined() || n.IsNull()) return nullptr;
  const std::string& t = n.Scalar();
  if (n.Tag() != "!") {  // plain scalars may be numbers or booleans; quoted ones stay strings
    if (t == "true" || t == "false") return t == "true";
    const auto num = nlohmann::json::parse(t, nullptr, false);
    if (!num.is_discarded() && num.is_number()) return num;
  }
  return t;
}

std::string yaml_to_json_text(const YAML::Node& n) { return yaml_to_json(n).dump(); }

void note(Scenario& s, const YAML::Node& n, const std::string& path) {
  SourceLoc loc;
  loc.file = s.source.file();
  if (n.Mark().line >= 0) {
    loc.line = n.Mark().line + 1;
    loc.col = n.Mark().column + 1;
  }
  s.source.set(path, loc);
}

bool read_scalar(Scenario& s, Diagnostics& d, const YAML::Node& n, const std::string& path, std::string& out) {
  note(s, n, path);
  if (!n.IsScalar()) {
    d.error(path, "must be a string");
    return false;
  }
  out = n.Scalar();
  return true;
}

}  // namespace

void read_target(const YAML::Node& n, Scenario& s, Diagnostics& d) {
  note(s, n, "target");
  if (n.IsScalar()) {  // target: http://host:port
    s.target.emplace();
    s.target->urls.push_back(n.Scalar());
  } else if (!n.IsMap()) {
    d.error("target", "must be a URL or a map {url, model, api, headers, tokenizer, timeout_s}");
    return;
  } else {
    TargetSpec t;
    for (const auto& kv : n) {
      const std::string key = kv.first.as<std::string>();
      const std::string path = "target." + key;
      const YAML::Node& v = kv.second;
      std::string text;
      if (key == "url") {
        if (read_scalar(s, d, v, path, text)) t.urls.push_back(text);
      } else if (key == "urls") {
        note(s, v, path);
        if (!v.IsSequence()) {
          d.error(path, "must be a list of URLs");
          continue;
        }
        for (size_t i = 0; i < v.size(); ++i)
          if (read_scalar(s, d, v[i], path + "[" + std::to_string(i) + "]", text)) t.urls.push_back(text);
      } else if (key == "model") {
        read_scalar(s, d, v, path, t.model);
      } else if (key == "api") {
        if (!read_scalar(s, d, v, path, text)) continue;
        t.api_given = true;
        if (text == "completions") t.api = TargetApi::completions;
        else if (text == "chat") t.api = TargetApi::chat;
        else d.error(path, "must be completions or chat (got '" + text + "')");
      } else if (key == "balance") {
        if (!read_scalar(s, d, v, path, text)) continue;
        if (text == "round_robin") t.balance = Balance::round_robin;
        else if (text == "least_outstanding") t.balance = Balance::least_outstanding;
        else d.error(path, "must be round_robin or least_outstanding (got '" + text + "')");
      } else if (key == "headers") {
        note(s, v, path);
        if (!v.IsMap()) {
          d.error(path, "must be a map of header: value");
          continue;
        }
        for (const auto& h : v)
          if (read_scalar(s, d, h.second, path + "." + h.first.as<std::string>(), text))
            t.headers[h.first.as<std::string>()] = text;
      } else if (key == "tokenizer") {
        if (read_scalar(s, d, v, path, text)) t.tokenizer = resolve_input_path(text, s.source_file);
      } else if (key == "timeout_s") {
        note(s, v, path);
        try {
          t.timeout_s = v.as<double>();
        } catch (const YAML::Exception&) {
          d.error(path, "must be a number of seconds");
        }
      } else if (key == "max_error_rate") {
        note(s, v, path);
        try {
          t.max_error_rate = v.as<double>();
        } catch (const YAML::Exception&) {
          d.error(path, "must be a share in [0, 1]");
        }
      } else if (key == "ignore_eos" || key == "preflight") {
        note(s, v, path);
        try {
          (key == "ignore_eos" ? t.ignore_eos : t.preflight) = v.as<bool>();
        } catch (const YAML::Exception&) {
          d.error(path, "must be true or false");
        }
      } else if (key == "extra_body") {
        note(s, v, path);
        if (v.IsScalar()) {
          t.extra_body = v.Scalar();
        } else if (v.IsMap()) {
          t.extra_body = yaml_to_json_text(v);
        } else {
          d.error(path, "must be a map (or JSON object text) merged into every request body");
        }
      } else {
        note(s, kv.first, path);
        d.error_at(path, "unknown key target." + key +
                             " (allowed: url, urls, model, api, headers, tokenizer, timeout_s, balance, ignore_eos, "
                             "extra_body, max_error_rate, preflight)");
      }
    }
    s.target = std::move(t);
  }
  // A URL naming the chat endpoint chooses the chat API when `api:` does not say.
  if (!s.target->api_given) {
    for (const auto& u : s.target->urls) {
      try {
        if (const auto api = parse_endpoint(u).api) s.target->api = *api;
      } catch (const std::invalid_argument&) {
        // reported by validate()
      }
    }
  }
  s.target->validate(d);
  if (s.strategies.empty()) {
    StrategySpec http;
    http.label = "http";
    http.sched.chunked_prefill = true;  // engine limits do not apply to a remote server's prompts
    s.strategies.push_back(http);
  }
}

}  // namespace servelab
