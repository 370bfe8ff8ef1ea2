// libFuzzer harness: the HTTP driver's SSE parser and chunk reader on arbitrary server bytes.
// The allocation-free chunk reader must agree with nlohmann on what is valid JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "loadgen/http/openai_chunk.h"
#include "loadgen/http/sse_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servelab::http_load;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  SseParser parser([](std::string_view event) {
    const ChunkInfo info = interpret_chunk(event);
    std::string_view d = event;
    while (!d.empty() && (d.back() == ' ' || d.back() == '\r' || d.back() == '\n')) d.remove_suffix(1);
    while (!d.empty() && d.front() == ' ') d.remove_prefix(1);
    if (d == "[DONE]") return;
    if (d.find('\0') != std::string_view::npos) return;  // nlohmann stops at NUL; the driver's reader does not
    const auto j = nlohmann::json::parse(d.begin(), d.end(), nullptr, false);
    const bool valid_object = !j.is_discarded() && j.is_object();
    if (valid_object == info.malformed) std::abort();  // the readers disagree
  });
  // Split the input at a point taken from its first byte: the parser must not care.
  const size_t cut = size ? data[0] % (size + 1) : 0;
  parser.feed(bytes.substr(0, cut));
  parser.feed(bytes.substr(cut));
  parser.finish();
  return 0;
}
