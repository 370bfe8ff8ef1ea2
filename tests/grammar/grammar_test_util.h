#pragma once
// Helpers of the grammar tests (and of bench/grammar_bench.cpp): small vocabularies, the brute-force
// mask check, random generation under the mask, the Qwen3 tokenizer when it is installed.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/model/tokenizer.h"

namespace servelab::grammar::testing {

/// A tokenizer over an explicit list of byte strings (id = index), eos = the last id + 1.
std::unique_ptr<Tokenizer> make_list_tokenizer(std::vector<std::string> tokens);

/// Byte tokenizer (ids 0..255) plus eos 256.
std::unique_ptr<Tokenizer> make_bytes_tokenizer();

/// The installed Qwen3 tokenizer.json's folder (third_party/npm/...).
std::string qwen_dir();
/// Loads it once per process; nullptr when missing (the caller skips, or fails under CI).
const Tokenizer* qwen_tokenizer();
std::shared_ptr<TokenTable> qwen_table();
/// True when the environment variable CI is set (missing test inputs then fail).
bool under_ci();

/// The byte tokenizer's table, built once per process.
std::shared_ptr<TokenTable> bytes_table();
/// Whether the grammar matches text exactly (fed byte by byte, then complete).
bool full_match(const Grammar& g, std::string_view text);

/// Compares the matcher's mask with accept_token on a copy for each id in `ids` (all ids when
/// empty); returns "" or a description of the first difference.
std::string brute_force_mismatch(GrammarMatcher& m, const std::vector<int32_t>& ids = {});

/// One random generation: at each step a random allowed token; with probability structural / 2
/// among eos and the tokens that only close things ('"' '}' ']' first), so strings, objects and
/// arrays end, and with probability structural / 2 among the one-byte tokens, so literal
/// characters such as '@' turn up; past max_tokens / 4, nine picks in ten close things; until
/// eos or max_tokens. Returns the bytes; *finished says whether eos was reached. Each mask time
/// in microseconds goes to mask_us when given.
std::string generate(GrammarMatcher& m, std::mt19937_64& rng, int max_tokens, bool* finished,
                     std::vector<double>* mask_us = nullptr, double structural = 0.5);

}  // namespace servelab::grammar::testing
