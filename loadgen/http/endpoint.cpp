// The target's names and its URL parser (declared in loadgen/target.h): part of the HTTP
// driver's library, which does not link the engine. TargetSpec::validate and the YAML reader
// stay in loadgen/target.cpp, with the scenario.
#include <stdexcept>
#include <string>
#include <string_view>

#include "loadgen/target.h"

namespace servelab {

const char* to_string(TargetApi a) { return a == TargetApi::chat ? "chat" : "completions"; }
const char* to_string(Balance b) { return b == Balance::least_outstanding ? "least_outstanding" : "round_robin"; }

Endpoint parse_endpoint(const std::string& url) {
  Endpoint e;
  e.url = url;
  std::string rest;
  if (url.rfind("http://", 0) == 0) rest = url.substr(7);
  else if (url.rfind("https://", 0) == 0) throw std::invalid_argument("https is not supported (got " + url + "); use http://");
  else throw std::invalid_argument("must start with http:// (got '" + url + "')");
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) e.prefix = rest.substr(slash);
  while (!e.prefix.empty() && e.prefix.back() == '/') e.prefix.pop_back();
  auto strip = [&](std::string_view tail) {
    if (e.prefix.size() < tail.size() || e.prefix.compare(e.prefix.size() - tail.size(), tail.size(), tail) != 0) return false;
    e.prefix.resize(e.prefix.size() - tail.size());
    return true;
  };
  if (strip("/v1/chat/completions")) e.api = TargetApi::chat;
  else if (strip("/v1/completions")) e.api = TargetApi::completions;
  else strip("/v1");
  if (!hostport.empty() && hostport[0] == '[') {  // [::1]:8000
    const size_t close = hostport.find(']');
    if (close == std::string::npos) throw std::invalid_argument("unclosed [ in host (got '" + url + "')");
    e.host = hostport.substr(1, close - 1);
    if (close + 1 < hostport.size()) {
      if (hostport[close + 1] != ':') throw std::invalid_argument("expected :PORT after ] (got '" + url + "')");
      e.port = hostport.substr(close + 2);
    }
  } else {
    const size_t colon = hostport.rfind(':');
    e.host = hostport.substr(0, colon);
    if (colon != std::string::npos) e.port = hostport.substr(colon + 1);
  }
  if (e.host.empty()) throw std::invalid_argument("has no host (got '" + url + "')");
  if (e.port.empty() || e.port.find_first_not_of("0123456789") != std::string::npos || e.port.size() > 5 ||
      std::stoi(e.port) < 1 || std::stoi(e.port) > 65535)
    throw std::invalid_argument("port must be a number in [1, 65535] (got '" + e.port + "')");
  return e;
}

}  // namespace servelab
