// Grammar: the expression arena and its factory functions.
#include "engine/grammar/grammar.h"

#include "engine/grammar/grammar_error.h"

namespace servelab::grammar {

int Grammar::declare_rule(std::string name) {
  rules_.push_back(Rule{std::move(name), -1, {}});
  return static_cast<int>(rules_.size()) - 1;
}

void Grammar::define_rule(int rule, int expr) { rules_.at(static_cast<size_t>(rule)).expr = expr; }

int Grammar::add(Expr e) {
  if (exprs_.size() >= GrammarLimits::max_exprs)
    throw GrammarError("grammar too large (over " + std::to_string(GrammarLimits::max_exprs) + " expressions)");
  exprs_.push_back(std::move(e));
  return static_cast<int>(exprs_.size()) - 1;
}

int Grammar::bytes(const ByteSet& set) {
  Expr e;
  e.kind = ExprKind::bytes;
  e.bytes = set;
  return add(std::move(e));
}

int Grammar::byte(unsigned char b) {
  ByteSet s;
  s.set(b);
  return bytes(s);
}

int Grammar::literal(std::string_view text) {
  std::vector<int> parts;
  parts.reserve(text.size());
  for (char c : text) parts.push_back(byte(static_cast<unsigned char>(c)));
  return parts.size() == 1 ? parts[0] : seq(std::move(parts));
}

int Grammar::seq(std::vector<int> parts) {
  if (parts.size() == 1) return parts[0];
  Expr e;
  e.kind = ExprKind::seq;
  e.children = std::move(parts);
  return add(std::move(e));
}

int Grammar::alt(std::vector<int> options) {
  if (options.size() == 1) return options[0];
  Expr e;
  e.kind = ExprKind::alt;
  e.children = std::move(options);
  return add(std::move(e));
}

int Grammar::repeat(int expr, int min, int max) {
  if (min < 0 || (max >= 0 && max < min))
    throw GrammarError("repetition {" + std::to_string(min) + "," + std::to_string(max) + "} is empty");
  if (min > GrammarLimits::max_repeat || max > GrammarLimits::max_repeat)
    throw GrammarError("repetition count over " + std::to_string(GrammarLimits::max_repeat));
  if (min == 1 && max == 1) return expr;
  Expr e;
  e.kind = ExprKind::repeat;
  e.children = {expr};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

int Grammar::call(int rule) {
  Expr e;
  e.kind = ExprKind::call;
  e.rule = rule;
  return add(std::move(e));
}

Grammar grammar_from_choices(const std::vector<std::string>& choices) {
  if (choices.empty()) throw GrammarError("choice: the list of choices is empty");
  Grammar g;
  const int root = g.declare_rule("root");
  std::vector<int> options;
  for (const std::string& c : choices) options.push_back(g.literal(c));
  g.define_rule(root, g.alt(std::move(options)));
  g.set_root(root);
  return g;
}

}  // namespace servelab::grammar
