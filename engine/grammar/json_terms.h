#pragma once
// The JSON building blocks the schema front end calls: strings (plain, with length bounds, with a
// pattern or a format), numbers and integers (optionally in a range), any value / object / array,
// object keys outside a given set, and literal values. Each kind is one rule per grammar,
// made the same way every time and named by a share key, so the token classes of its states are
// computed once per tokenizer and reused by every grammar that calls it.
//
// Whitespace policy (docs/structured-output.md): compact JSON, with at most one optional space
// after ',' and after ':'; nothing else. Numbers have at most 16 integer digits, 16 fraction
// digits and 2 exponent digits; so no generation can loop on blanks or digits forever.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"

namespace servelab::grammar {

inline constexpr int64_t kJsonMaxIntAbs = 9'999'999'999'999'999;  ///< 16 digits
inline constexpr int kJsonMaxStringBound = 256;  ///< maxLength above this is written as this

class JsonTerms {
 public:
  explicit JsonTerms(Grammar& g) : g_(g) {}

  int sp();     ///< the optional space after ',' and ':'
  int comma();  ///< ',' sp
  int colon();  ///< ':' sp
  int string();  ///< any JSON string
  /// A string of min..max characters (code points); max -1 = unbounded, max > 256 written as 256.
  int string_length(int min, int max, const std::string& where);
  int string_pattern(const std::string& pattern, const std::string& where);
  /// A string in the format, or -1 for a format we do not know (formats are annotations then).
  int string_format(const std::string& format, const std::string& where);
  int number();
  int integer();
  /// Integers in [lo, hi] (nullopt = unbounded); throws GrammarError when empty.
  int integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi, const std::string& where);
  /// Numbers in [lo, hi] with integer bounds, written without exponent.
  int number_range(std::optional<int64_t> lo, std::optional<int64_t> hi, const std::string& where);
  int value();   ///< any JSON value
  int object();  ///< any JSON object
  int array();   ///< any JSON array
  /// A quoted key that is none of `keys` (which must be ASCII without characters that need
  /// escaping): it starts with a character none of them starts with and has no escapes, so it
  /// can never spell a listed key. Sound, not complete: "name2" beside "name" cannot be written.
  int key_except(const std::vector<std::string>& keys, const std::string& where);
  /// The value written compactly (nlohmann's dump), as a literal.
  int literal(const nlohmann::ordered_json& value);

 private:
  int rule(const std::string& key, const std::string& name);  // -1 when made already
  int called(const std::string& key) { return g_.call(rules_.at(key)); }
  /// One character of a JSON string's content; u_escapes: also \uXXXX (bounded strings leave
  /// them out: fewer sub-states to precompute, and every string is still reachable).
  int json_char(bool u_escapes = true);
  int string_tail(int left, int need);
  int nonneg_range(int64_t lo, int64_t hi);
  int digits_between(const std::string& lo, const std::string& hi);

  Grammar& g_;
  std::map<std::string, int> rules_;
  int bounded_char_ = -1;  ///< json_char(false), built once: every string tail's rule uses it
};

}  // namespace servelab::grammar
