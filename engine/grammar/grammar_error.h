#pragma once
// The one exception type of the grammar engine: a schema, regex, grammar or request constraint we
// cannot compile. Its message names the construct and where it is
// ("json_schema: unsupported keyword \"patternProperties\" at /properties/a"), so the HTTP server
// can answer 400 with it as it stands.
#include <stdexcept>
#include <string>

namespace servelab::grammar {

/// A constraint the grammar engine refuses (unsupported, malformed or too large). what() is the
/// user-facing message.
class GrammarError : public std::invalid_argument {
 public:
  explicit GrammarError(const std::string& message) : std::invalid_argument(message) {}
};

}  // namespace servelab::grammar
