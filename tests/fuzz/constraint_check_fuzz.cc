// libFuzzer harness: the report's independent checkers of structured outputs (regex, choice,
// GBNF: analysis/constraint_check.h) read a constraint from a user's file and an output from any
// server, so any pair of byte strings must give "" or a reason, never a crash, a hang, an
// exception or a stack overflow (deep nesting in the grammar, long outputs through recursive
// rules or a backtracking regex).
// Input: first byte picks the checker; the rest is "constraint \x00 text" (a missing \x00 means
// an empty text). Built with -DSERVELAB_FUZZ=ON under clang (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/constraint_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = in.find('\0');
  const std::string constraint(in.substr(0, cut));
  const std::string_view text = cut == std::string_view::npos ? std::string_view() : in.substr(cut + 1);
  using namespace servelab::analysis;
  switch (data[0] % 3) {
    case 0:
      (void)check_gbnf_output(text, constraint);
      break;
    case 1:
      (void)check_regex_output(text, constraint);
      break;
    default: {
      std::vector<std::string> choices;
      for (size_t b = 0, e; b <= constraint.size(); b = e + 1) {
        e = constraint.find('\n', b);
        if (e == std::string::npos) e = constraint.size();
        choices.push_back(constraint.substr(b, e - b));
      }
      (void)check_choice_output(text, choices);
      break;
    }
  }
  return 0;
}
