#pragma once
// Datasets (prompt/output lengths taken from real conversations) and traces (timed requests).
// Only lengths are taken: prompts are drawn as random token ids of that length, so a benchmark
// needs no tokenizer. Text is counted as ceil(UTF-8 bytes / 4) tokens (about 4 bytes per token for
// English with Llama-family BPE vocabularies), or, given a tokenizer, as the ids it encodes to
// (then the prompt's ids are kept, so prompts can be the text itself).
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"

namespace servelab {

class Tokenizer;

enum class DatasetFormat { sharegpt, jsonl };
const char* to_string(DatasetFormat f);  ///< "sharegpt", "jsonl"

/// Token count of a text: ceil(bytes / 4).
int count_text_tokens(std::string_view text);

/// One dataset entry's lengths; `line` is where it starts in the file (1-based).
struct LengthPair {
  int prompt_tokens = 0;
  int output_tokens = 0;
  int line = 0;
  std::vector<TokenId> prompt_ids;  ///< the prompt text's ids, when loaded with a tokenizer from text
};

struct Dataset {
  std::string path;
  DatasetFormat format = DatasetFormat::sharegpt;
  std::vector<LengthPair> entries;  ///< usable entries, in file order
  int n_skipped = 0;                ///< entries without a prompt and a reply (as vLLM skips them)
};

/// Loads a dataset.
/// - sharegpt: a JSON list of {"conversations": [{"from": "human", "value": text},
///   {"from": "gpt", "value": text}, ...]}; the first turn is the prompt, the second the output.
///   Entries with fewer than two turns or an empty one are skipped (counted in n_skipped).
/// - jsonl: one object a line, {"prompt_tokens": n, "output_tokens": m} or {"prompt": text,
///   "output": text}; blank lines are ignored.
/// Throws std::runtime_error("path:line: message") on a missing file, bad JSON or a wrong
/// field, and when no usable entry is left.
/// With `tokenizer`, texts are counted by tokenizer->encode(text, parse_special = false) and the
/// prompt's ids are kept in LengthPair::prompt_ids; without, as ceil(bytes / 4).
Dataset load_dataset(const std::string& path, DatasetFormat format, const Tokenizer* tokenizer = nullptr);

/// One line of a trace: a request sent at timestamp_s.
struct TraceEntry {
  double timestamp_s = 0.0;  ///< relative to the trace's first line (so Unix times work)
  int prompt_tokens = 0;
  int output_tokens = 0;
  int line = 0;
};

/// Loads a JSONL trace: {"timestamp": seconds, "prompt_tokens": n, "output_tokens": m} a line.
/// Timestamps must be finite, >= 0 and non-decreasing; they are shifted so the first is 0.
/// Throws std::runtime_error("path:line: message").
std::vector<TraceEntry> load_trace(const std::string& path);

}  // namespace servelab
