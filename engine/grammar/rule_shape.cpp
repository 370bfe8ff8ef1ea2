// Rule shapes: expression trees with their callees abstracted.
#include "engine/grammar/rule_shape.h"

#include <algorithm>

namespace servelab::grammar {
namespace rule_shape_detail {  // named: a unity batch shares one translation unit

// Preorder, children in the order the NFA builder visits them (so callees get its numbering).
void write_shape(const Grammar& g, int id, RuleShape& out) {
  const Expr& e = g.expr(id);
  out.code.push_back(static_cast<uint64_t>(e.kind));
  switch (e.kind) {
    case ExprKind::bytes:
      for (int w = 0; w < 4; ++w) out.code.push_back(((e.bytes >> (64 * w)) & ByteSet(~uint64_t{0})).to_ullong());
      return;
    case ExprKind::call: {
      const auto it = std::find(out.callees.begin(), out.callees.end(), e.rule);
      out.code.push_back(static_cast<uint64_t>(it - out.callees.begin()));
      if (it == out.callees.end()) out.callees.push_back(e.rule);
      return;
    }
    case ExprKind::seq:
    case ExprKind::alt:
      out.code.push_back(e.children.size());
      for (int c : e.children) write_shape(g, c, out);
      return;
    case ExprKind::repeat:
      out.code.push_back(static_cast<uint64_t>(static_cast<int64_t>(e.min)));
      out.code.push_back(static_cast<uint64_t>(static_cast<int64_t>(e.max)));
      if (e.max != 0) write_shape(g, e.children[0], out);  // x{0,0} builds nothing of x
      return;
  }
}

}  // namespace rule_shape_detail

RuleShape rule_shape(const Grammar& g, int expr) {
  RuleShape s;
  rule_shape_detail::write_shape(g, expr, s);
  uint64_t h = 1469598103934665603ull;
  for (uint64_t x : s.code) h = (h ^ x) * 1099511628211ull;
  s.hash = h;
  return s;
}

}  // namespace servelab::grammar
