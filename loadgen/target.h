#pragma once
// `target:` — load an OpenAI-compatible server over HTTP instead of the in-process engine:
//   target: {url: http://127.0.0.1:8000, model: NAME, api: completions|chat,
//            headers: {Authorization: Bearer KEY}, tokenizer: DIR, timeout_s: 600,
//            urls: [..several replicas..], balance: round_robin|least_outstanding,
//            ignore_eos: true, extra_body: {...}, max_error_rate: 0.05, preflight: true}
#include <map>
#include <optional>
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

/// One server address: http://HOST[:PORT][/PREFIX] (https is not supported). A full endpoint URL,
/// as vLLM users paste it (http://h:8000/v1/completions, .../v1/chat/completions), is understood:
/// the endpoint is taken off the prefix and `api` says which it named.
struct Endpoint {
  std::string url;     ///< as written
  std::string host;
  std::string port = "80";
  std::string prefix;  ///< path before /v1/...; "" or "/something"
  std::optional<TargetApi> api;  ///< the API the URL's path named, if it named one
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
  bool api_given = false;              ///< `api:` was written (else a URL's endpoint may choose it)
  bool ignore_eos = true;              ///< send ignore_eos so outputs run to the planned length
  std::string extra_body;              ///< JSON object merged into every request body ("" = none)
  /// A run whose failed share passes this fails (exit 1, a gate in the report); every request
  /// failing always does.
  double max_error_rate = 0.05;
  bool preflight = true;               ///< one request before the load; its failure stops the run
  /// Checks urls (parse_endpoint), timeout; problems go to diag under `target.*`.
  void validate(Diagnostics& diag) const;
};

/// The scenario hook: reads `target:` into scenario.target. Without `strategies:`, the runs get
/// one strategy labelled "http" (the engine knobs do not apply to a remote server).
void read_target(const YAML::Node& node, Scenario& scenario, Diagnostics& diag);

}  // namespace servelab
