#pragma once
// ApiError: what the HTTP edge turns into an OpenAI-style error response,
// {"error": {"message", "type", "param", "code"}} with its HTTP status.
#include <stdexcept>
#include <string>

namespace servelab::server {

/// An error meant for the client. Thrown anywhere below the HTTP edge, caught once there.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string param, std::string code, const std::string& message)
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;          ///< 400, 401, 404, 405, 413, 429, 500, 503
  std::string type;    ///< "invalid_request_error", "authentication_error", ...
  std::string param;   ///< the offending request field ("max_tokens", "messages[1].content"); "" = null
  std::string code;    ///< machine-readable: "invalid_value", "missing_field", "queue_full", ...
};

/// 400 naming `param`.
inline ApiError bad_field(const std::string& param, const std::string& message,
                          const std::string& code = "invalid_value") {
  return ApiError(400, "invalid_request_error", param, code, param.empty() ? message : param + ": " + message);
}

/// The response body: {"error": {"message", "type", "param", "code"}} (param null when empty).
std::string error_body(const ApiError& e);

}  // namespace servelab::server
