// libFuzzer harness: Hugging Face config.json. Any text must give a validated ModelConfig or a
// std::runtime_error naming the key; an accepted config must round-trip through hf_config_json.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "engine/model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace servelab;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ModelConfig c;
  try {
    c = parse_hf_config(text, "config.json");
  } catch (const std::runtime_error&) {
    return 0;
  }
  // What was accepted is valid, so writing it and reading it back must work.
  try {
    (void)parse_hf_config(hf_config_json(c), "roundtrip.json");
  } catch (const std::runtime_error&) {
    std::abort();
  }
  return 0;
}
