#include "engine/kv/swap_space.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

namespace servelab {

SwapSpace::SwapSpace(int64_t n_slots, int block_slots) : block_slots_(block_slots) {
  if (block_slots < 1)
    throw std::invalid_argument("SwapSpace: block_slots (" + std::to_string(block_slots) + ") must be >= 1");
  if (n_slots < 0) throw std::invalid_argument("SwapSpace: n_slots (" + std::to_string(n_slots) + ") must be >= 0");
  n_blocks_ = std::min<int64_t>(n_slots / block_slots, std::numeric_limits<int32_t>::max());
}

void SwapSpace::allocate(Sequence& seq, int n_positions) {
  if (!seq.swap_blocks.empty())
    throw std::logic_error("SwapSpace: sequence " + std::to_string(seq.id) + " already holds " +
                           std::to_string(seq.swap_blocks.size()) + " swap blocks");
  if (!can_hold(n_positions))
    throw std::logic_error("SwapSpace: " + std::to_string(blocks_for(n_positions)) + " blocks for sequence " +
                           std::to_string(seq.id) + ", " + std::to_string(n_free_blocks()) + " free");
  const int64_t n = blocks_for(n_positions);
  seq.swap_blocks.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (!released_.empty()) {  // released blocks are all below next_fresh_: the lowest free one
      std::pop_heap(released_.begin(), released_.end(), std::greater<>());
      seq.swap_blocks.push_back(released_.back());
      released_.pop_back();
    } else {
      seq.swap_blocks.push_back(static_cast<int32_t>(next_fresh_++));
    }
  }
}

void SwapSpace::release(Sequence& seq) {
  for (int32_t b : seq.swap_blocks) {
    released_.push_back(b);
    std::push_heap(released_.begin(), released_.end(), std::greater<>());
  }
  seq.swap_blocks.clear();
  seq.swap_blocks.shrink_to_fit();
}

void SwapSpace::runs(const Sequence& seq, const KvManager& kv, int begin, int end, std::vector<KvSwap>& out) const {
  if (begin >= end) return;
  if (begin < 0 || blocks_for(end) > static_cast<int64_t>(seq.swap_blocks.size()))
    throw std::logic_error("SwapSpace::runs: sequence " + std::to_string(seq.id) + " holds " +
                           std::to_string(seq.swap_blocks.size()) + " swap blocks, positions [" +
                           std::to_string(begin) + ", " + std::to_string(end) + ") need " +
                           std::to_string(blocks_for(end)));
  const bool paged = kv.kind() == KvKind::paged;
  const int64_t unit = paged ? std::max<int64_t>(1, kv.unit_slots()) : 0;
  auto push = [&](int64_t device, int64_t host, int64_t n) {
    if (!out.empty()) {
      KvSwap& last = out.back();
      if (last.device_slot + last.n_slots == device && last.host_slot + last.n_slots == host) {
        last.n_slots += n;
        return;
      }
    }
    out.push_back({device, host, n});
  };
  for (int p = begin; p < end;) {
    // Arena: paged blocks are contiguous inside, a naive region all along.
    const int arena_end = paged ? static_cast<int>(std::min<int64_t>(end, (p / unit + 1) * unit)) : end;
    const int64_t device = kv.slot(seq, p);
    for (int q = p; q < arena_end;) {
      const int host_end = std::min(arena_end, (q / block_slots_ + 1) * block_slots_);
      const int64_t host = int64_t{seq.swap_blocks[q / block_slots_]} * block_slots_ + q % block_slots_;
      push(device + (q - p), host, host_end - q);
      q = host_end;
    }
    p = arena_end;
  }
}

void SwapSpace::check_invariants(const std::vector<const Sequence*>& holders) const {
  std::vector<int32_t> held;
  for (const Sequence* s : holders) held.insert(held.end(), s->swap_blocks.begin(), s->swap_blocks.end());
  std::vector<int32_t> all = released_;
  all.insert(all.end(), held.begin(), held.end());
  std::sort(all.begin(), all.end());
  if (std::adjacent_find(all.begin(), all.end()) != all.end())
    throw std::logic_error("SwapSpace: a block is held twice, or held and free");
  if (!all.empty() && (all.front() < 0 || all.back() >= next_fresh_))
    throw std::logic_error("SwapSpace: a held or released block lies outside the blocks handed out");
  if (static_cast<int64_t>(all.size()) != next_fresh_)
    throw std::logic_error("SwapSpace: " + std::to_string(held.size()) + " held + " +
                           std::to_string(released_.size()) + " released blocks != " + std::to_string(next_fresh_) +
                           " handed out");
}

}  // namespace servelab
