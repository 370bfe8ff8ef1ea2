#include "kernels/ref/attention_rows_ref.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace servelab::kernels {

void check_decode_row_spans(const int32_t* spans, const int32_t* context_lens, int n_entries, int max_rows) {
  auto bad = [](int s, const std::string& why) {
    throw std::invalid_argument("decode row spans: entry " + std::to_string(s) + " " + why);
  };
  int open = 0;  // rows of the current sequence still to come after entry s
  for (int s = n_entries - 1; s >= 0; --s) {
    const int r = spans[s];
    if (open > 0) {
      if (r != 0) bad(s, "starts a sequence inside another one's rows");
      if (context_lens[s] != context_lens[s + 1] - 1) bad(s, "is not at the position before the next row");
      --open;
      continue;
    }
    if (r < 1 || r > max_rows) bad(s, "has span " + std::to_string(r) + " (1.." + std::to_string(max_rows) + ")");
    if (s - r + 1 < 0) bad(s, "spans rows before the first entry");
    if (context_lens[s] < r) bad(s, "has a context shorter than its rows");
    open = r - 1;
  }
}

void attention_rows_ref(const AttentionRefArgs& a, const int32_t* spans, int max_rows) {
  check_decode_row_spans(spans, a.context_lens, a.n_seqs, max_rows);
  std::vector<int32_t> identity;
  AttentionRefArgs one_row = a;
  if (!a.query_start) {
    identity.resize(size_t(a.n_seqs) + 1);
    for (int s = 0; s <= a.n_seqs; ++s) identity[size_t(s)] = s;
    one_row.query_start = identity.data();
  }
  attention_ref(one_row);
}

}  // namespace servelab::kernels
