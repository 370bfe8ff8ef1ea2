#include "engine/backend/cuda/mixed_attention_plan.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <stdexcept>
#include <vector>

namespace servelab::cuda {

const char* to_string(MixedDecodes m) {
  switch (m) {
    case MixedDecodes::auto_select: return "auto";
    case MixedDecodes::prefill_kernel: return "prefill";
    case MixedDecodes::decode_kernel: return "decode";
  }
  return "?";
}

double prefill_attention_ns(const MixedAttentionCosts& c, std::span<const int32_t> q_lens,
                            std::span<const int32_t> context_lens) {
  if (q_lens.size() != context_lens.size()) throw std::invalid_argument("prefill_attention_ns: one q_len a context");
  if (c.n_sms < 1 || c.n_kv_heads < 1 || c.group < 1 || c.tile_rows < c.group)
    throw std::invalid_argument("prefill_attention_ns: bad costs");
  const int tokens_a_tile = c.tile_rows / c.group;
  std::vector<double> tiles;  // one entry a tile of one KV head
  for (size_t s = 0; s < q_lens.size(); ++s) {
    const int q = q_lens[s], start = context_lens[s] - q;  // keys before the rows
    for (int t0 = 0; t0 < q; t0 += tokens_a_tile) {
      const int last_key = start + std::min(q, t0 + tokens_a_tile);
      tiles.push_back(c.tile_ns_fixed + c.tile_ns_per_key * last_key);
    }
  }
  std::sort(tiles.begin(), tiles.end(), std::greater<>());
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;  // when each SM frees
  for (int i = 0; i < c.n_sms; ++i) free_at.push(0.0);
  double end = 0.0;
  for (double t : tiles)
    for (int h = 0; h < c.n_kv_heads; ++h) {  // the heads' copies of a tile sit together in the order
      const double at = free_at.top() + t;
      free_at.pop();
      free_at.push(at);
      end = std::max(end, at);
    }
  return end;
}

int mixed_decode_prefix(const MixedAttentionCosts& c, std::span<const int32_t> q_lens,
                        std::span<const int32_t> context_lens) {
  size_t nd = 0;
  while (nd < q_lens.size() && q_lens[nd] == 1) ++nd;
  if (nd == 0 || nd == q_lens.size()) return 0;
  const double with = prefill_attention_ns(c, q_lens, context_lens);
  const double without = prefill_attention_ns(c, q_lens.subspan(nd), context_lens.subspan(nd));
  double keys = 0;
  for (size_t s = 0; s < nd; ++s) keys += context_lens[s];
  const double decode = c.decode_ns_fixed + keys * c.n_kv_heads * 2.0 * c.head_dim * c.kv_bytes / c.decode_bytes_per_ns;
  return without + decode < with ? int(nd) : 0;
}

}  // namespace servelab::cuda
