// libFuzzer harness: the server's request-body parser must answer any bytes with a parsed
// request or an ApiError (400) — never crash, hang or throw anything else.
// Built with -DSERVELAB_FUZZ=ON under clang (scripts/fuzz.sh); the .cc suffix keeps it out of the unit tests.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/api_error.h"
#include "server/request_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servelab::server;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (ApiKind api : {ApiKind::completions, ApiKind::chat}) {
    try {
      const CompletionParams p = parse_completion_request(body, api);
      // What was accepted holds the documented ranges.
      if (p.n < 1 || p.n > ParseLimits{}.max_n) std::abort();
      if (p.max_tokens && *p.max_tokens < 1) std::abort();
      if (!(p.temperature >= 0) || !(p.top_p > 0 && p.top_p <= 1) || p.top_k < 0) std::abort();
      if (api == ApiKind::completions && !p.prompt_text && !p.prompt_ids) std::abort();
      if (api == ApiKind::chat && p.messages.empty()) std::abort();
    } catch (const ApiError& e) {
      if (e.status != 400) std::abort();
      (void)error_body(e);
    }
  }
  return 0;
}
