#include "engine/backend/cuda/mixed_attention_plan.h"

#include <algorithm>
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
  if (c.n_sms < 1 || c.n_kv_heads < 1 || c.group < 1 || c.tile_rows < c.group || c.prefill_bytes_per_ns <= 0)
    throw std::invalid_argument("prefill_attention_ns: bad costs");
  const int tokens_a_tile = c.tile_rows / c.group;
  const double bytes_a_key = 2.0 * c.head_dim * c.kv_bytes;  // K and V of one head
  struct Block {
    double compute, bytes;
  };
  std::vector<Block> tiles;  // one entry a tile of one KV head
  for (size_t s = 0; s < q_lens.size(); ++s) {
    const int q = q_lens[s], start = context_lens[s] - q;  // keys before the rows
    const int n_tiles = (q + tokens_a_tile - 1) / tokens_a_tile;
    for (int t0 = 0; t0 < q; t0 += tokens_a_tile) {
      const int last_key = start + std::min(q, t0 + tokens_a_tile);
      tiles.push_back({c.tile_ns_fixed + c.tile_ns_per_key * last_key, bytes_a_key * last_key / n_tiles});
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(), [](const Block& a, const Block& b) { return a.compute > b.compute; });
  double total = 0.0, wave_compute = 0.0, wave_bytes = 0.0;
  int in_wave = 0;
  for (const Block& t : tiles)
    for (int h = 0; h < c.n_kv_heads; ++h) {  // the heads' copies of a tile sit together in the order
      wave_compute = std::max(wave_compute, t.compute);
      wave_bytes += t.bytes;
      if (++in_wave == c.n_sms) {
        total += std::max(wave_compute, wave_bytes / c.prefill_bytes_per_ns);
        wave_compute = wave_bytes = 0.0;
        in_wave = 0;
      }
    }
  if (in_wave > 0) total += std::max(wave_compute, wave_bytes / c.prefill_bytes_per_ns);
  return total;
}

double decode_attention_ns(const MixedAttentionCosts& c, std::span<const int32_t> context_lens) {
  if (c.decode_bytes_per_ns <= 0) throw std::invalid_argument("decode_attention_ns: bad costs");
  double keys = 0;
  for (int32_t k : context_lens) keys += k;
  return c.decode_ns_fixed + keys * c.n_kv_heads * 2.0 * c.head_dim * c.kv_bytes / c.decode_bytes_per_ns;
}

namespace {
/// The leading one-row sequences when some multi-row sequence follows them, else 0.
size_t leading_decodes(std::span<const int32_t> q_lens) {
  size_t nd = 0;
  while (nd < q_lens.size() && q_lens[nd] == 1) ++nd;
  return nd < q_lens.size() ? nd : 0;
}
}  // namespace

int mixed_decode_prefix(const MixedAttentionCosts& c, std::span<const int32_t> q_lens,
                        std::span<const int32_t> context_lens) {
  const size_t nd = leading_decodes(q_lens);
  if (nd == 0) return 0;
  const double with = prefill_attention_ns(c, q_lens, context_lens);
  const double without = prefill_attention_ns(c, q_lens.subspan(nd), context_lens.subspan(nd));
  return without + decode_attention_ns(c, context_lens.first(nd)) < with ? int(nd) : 0;
}

MixedDecodePlanner::MixedDecodePlanner(MixedDecodes mode, bool allowed, bool modelled, const MixedAttentionCosts& costs)
    : mode_(!allowed || (mode == MixedDecodes::auto_select && !modelled) ? MixedDecodes::prefill_kernel : mode),
      costs_(costs) {}

int MixedDecodePlanner::decode_prefix(std::span<const int32_t> query_start, std::span<const int32_t> context_lens) {
  if (mode_ == MixedDecodes::prefill_kernel || query_start.size() != context_lens.size() + 1) return 0;
  q_lens_.resize(context_lens.size());
  for (size_t s = 0; s < context_lens.size(); ++s) q_lens_[s] = query_start[s + 1] - query_start[s];
  if (mode_ == MixedDecodes::auto_select) return mixed_decode_prefix(costs_, q_lens_, context_lens);
  return int(leading_decodes(q_lens_));
}

}  // namespace servelab::cuda
