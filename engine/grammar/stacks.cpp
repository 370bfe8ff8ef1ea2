// Stack steps: byte transitions, calls, returns, with duplicates merged.
#include "engine/grammar/stacks.h"

#include <algorithm>

namespace servelab::grammar {
namespace {

uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

int32_t NodeArena::intern(int32_t state, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent);
  auto [it, fresh] = index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (fresh) nodes_.push_back({state, parent});
  return it->second;
}

void StackSet::add(int32_t base, std::span<const int32_t> frames) {
  const uint32_t begin = static_cast<uint32_t>(pool.size());
  pool.insert(pool.end(), frames.begin(), frames.end());
  stacks.push_back({base, begin, static_cast<uint32_t>(frames.size())});
}

void Stepper::begin(StackSet& out) {
  seen_.clear();
  if (!seen_index_.empty()) seen_index_.clear();
  seen_pool_.clear();
  (void)out;
}

bool Stepper::seen(int32_t base, std::span<const int32_t> frames) {
  uint64_t h = mix(0, static_cast<uint64_t>(static_cast<uint32_t>(base)));
  for (int32_t f : frames) h = mix(h, static_cast<uint32_t>(f));
  h = mix(h, frames.size());
  auto same = [&](const Seen& e) {
    if (e.hash != h || e.base != base) return false;
    const int32_t* p = seen_pool_.data() + e.at;
    return static_cast<size_t>(p[0]) == frames.size() && std::equal(frames.begin(), frames.end(), p + 1);
  };
  constexpr size_t kLinear = 32;
  if (seen_.size() <= kLinear) {
    for (const Seen& e : seen_)
      if (same(e)) return true;
  } else {
    if (seen_index_.empty())
      for (uint32_t i = 0; i < seen_.size(); ++i) seen_index_.emplace(seen_[i].hash, i);
    auto [lo, hi] = seen_index_.equal_range(h);
    for (auto it = lo; it != hi; ++it)
      if (same(seen_[it->second])) return true;
  }
  seen_.push_back({h, base, static_cast<uint32_t>(seen_pool_.size())});
  if (!seen_index_.empty()) seen_index_.emplace(h, static_cast<uint32_t>(seen_.size() - 1));
  seen_pool_.push_back(static_cast<int32_t>(frames.size()));
  seen_pool_.insert(seen_pool_.end(), frames.begin(), frames.end());
  return false;
}

void Stepper::close(int32_t base0, std::span<const int32_t> frames0, StackSet& out) {
  // A state with byte edges only needs no closure.
  if (a_.plain(frames0.back())) {
    if (!seen(base0, frames0)) out.add(base0, frames0);
    return;
  }
  work_.clear();
  work_pool_.clear();
  auto push = [&](int32_t base, std::span<const int32_t> frames) {
    work_pool_.insert(work_pool_.end(), frames.begin(), frames.end());
    work_.push_back({base, static_cast<uint32_t>(frames.size())});
  };
  push(base0, frames0);
  while (!work_.empty()) {
    auto [base, len] = work_.back();
    work_.pop_back();
    tmp_.assign(work_pool_.end() - len, work_pool_.end());
    work_pool_.resize(work_pool_.size() - len);
    if (seen(base, tmp_)) continue;
    const int32_t top = tmp_.back();
    if (a_.has_bytes(top)) out.add(base, tmp_);
    for (const Call& c : a_.calls(top)) {
      const size_t keep = tmp_.size();
      if (a_.returns_only(c.next)) {
        tmp_.back() = c.callee_start;  // tail call
      } else {
        tmp_.back() = c.next;
        tmp_.push_back(c.callee_start);
      }
      push(base, tmp_);
      tmp_.resize(keep);
      tmp_.back() = top;
    }
    if (a_.is_final(top)) {
      tmp_.pop_back();
      int32_t b = base;
      if (tmp_.empty()) {
        if (base == kBaseEnd) {
          out.ended = true;
        } else if (base == kBaseLocal) {
          out.popped_local = true;
        } else {
          tmp_.push_back(arena_->state(base));
          b = arena_->parent(base);
        }
      }
      if (!tmp_.empty()) push(b, tmp_);
    }
  }
}

void Stepper::close_one(int32_t base, std::span<const int32_t> frames, StackSet& out) {
  out.clear();
  begin(out);
  close(base, frames, out);
}

bool Stepper::step(const StackSet& in, unsigned char b, StackSet& out) {
  out.clear();
  if (in.stacks.size() == 1) {  // the common case: one stack, a plain state next
    const StackSet::Stack& s = in.stacks[0];
    const int32_t t = a_.next(in.top(s), b);
    if (t < 0) return false;
    if (a_.plain(t)) {
      out.add(s.base, in.frames(s));
      out.pool.back() = t;
      return true;
    }
  }
  begin(out);
  for (const StackSet::Stack& s : in.stacks) {
    const int32_t t = a_.next(in.top(s), b);
    if (t < 0) continue;
    cur_.assign(in.pool.begin() + s.begin, in.pool.begin() + s.begin + s.len);
    cur_.back() = t;
    close(s.base, cur_, out);
  }
  return !out.empty() || out.ended;
}

}  // namespace servelab::grammar
