#pragma once
// `target:` — load an OpenAI-compatible server over HTTP instead of the in-process engine:
//   target: {url: http://127.0.0.1:8000, model: NAME, api: completions|chat,
//            headers: {Authorization: Bearer KEY}, tokenizer: DIR, timeout_s: 600,
//            urls: [..several replicas..], balance: round_robin|least_outstanding}
#include <map>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace servelab {

struct Scenario;
class Diagnostics;

enum class TargetApi { completions, chat };
enum class Balance { round_robin, least_outstanding };
const char* to_string(TargetApi a);
const char* to_string(Balance b);

/// One server address: http://HOST[:PORT][/PREFIX] (https is not supported).
struct Endpoint {
  std::string url;     ///< as written
  std::string host;
  std::string port = "80";
  std::string prefix;  ///< path before /v1/...; "" or "/something"
};
/// Throws std::invalid_argument naming what is wrong with `url`.
Endpoint parse_endpoint(const std::string& url);

struct TargetSpec {
  std::vector<std::string> urls;       ///< one per replica
  std::string model;                   ///< "" = the server's only model (field left out)
  TargetApi api = TargetApi::completions;
  std::map<std::string, std::string> headers;
  std::string tokenizer;               ///< model folder: prompts are sent as its text; "" = token ids (completions)
  double timeout_s = 600.0;            ///< per request
  Balance balance = Balance::round_robin;
  /// Checks urls (parse_endpoint), timeout; problems go to diag under `target.*`.
  void validate(Diagnostics& diag) const;
};

/// The scenario hook: reads `target:` into scenario.target. Without `strategies:`, the runs get
/// one strategy labelled "http" (the engine knobs do not apply to a remote server).
void read_target(const YAML::Node& node, Scenario& scenario, Diagnostics& diag);

}  // namespace servelab
