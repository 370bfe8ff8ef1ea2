// The built-in structured-output sets of the kinds other than json_schema (whose set is the grammar
// engine's generated schema corpus): realistic regexes, choice lists and GBNF grammars, made from
// templates with seeded sizes, so every scenario gets the same n entries. Written in the subset
// that both the engine and the report's independent checkers read the same way (no '.', whose
// line terminators differ between dialects; no lookaround or backreferences).
#include <algorithm>
#include <random>
#include <stdexcept>

#include "engine/grammar/schema_corpus.h"
#include "loadgen/records/constraint_entry.h"
#include "loadgen/structured_output.h"

namespace servelab {
namespace structured_builtin {  // named: a unity batch shares one translation unit

int draw(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
std::string num(int v) { return std::to_string(v); }

std::string regex_entry(std::mt19937_64& rng) {
  const int a = draw(rng, 1, 4), b = draw(rng, 2, 6), c = draw(rng, 4, 12);
  switch (draw(rng, 0, 13)) {
    case 0: return "[A-Z]{" + num(a + 1) + "}-[0-9]{" + num(b + 1) + "}";  // ticket id
    case 1: return "\\(\\d{3}\\) \\d{3}-\\d{4}";                            // phone
    case 2: return "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])";        // date
    case 3: return "[a-z]{2," + num(c) + "}(\\.[a-z]{2,8})?@[a-z]{3,10}\\.(com|org|net)";  // email
    case 4: return "#[0-9a-f]{6}";                                          // colour
    case 5: return "((25[0-5]|2[0-4]\\d|1?\\d?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1?\\d?\\d)";  // IPv4
    case 6: return "[A-Z][a-z]{1," + num(c) + "}( [A-Z][a-z]{1," + num(c) + "}){0," + num(a) + "}";  // a name
    case 7: return "(yes|no|maybe)(, because [a-z ]{5," + num(4 * c) + "})?\\.";                   // an answer
    case 8: return "v\\d{1,2}\\.\\d{1,2}\\.\\d{1,3}(-(alpha|beta|rc)\\d?)?";                      // version
    case 9: return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";                // uuid
    case 10: return "\\$\\d{1," + num(b) + "}\\.\\d{2}";                                          // price
    case 11: return "(GET|POST|PUT|DELETE) /[a-z]{1,8}(/[a-z0-9_]{1,8}){0," + num(a) + "}";       // request line
    case 12: return "[a-z]{1,10}( [a-z]{1,10}){0," + num(b * 2) + "}\\.";                         // sentence
    default: return "\\d{1,3}(,\\d{3}){0," + num(a) + "}";                                         // thousands
  }
}

nlohmann::ordered_json choice_entry(std::mt19937_64& rng) {
  static const std::vector<std::vector<std::string>> pools = {
      {"positive", "negative", "neutral", "mixed"},
      {"red", "green", "blue", "yellow", "purple", "orange", "black", "white"},
      {"low", "medium", "high", "critical"},
      {"Python", "C++", "Rust", "Go", "Java", "TypeScript", "Kotlin", "Swift"},
      {"yes", "no"},
      {"billing", "technical support", "account access", "feature request", "bug report", "other"},
      {"France", "Germany", "Japan", "Brazil", "Canada", "India", "Kenya", "Mexico"},
      {"spam", "not spam"},
      {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"},
      {"A", "B", "C", "D"},
      {"approve", "reject", "escalate to a human reviewer"}};
  const auto& pool = pools[static_cast<size_t>(draw(rng, 0, static_cast<int>(pools.size()) - 1))];
  std::vector<std::string> pick = pool;
  std::shuffle(pick.begin(), pick.end(), rng);
  pick.resize(static_cast<size_t>(draw(rng, 2, static_cast<int>(pool.size()))));
  return pick;
}

std::string grammar_entry(std::mt19937_64& rng) {
  const int a = draw(rng, 1, 4), b = draw(rng, 3, 12);
  switch (draw(rng, 0, 6)) {
    case 0:  // arithmetic
      return "root ::= expr\nexpr ::= term ((\" + \" | \" - \") term){0," + num(a) + "}\n"
             "term ::= factor ((\" * \" | \" / \") factor){0,2}\nfactor ::= [0-9]{1,3} | \"(\" expr \")\"\n";
    case 1:  // a list of strings
      return "root ::= \"[\" item (\", \" item){0," + num(a + 1) + "} \"]\"\nitem ::= \"\\\"\" [a-z]{1," + num(b) + "} \"\\\"\"\n";
    case 2:  // key=value lines
      return "root ::= line{1," + num(a + 1) + "}\nline ::= [a-z_]{1,8} \"=\" [0-9a-z]{1," + num(b) + "} \"\\n\"\n";
    case 3:  // a verdict and its reason
      return "root ::= (\"yes\" | \"no\") \". \" reason\nreason ::= [A-Z] [a-z ]{3," + num(4 * b) + "} \".\"\n";
    case 4:  // SQL
      return "root ::= \"SELECT \" cols \" FROM \" name (\" WHERE \" name \" = \" [0-9]{1,4})? \";\"\n"
             "cols ::= \"*\" | name (\", \" name){0," + num(a) + "}\nname ::= [a-z_]{1,10}\n";
    case 5:  // a timestamp
      return "root ::= date \"T\" time \"Z\"\ndate ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" [0-2] [1-9]\n"
             "time ::= [01] [0-9] \":\" [0-5] [0-9] (\":\" [0-5] [0-9])?\n";
    default:  // a filter expression
      return "root ::= clause (\" AND \" clause){0," + num(a) + "}\nclause ::= ident (\" = \" | \" != \") value\n"
             "ident ::= [a-z]{1,6}\nvalue ::= [0-9]{1,3} | \"'\" [a-z]{1," + num(b) + "} \"'\"\n";
  }
}

}  // namespace structured_builtin

std::vector<std::string> builtin_constraint_lines(const std::string& kind, int n, uint64_t seed) {
  std::vector<std::string> out;
  if (kind == "json_schema") {
    for (const auto& s : grammar::make_schema_corpus(n, seed)) out.push_back(s.dump());
    return out;
  }
  if (!is_constraint_kind(kind)) throw std::invalid_argument("unknown structured-output kind " + kind);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < n; ++i) {
    ConstraintEntry e{kind, {}};
    if (kind == "regex") e.value = structured_builtin::regex_entry(rng);
    else if (kind == "choice") e.value = structured_builtin::choice_entry(rng);
    else e.value = structured_builtin::grammar_entry(rng);
    out.push_back(constraint_line(e));
  }
  return out;
}

}  // namespace servelab
