#pragma once
// Reading tokenizer.json in one streaming pass: model.vocab and model.merges (the bulk of an 11 MB
// file) go straight into flat lists; everything else becomes a small JSON document. About three
// times faster than building the whole document and frees nothing large afterwards.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace servelab {

/// tokenizer.json as read, before interpretation.
struct TokenizerJson {
  nlohmann::json rest;  ///< the document without model.vocab and model.merges
  bool has_vocab = false, has_merges = false;
  std::vector<std::pair<std::string, int64_t>> vocab;  ///< model.vocab entries in file order
  /// model.merges entries: left, right and whether it was the ["a", "b"] form.
  struct Merge {
    std::string left, right;
    bool array_form = false;
  };
  std::vector<Merge> merges;
  std::string error;  ///< the first malformed vocab/merges entry ("" if none), as "model.merges[3] ..."
};

/// Parses text (the file's contents). Throws std::runtime_error "<path>: not valid JSON (...)".
TokenizerJson read_tokenizer_json(const std::string& text, const std::string& path);

}  // namespace servelab
