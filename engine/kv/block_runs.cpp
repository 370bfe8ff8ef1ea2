#include "engine/kv/block_runs.h"

#include <algorithm>
#include <limits>
#include <string>

namespace servelab {

int32_t BlockRuns::reserved(uint64_t owner) const {
  const Run* run = resv_.find(owner);
  return run ? run->end - run->begin : 0;
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

void BlockRuns::set_reservation(Run* run, uint64_t owner, int32_t begin, int32_t end) {
  if (run) {
    if (begin >= end) resv_.erase(owner);
    else *run = Run{begin, end};
  } else if (begin < end) {
    resv_.insert(owner, Run{begin, end});
  }
}

std::pair<int32_t, uint64_t> BlockRuns::largest_reservation() const {
  std::pair<int32_t, uint64_t> best{0, 0};
  resv_.for_each([&](uint64_t owner, const Run& run) { best = std::max(best, std::pair{run.end - run.begin, owner}); });
  return best;
}

void BlockRuns::drop(uint64_t owner) {
  Run* r = resv_.find(owner);
  if (!r) return;
  const Run run = *r;
  set_reservation(r, owner, 0, 0);
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

int32_t BlockRuns::split_largest_reservation(uint64_t owner, uint64_t victim, int32_t want, bool tail) {
  const Run v = *resv_.find(victim);
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
  Run* r = resv_.find(owner);
  if (!r || r->begin != prev + 1) return 0;
  const Run run = *r;
  const int32_t m = std::min(n, run.end - run.begin);
  set_reservation(r, owner, run.begin + m, run.end);
  n_ -= m;
  return m;
}

int32_t BlockRuns::take(uint64_t owner, int32_t prev, int32_t want, bool tail, bool may_split) {
  if (n_ == 0) return kNone;
  want = std::max(want, 1);
  if (tail) {
    if (Run* r = resv_.find(owner)) {
      const Run run = *r;
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
  // A new run: the smallest extent that holds all owner will take, else the longest room. The
  // largest reservation (a walk of the table) is looked up at most once.
  std::pair<int32_t, uint64_t> largest{-1, 0};
  if (!ext_by_len_.empty()) {
    auto fit = ext_by_len_.lower_bound({want, std::numeric_limits<int32_t>::min()});
    const bool fits = fit != ext_by_len_.end();
    if (!fits) fit = std::prev(ext_by_len_.end());
    if (!fits && may_split) largest = largest_reservation();
    if (fits || !may_split || largest.first / 2 <= fit->first) {
      const int32_t b = fit->second;
      return take_from_extent(ext_.find(b), b, owner, want, tail);
    }
  }
  if (!may_split || resv_.size() == 0) return kNone;
  if (largest.first < 0) largest = largest_reservation();
  return split_largest_reservation(owner, largest.second, want, tail);
}

int32_t BlockRuns::take_run(uint64_t owner, int32_t prev, int32_t begin, int32_t end, int32_t want, bool tail) {
  if (!ext_.empty() || (tail && resv_.find(owner))) {  // take would weigh other runs: ask it
    add_range(begin, end);
    return take(owner, prev, want, tail, false);
  }
  // take on [begin, end) as the only extent: owner's run goes on into it when it starts at
  // prev + 1 (prev is owner's, so prev + 1 can lie in it only at its start), else a new run
  // starts there (the smallest fitting extent or the largest: the same one). Either way owner
  // takes begin: take_from_extent's cut, without erasing and inserting the extent.
  (void)prev;
  want = std::max(want, 1);
  const int32_t b = begin;
  const int32_t reserve_end = tail ? static_cast<int32_t>(std::min<int64_t>(end, int64_t{b} + want)) : b + 1;
  insert_extent(std::max(reserve_end, b + 1), end);
  if (tail) set_reservation(nullptr, owner, b + 1, reserve_end);
  n_ += end - begin - 1;
  return b;
}

std::string BlockRuns::check(std::span<char> mark) const {
  const auto str = [](auto v) { return std::to_string(v); };
  int64_t n = 0;
  const auto claim = [&](int32_t begin, int32_t end, const std::string& what) -> std::string {
    if (begin < 0 || end > n_blocks_ || begin >= end)
      return what + " [" + str(begin) + ", " + str(end) + ") is empty or outside the pool";
    for (int32_t b = begin; b < end; ++b) {
      if (mark[static_cast<size_t>(b)]) return what + " [" + str(begin) + ", " + str(end) + ") holds block " + str(b) + " twice";
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
  std::string bad;
  size_t n_resv = 0;
  resv_.for_each([&](uint64_t owner, const Run& run) {
    ++n_resv;
    if (bad.empty()) bad = claim(run.begin, run.end, "reservation of seq " + str(owner));
  });
  if (!bad.empty()) return bad;
  if (n_resv != resv_.size()) return "the reservations' table counts " + str(resv_.size()) + " entries for " + str(n_resv);
  if (n != n_) return "runs hold " + str(n) + " blocks, count says " + str(n_);
  return "";
}

}  // namespace servelab
