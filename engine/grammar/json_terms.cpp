// The JSON building blocks as grammar rules.
#include "engine/grammar/json_terms.h"


#include "engine/grammar/codepoints.h"
#include "engine/grammar/grammar_error.h"
#include "engine/grammar/regex.h"

namespace servelab::grammar {
namespace {

ByteSet range_set(char lo, char hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(static_cast<size_t>(c));
  return s;
}

// Approximate but common formats, as regexes over the string's content.
const std::map<std::string, std::string>& format_patterns() {
  static const std::map<std::string, std::string> m = {
      {"date", R"(^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$)"},
      {"time", R"(^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$)"},
      {"date-time",
       R"(^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$)"},
      {"email", R"(^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}$)"},
      {"uuid", R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)"},
      {"uri", R"(^[a-zA-Z][a-zA-Z0-9+.-]*:[a-zA-Z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+$)"},
      {"ipv4", R"(^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$)"},
      {"hostname", R"(^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*$)"},
  };
  return m;
}

}  // namespace

int JsonTerms::rule(const std::string& key, const std::string& name) {
  if (rules_.count(key)) return -1;
  const int r = g_.declare_rule(name);
  g_.set_share_key(r, key);
  rules_.emplace(key, r);
  return r;
}

int JsonTerms::sp() { return g_.opt(g_.byte(' ')); }
int JsonTerms::comma() { return g_.seq({g_.byte(','), sp()}); }
int JsonTerms::colon() { return g_.seq({g_.byte(':'), sp()}); }

int JsonTerms::json_char(bool u_escapes) {
  CodepointSet raw;  // >= 0x20 except '"' and '\'
  raw.add(0x20, '"' - 1);
  raw.add('"' + 1, '\\' - 1);
  raw.add('\\' + 1, kMaxCodepoint);
  const ByteSet hex = range_set('0', '9') | range_set('a', 'f') | range_set('A', 'F');
  // \uXXXX except surrogates (a lone one is not valid JSON text for most parsers).
  const int hex1 = g_.bytes(hex);
  const int u = g_.seq({g_.byte('u'),
                        g_.alt({g_.seq({g_.bytes(range_set('0', '9') | range_set('a', 'c') | range_set('A', 'C') |
                                                 range_set('e', 'f') | range_set('E', 'F')),
                                        hex1, hex1, hex1}),
                                g_.seq({g_.bytes(range_set('d', 'd') | range_set('D', 'D')), g_.bytes(range_set('0', '7')),
                                        hex1, hex1})})});
  ByteSet simple;
  for (char c : std::string_view("\"\\/bfnrt")) simple.set(static_cast<unsigned char>(c));
  const int escape = g_.seq({g_.byte('\\'), u_escapes ? g_.alt({g_.bytes(simple), u}) : g_.bytes(simple)});
  return g_.alt({utf8_expr(g_, raw), escape});
}

int JsonTerms::string() {
  if (const int r = rule("json:string", "json_string"); r >= 0)
    g_.define_rule(r, g_.seq({g_.byte('"'), g_.star(json_char()), g_.byte('"')}));
  return called("json:string");
}

int JsonTerms::string_length(int min, int max, const std::string& where) {
  if (min > kJsonMaxStringBound)
    throw GrammarError("json_schema: minLength over " + std::to_string(kJsonMaxStringBound) + " is not supported at " + where);
  if (max > kJsonMaxStringBound) max = kJsonMaxStringBound;
  if (max >= 0 && max < min) throw GrammarError("json_schema: maxLength < minLength at " + where);
  const std::string key = "json:string{" + std::to_string(min) + "," + std::to_string(max) + "}";
  if (const int r = rule(key, "json_string_" + std::to_string(min) + "_" + std::to_string(max)); r >= 0)
    g_.define_rule(r, g_.seq({g_.byte('"'), string_tail(max, min)}));
  return called(key);
}

// The rest of a bounded string: at most `left` more characters (-1: any number), at least `need`,
// then the closing quote. One small rule per (left, need), shared by every bound that reaches it
// (maxLength 64 and 32 share their last 32 positions), so each position is walked once per
// tokenizer instead of once per character sub-state per bound.
int JsonTerms::string_tail(int left, int need) {
  const std::string key = "json:string_tail{" + std::to_string(left) + "," + std::to_string(need) + "}";
  if (rules_.count(key)) return called(key);
  if (left < 0 && need == 0) {
    const int r = rule(key, "json_string_tail");
    g_.define_rule(r, g_.seq({g_.star(json_char()), g_.byte('"')}));
    return called(key);
  }
  // Build the callee first (depth of recursion <= kJsonMaxStringBound).
  const int rest = left == 0 ? -1 : string_tail(left < 0 ? -1 : left - 1, need > 0 ? need - 1 : 0);
  const int r = rule(key, "json_string_tail");
  std::vector<int> options;
  if (need == 0) options.push_back(g_.byte('"'));
  // The character is inline, not a call: a stack resting at the start of a one-character rule
  // would leave almost every token "uncertain" (checked at run time), since the frame completes
  // after one character.
  // One expression for the character in every tail (an expression may sit in several rules):
  // maxLength 64 made 65 copies of the UTF-8 alternatives.
  if (bounded_char_ < 0) bounded_char_ = json_char(/*u_escapes=*/false);
  if (rest >= 0) options.push_back(g_.seq({bounded_char_, rest}));
  g_.define_rule(r, g_.alt(std::move(options)));
  return called(key);
}

int JsonTerms::string_pattern(const std::string& pattern, const std::string& where) {
  const std::string key = "json:pattern:" + pattern;
  if (const int r = rule(key, "json_pattern"); r >= 0) {
    try {
      g_.define_rule(r, g_.seq({g_.byte('"'), add_regex(g_, pattern, RegexMode::json_string, "json_schema: pattern at " + where), g_.byte('"')}));
    } catch (...) {
      rules_.erase(key);
      throw;
    }
  }
  return called(key);
}

int JsonTerms::string_format(const std::string& format, const std::string& where) {
  auto it = format_patterns().find(format);
  if (it == format_patterns().end()) return -1;
  const std::string key = "json:format:" + format;
  if (const int r = rule(key, "json_format_" + format); r >= 0)
    g_.define_rule(r, g_.seq({g_.byte('"'), add_regex(g_, it->second, RegexMode::json_string, "json_schema: format at " + where), g_.byte('"')}));
  return called(key);
}

namespace {
int int_part(Grammar& g) {  // 0 | [1-9][0-9]{0,15}
  return g.alt({g.byte('0'), g.seq({g.bytes(range_set('1', '9')), g.repeat(g.bytes(range_set('0', '9')), 0, 15)})});
}
int fraction(Grammar& g) { return g.opt(g.seq({g.byte('.'), g.repeat(g.bytes(range_set('0', '9')), 1, 16)})); }
int zero_fraction(Grammar& g) { return g.opt(g.seq({g.byte('.'), g.repeat(g.byte('0'), 1, 16)})); }
}  // namespace

int JsonTerms::number() {
  if (const int r = rule("json:number", "json_number"); r >= 0) {
    ByteSet e, sign;
    e.set('e');
    e.set('E');
    sign.set('+');
    sign.set('-');
    const int exponent = g_.opt(g_.seq({g_.bytes(e), g_.opt(g_.bytes(sign)), g_.repeat(g_.bytes(range_set('0', '9')), 1, 2)}));
    g_.define_rule(r, g_.seq({g_.opt(g_.byte('-')), int_part(g_), fraction(g_), exponent}));
  }
  return called("json:number");
}

int JsonTerms::integer() {
  if (const int r = rule("json:integer", "json_integer"); r >= 0) g_.define_rule(r, g_.seq({g_.opt(g_.byte('-')), int_part(g_)}));
  return called("json:integer");
}

// Decimal strings of one length from lo to hi (lo <= hi as numbers, same length).
int JsonTerms::digits_between(const std::string& lo, const std::string& hi) {
  if (lo == hi) return g_.literal(lo);
  if (lo.size() == 1) return g_.bytes(range_set(lo[0], hi[0]));
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  if (lo[0] == hi[0]) return g_.seq({g_.byte(static_cast<unsigned char>(lo[0])), digits_between(lo_rest, hi_rest)});
  // lo[0] followed by >= lo_rest, the digits strictly between followed by anything, hi[0]
  // followed by <= hi_rest; a first digit whose rest is unconstrained joins the middle, so each
  // level recurses at most once per side (linear, not exponential, in the length).
  const bool lo_free = lo_rest.find_first_not_of('0') == std::string::npos;
  const bool hi_free = hi_rest.find_first_not_of('9') == std::string::npos;
  const char a = lo_free ? lo[0] : static_cast<char>(lo[0] + 1), b = hi_free ? hi[0] : static_cast<char>(hi[0] - 1);
  const int n = static_cast<int>(lo_rest.size());
  std::vector<int> options;
  if (!lo_free) options.push_back(g_.seq({g_.byte(static_cast<unsigned char>(lo[0])), digits_between(lo_rest, std::string(lo_rest.size(), '9'))}));
  if (a <= b) options.push_back(g_.seq({g_.bytes(range_set(a, b)), g_.repeat(g_.bytes(range_set('0', '9')), n, n)}));
  if (!hi_free) options.push_back(g_.seq({g_.byte(static_cast<unsigned char>(hi[0])), digits_between(std::string(hi_rest.size(), '0'), hi_rest)}));
  return g_.alt(std::move(options));
}

// Non-negative integers in [lo, hi], without leading zeros.
int JsonTerms::nonneg_range(int64_t lo, int64_t hi) {
  std::vector<int> options;
  int64_t low = 0, high = 9;  // the numbers with d digits
  for (int d = 1; d <= 16 && low <= hi; ++d) {
    const int64_t a = std::max(lo, low), b = std::min(hi, high);
    if (a <= b) options.push_back(digits_between(std::to_string(a), std::to_string(b)));
    low = high + 1;
    high = high * 10 + 9;
  }
  return g_.alt(std::move(options));
}

int JsonTerms::integer_range(std::optional<int64_t> lo_in, std::optional<int64_t> hi_in, const std::string& where) {
  const int64_t lo = std::max(lo_in.value_or(-kJsonMaxIntAbs), -kJsonMaxIntAbs);
  const int64_t hi = std::min(hi_in.value_or(kJsonMaxIntAbs), kJsonMaxIntAbs);
  if (lo > hi) throw GrammarError("json_schema: no integer between minimum and maximum at " + where);
  const std::string key = "json:integer[" + std::to_string(lo) + "," + std::to_string(hi) + "]";
  if (const int r = rule(key, "json_integer_range"); r >= 0) {
    std::vector<int> options;
    if (hi >= 0) options.push_back(nonneg_range(std::max<int64_t>(lo, 0), hi));
    if (lo < 0) options.push_back(g_.seq({g_.byte('-'), nonneg_range(hi < 0 ? -hi : 1, -lo)}));
    g_.define_rule(r, g_.alt(std::move(options)));
  }
  return called(key);
}

int JsonTerms::number_range(std::optional<int64_t> lo, std::optional<int64_t> hi, const std::string& where) {
  if (lo && hi && *lo > *hi) throw GrammarError("json_schema: no number between minimum and maximum at " + where);
  auto clamp = [](int64_t v) { return std::max(-kJsonMaxIntAbs, std::min(kJsonMaxIntAbs, v)); };
  if (lo) lo = clamp(*lo);
  if (hi) hi = clamp(*hi);
  const std::string key = "json:number[" + (lo ? std::to_string(*lo) : "") + "," + (hi ? std::to_string(*hi) : "") + "]";
  if (const int r = rule(key, "json_number_range"); r >= 0) {
    std::vector<int> options;
    // a.f with A <= a.f <= B (B unbounded when !b): integer part in [A, B-1] with any fraction,
    // or exactly B with a zero fraction.
    auto between = [&](int64_t a, std::optional<int64_t> b) {
      if (!b) return g_.seq({nonneg_range(a, kJsonMaxIntAbs), fraction(g_)});
      std::vector<int> o;
      if (a <= *b - 1) o.push_back(g_.seq({nonneg_range(a, *b - 1), fraction(g_)}));
      o.push_back(g_.seq({g_.literal(std::to_string(*b)), zero_fraction(g_)}));
      return g_.alt(std::move(o));
    };
    if (!hi || *hi >= 0) options.push_back(between(lo ? std::max<int64_t>(*lo, 0) : 0, hi));
    if (!lo || *lo < 0) {
      const int64_t h = hi && *hi < 0 ? -*hi : 0;
      std::optional<int64_t> l;
      if (lo) l = -*lo;
      options.push_back(g_.seq({g_.byte('-'), between(h, l)}));
    }
    g_.define_rule(r, g_.alt(std::move(options)));
  }
  return called(key);
}

int JsonTerms::value() {
  const int rv = rule("json:value", "json_value");
  if (rv < 0) return called("json:value");
  const int ro = rule("json:object", "json_object");
  const int ra = rule("json:array", "json_array");
  const int v = g_.call(rv);
  const int member = g_.seq({string(), colon(), v});
  g_.define_rule(ro, g_.seq({g_.byte('{'), g_.opt(g_.seq({member, g_.star(g_.seq({comma(), member}))})), g_.byte('}')}));
  g_.define_rule(ra, g_.seq({g_.byte('['), g_.opt(g_.seq({v, g_.star(g_.seq({comma(), v}))})), g_.byte(']')}));
  g_.define_rule(rv, g_.alt({g_.call(ro), g_.call(ra), string(), number(), g_.literal("true"), g_.literal("false"), g_.literal("null")}));
  return v;
}

int JsonTerms::object() {
  value();
  return called("json:object");
}

int JsonTerms::array() {
  value();
  return called("json:array");
}

int JsonTerms::key_except(const std::vector<std::string>& keys, const std::string& where) {
  ByteSet first;  // the first bytes of the listed keys
  bool empty_listed = false;
  for (const std::string& k : keys) {
    for (char c : k)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x80 || c == '"' || c == '\\')
        throw GrammarError("json_schema: additionalProperties beside a property name with non-ASCII or escaped characters is not supported at " + where);
    if (k.empty()) empty_listed = true;
    else first.set(static_cast<unsigned char>(k[0]));
  }
  ByteSet key_ascii = range_set(0x20, 0x7F);
  key_ascii.reset('"');
  key_ascii.reset('\\');
  CodepointSet high;
  high.add(0x80, kMaxCodepoint);
  // The rest of a key after its first character: the same rule in every grammar.
  if (const int r = rule("json:key_rest", "json_key_rest"); r >= 0)
    g_.define_rule(r, g_.seq({g_.star(g_.alt({g_.bytes(key_ascii), utf8_expr(g_, high)})), g_.byte('"')}));
  // A new key starts with a character no listed key starts with, so it can never spell (or
  // escape its way to) a listed key; written without escapes.
  std::string key = "json:key_first_not:";
  for (int c = 0; c < 256; ++c)
    if (first.test(static_cast<size_t>(c))) key += static_cast<char>(c);
  if (empty_listed) key += ":nonempty";
  if (const int r = rule(key, "json_key"); r >= 0) {
    std::vector<int> after_quote;
    if ((key_ascii & ~first).any()) after_quote.push_back(g_.seq({g_.bytes(key_ascii & ~first), called("json:key_rest")}));
    after_quote.push_back(g_.seq({utf8_expr(g_, high), called("json:key_rest")}));
    if (!empty_listed) after_quote.push_back(g_.byte('"'));
    g_.define_rule(r, g_.seq({g_.byte('"'), g_.alt(std::move(after_quote))}));
  }
  return called(key);
}

int JsonTerms::literal(const nlohmann::ordered_json& value) { return g_.literal(value.dump()); }

}  // namespace servelab::grammar
