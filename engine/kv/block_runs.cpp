#include "engine/kv/block_runs.h"

#include <algorithm>
#include <limits>
#include <string>

namespace servelab {

int32_t BlockRuns::reserved(uint64_t owner) const {
  auto it = resv_.find(owner);
  return it == resv_.end() ? 0 : it->second.end - it->second.begin;
}

void BlockRuns::insert_extent(int32_t begin, int32_t end) {
  if (begin >= end) return;
  if (auto node = spare_ext_.take()) {
    node.key() = begin;
    node.mapped() = end;
    ext_.insert(std::move(node));
  } else {
    ext_.emplace(begin, end);
  }
  if (auto node = spare_ext_len_.take()) {
    node.value() = {end - begin, begin};
    ext_by_len_.insert(std::move(node));
  } else {
    ext_by_len_.emplace(end - begin, begin);
  }
}

void BlockRuns::erase_extent(std::map<int32_t, int32_t>::iterator it) {
  spare_ext_len_.keep(ext_by_len_.extract({it->second - it->first, it->first}));
  spare_ext_.keep(ext_.extract(it));
}

std::map<int32_t, int32_t>::iterator BlockRuns::extent_of(int32_t b) {
  auto it = ext_.upper_bound(b);
  if (it == ext_.begin()) return ext_.end();
  --it;
  return it->second > b ? it : ext_.end();
}

void BlockRuns::merge_extent(int32_t begin, int32_t end) {
  if (begin >= end) return;
  if (auto right = ext_.find(end); right != ext_.end()) {
    end = right->second;
    erase_extent(right);
  }
  if (auto it = ext_.lower_bound(begin); it != ext_.begin()) {
    auto left = std::prev(it);
    if (left->second == begin) {
      begin = left->first;
      erase_extent(left);
    }
  }
  insert_extent(begin, end);
}

void BlockRuns::set_reservation(std::unordered_map<uint64_t, Run>::iterator it, uint64_t owner, int32_t begin,
                                int32_t end) {
  if (it != resv_.end()) {
    auto node = resv_by_len_.extract({it->second.end - it->second.begin, owner});
    if (begin >= end) {
      spare_resv_len_.keep(std::move(node));
      resv_.erase(it);
      return;
    }
    it->second = Run{begin, end};
    node.value() = {end - begin, owner};
    resv_by_len_.insert(std::move(node));
    return;
  }
  if (begin >= end) return;
  resv_.emplace(owner, Run{begin, end});
  if (auto node = spare_resv_len_.take()) {
    node.value() = {end - begin, owner};
    resv_by_len_.insert(std::move(node));
  } else {
    resv_by_len_.emplace(end - begin, owner);
  }
}

void BlockRuns::drop(uint64_t owner) {
  auto it = resv_.find(owner);
  if (it == resv_.end()) return;
  const Run run = it->second;
  set_reservation(owner, 0, 0);
  merge_extent(run.begin, run.end);
}

int32_t BlockRuns::take_from_extent(std::map<int32_t, int32_t>::iterator it, int32_t b, uint64_t owner, int32_t want,
                                    bool tail) {
  const int32_t begin = it->first, end = it->second;
  erase_extent(it);
  insert_extent(begin, b);  // the blocks before b stay free (their left neighbour is not free)
  const int32_t reserve_end = tail ? static_cast<int32_t>(std::min<int64_t>(end, int64_t{b} + want)) : b + 1;
  insert_extent(std::max(reserve_end, b + 1), end);
  if (tail) set_reservation(owner, b + 1, reserve_end);
  --n_;
  return b;
}

int32_t BlockRuns::split_largest_reservation(uint64_t owner, int32_t want, bool tail) {
  const uint64_t victim = std::prev(resv_by_len_.end())->second;
  const Run v = resv_.at(victim);
  // owner takes the top of it: what it wants, at least the upper half, all when it wants that much
  const int32_t len = v.end - v.begin;
  const int32_t mid = want >= len ? v.begin : std::max(v.begin + len / 2, v.end - want);
  set_reservation(victim, v.begin, mid);
  const int32_t mine_end = tail ? static_cast<int32_t>(std::min<int64_t>(v.end, int64_t{mid} + want)) : mid + 1;
  merge_extent(std::max(mine_end, mid + 1), v.end);  // beyond what owner will take
  if (tail) set_reservation(owner, mid + 1, mine_end);
  --n_;
  return mid;
}

int32_t BlockRuns::take_reserved(uint64_t owner, int32_t prev, int32_t n) {
  if (prev == kNone || n < 1) return 0;
  auto r = resv_.find(owner);
  if (r == resv_.end() || r->second.begin != prev + 1) return 0;
  const Run run = r->second;
  const int32_t m = std::min(n, run.end - run.begin);
  set_reservation(r, owner, run.begin + m, run.end);
  n_ -= m;
  return m;
}

int32_t BlockRuns::take(uint64_t owner, int32_t prev, int32_t want, bool tail, bool may_split) {
  if (n_ == 0) return kNone;
  want = std::max(want, 1);
  if (tail) {
    if (auto r = resv_.find(owner); r != resv_.end()) {
      const Run run = r->second;
      if (prev != kNone && run.begin == prev + 1) {  // the run continues
        set_reservation(r, owner, run.begin + 1, run.end);
        --n_;
        return run.begin;
      }
      drop(owner);  // owner's last block moved (copy-on-write): that reservation no longer follows it
    }
  }
  if (prev != kNone && prev + 1 < n_blocks_) {
    if (auto it = extent_of(prev + 1); it != ext_.end()) return take_from_extent(it, prev + 1, owner, want, tail);
  }
  // A new run: the smallest extent that holds all owner will take, else the longest room.
  if (!ext_by_len_.empty()) {
    auto fit = ext_by_len_.lower_bound({want, std::numeric_limits<int32_t>::min()});
    const bool fits = fit != ext_by_len_.end();
    if (!fits) fit = std::prev(ext_by_len_.end());
    const bool split = !fits && may_split && !resv_by_len_.empty() && std::prev(resv_by_len_.end())->first / 2 > fit->first;
    if (!split) {
      const int32_t b = fit->second;
      return take_from_extent(ext_.find(b), b, owner, want, tail);
    }
  }
  if (!may_split || resv_by_len_.empty()) return kNone;
  return split_largest_reservation(owner, want, tail);
}

std::string BlockRuns::check(std::span<char> mark) const {
  const auto str = [](auto v) { return std::to_string(v); };
  int64_t n = 0;
  const auto claim = [&](int32_t begin, int32_t end, const char* what) -> std::string {
    if (begin < 0 || end > n_blocks_ || begin >= end)
      return std::string(what) + " [" + str(begin) + ", " + str(end) + ") is empty or outside the pool";
    for (int32_t b = begin; b < end; ++b) {
      if (mark[static_cast<size_t>(b)]) return std::string(what) + " [" + str(begin) + ", " + str(end) + ") holds block " + str(b) + " twice";
      mark[static_cast<size_t>(b)] = 1;
    }
    n += end - begin;
    return "";
  };
  int32_t last_end = -1;
  for (const auto& [begin, end] : ext_) {
    if (std::string e = claim(begin, end, "free extent"); !e.empty()) return e;
    if (begin == last_end) return "free extents end and begin at block " + str(begin) + " (not merged)";
    if (!ext_by_len_.contains({end - begin, begin})) return "free extent at block " + str(begin) + " is not indexed by length";
    last_end = end;
  }
  if (ext_by_len_.size() != ext_.size()) return "the free extents' length index has " + str(ext_by_len_.size()) + " entries for " + str(ext_.size()) + " extents";
  for (const auto& [owner, run] : resv_) {
    if (std::string e = claim(run.begin, run.end, "reservation"); !e.empty()) return e;
    if (!resv_by_len_.contains({run.end - run.begin, owner})) return "reservation of seq " + str(owner) + " is not indexed by length";
  }
  if (resv_by_len_.size() != resv_.size()) return "the reservations' length index is out of step";
  if (n != n_) return "runs hold " + str(n) + " blocks, count says " + str(n_);
  return "";
}

}  // namespace servelab
