#pragma once
// What one streamed event of an OpenAI-compatible server says, tolerant of the servers' quirks:
// vLLM and SGLang put usage only in the last chunk (choices: []) and send empty deltas; TGI and
// llama.cpp may put several tokens in one chunk; chat streams open with a role-only delta.
#include <optional>
#include <string>
#include <string_view>

namespace servelab::http_load {

struct ChunkInfo {
  bool done = false;                 ///< "data: [DONE]"
  bool malformed = false;            ///< not JSON / not an object
  std::string error;                 ///< an {"error": ...} event's message
  bool token = false;                ///< carries generated output (see interpret_chunk)
  size_t text_bytes = 0;
  std::optional<std::string> finish_reason;
  std::optional<int> prompt_tokens;  ///< from usage
  std::optional<int> completion_tokens;
};

/// Reads one event's data. A chunk counts as a token when a choice has a text/content field
/// and either some text or no finish_reason yet (an empty delta still marks a token the server
/// decoded to nothing yet); a role-only opening delta and a bare finish marker do not count.
/// With `text`, each choice's text/content is appended to it as the JSON string's raw contents
/// (escapes kept; decode the whole with decode_json_string_contents once the stream ends).
ChunkInfo interpret_chunk(std::string_view data, std::string* text = nullptr);

/// The text of JSON string contents (escapes decoded): what interpret_chunk gathered. Invalid
/// escapes or bytes are replaced, never thrown.
std::string decode_json_string_contents(const std::string& raw);

}  // namespace servelab::http_load
