#include "engine/backend/cuda/block_table.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace servelab::cuda {
namespace {

int pow2_at_least(int64_t n, int floor) {
  int64_t p = floor;
  while (p < n) p *= 2;
  if (p > (int64_t(1) << 30)) throw std::length_error("BlockTableDiff: table dimension " + std::to_string(n) + " too large");
  return static_cast<int>(p);
}

}  // namespace

int BlockTableDiff::row_of(uint64_t seq_id) const {
  const auto it = row_of_.find(seq_id);
  return it == row_of_.end() ? -1 : it->second;
}

void BlockTableDiff::reset() {
  const int rows = min_rows_, stride = min_stride_;
  *this = BlockTableDiff();
  reserve(rows, stride);
}

void BlockTableDiff::reserve(int rows, int stride) {
  if (rows < 0 || stride < 0)
    throw std::invalid_argument("BlockTableDiff::reserve: rows and stride must be >= 0 (got " + std::to_string(rows) +
                                ", " + std::to_string(stride) + ")");
  min_rows_ = rows;
  min_stride_ = stride;
}

void BlockTableDiff::resize(int rows, int stride, BlockTableStep& out) {
  if (int64_t(rows) * stride > (int64_t(1) << 31) - 1)
    throw std::length_error("BlockTableDiff: a table of " + std::to_string(rows) + " x " + std::to_string(stride) +
                            " entries is beyond int32 indexing");
  std::vector<int32_t> m(size_t(rows) * stride, 0);
  for (int r = 0; r < n_rows_; ++r)
    std::copy_n(mirror_.begin() + size_t(r) * stride_, stride_, m.begin() + size_t(r) * stride);
  mirror_ = std::move(m);
  owner_.resize(rows, 0);
  owned_.resize(rows, 0);
  last_use_.resize(rows, 0);
  n_rows_ = rows;
  stride_ = stride;
  out.resized = true;
}

void BlockTableDiff::plan(std::span<const uint64_t> seq_ids, const kernels::StepInput& in, BlockTableStep& out) {
  if (in.kv_kind != kernels::KvLayoutKind::paged) throw std::invalid_argument("BlockTableDiff::plan: the step is not paged");
  const int S = in.n_seqs();
  if (seq_ids.size() != size_t(S))
    throw std::invalid_argument("BlockTableDiff::plan: " + std::to_string(seq_ids.size()) + " sequence ids for " +
                                std::to_string(S) + " sequences");
  if (in.block_size < 1 || in.block_tables.size() != size_t(S) * in.block_table_stride)
    throw std::invalid_argument("BlockTableDiff::plan: block_tables needs n_seqs * block_table_stride entries");
  // Everything checked before the mirror changes: a throw leaves it as the device has it.
  std::vector<uint64_t> sorted(seq_ids.begin(), seq_ids.end());
  std::sort(sorted.begin(), sorted.end());
  if (const auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
    throw std::invalid_argument("BlockTableDiff::plan: sequence id " + std::to_string(*d) + " appears twice in the step");
  int need_stride = 0;
  for (int s = 0; s < S; ++s) {
    const int nb = (in.context_lens[s] + in.block_size - 1) / in.block_size;
    if (nb > in.block_table_stride)
      throw std::invalid_argument("BlockTableDiff::plan: context_lens[" + std::to_string(s) + "] needs more than " +
                                  std::to_string(in.block_table_stride) + " blocks");
    need_stride = std::max(need_stride, nb);
  }

  ++step_;
  out.rows.assign(S, 0);
  out.updates.clear();
  out.resized = false;
  out.old_rows = n_rows_;
  out.old_stride = stride_;
  const int want_rows = std::max(S + 1, min_rows_), want_stride = std::max(need_stride, min_stride_);
  if (n_rows_ < want_rows || stride_ < want_stride)
    resize(n_rows_ < want_rows ? pow2_at_least(want_rows, kMinRows) : n_rows_,
           stride_ < want_stride ? pow2_at_least(want_stride, kMinStride) : stride_, out);
  out.n_rows = n_rows_;
  out.stride = stride_;

  // Rows: sequences already seen keep theirs; new ones take a never used row, else the least
  // recently used row of a sequence not in this step.
  std::vector<int> fresh;
  for (int s = 0; s < S; ++s) {
    const auto it = row_of_.find(seq_ids[s]);
    if (it == row_of_.end()) {
      fresh.push_back(s);
    } else {
      out.rows[s] = it->second;
      last_use_[it->second] = step_;
    }
  }
  if (!fresh.empty()) {
    std::vector<int> idle;
    if (fresh.size() > size_t(n_rows_ - next_fresh_)) {
      for (int r = 1; r < n_rows_; ++r)
        if (owned_[r] && last_use_[r] != step_) idle.push_back(r);
      std::sort(idle.begin(), idle.end(), [&](int a, int b) { return last_use_[a] < last_use_[b] || (last_use_[a] == last_use_[b] && a < b); });
    }
    size_t next_idle = 0;
    for (int s : fresh) {
      int r;
      if (next_fresh_ < n_rows_) {
        r = next_fresh_++;
      } else {
        r = idle.at(next_idle++);  // S + 1 <= n_rows_ guarantees one
        row_of_.erase(owner_[r]);
      }
      owner_[r] = seq_ids[s];
      owned_[r] = 1;
      last_use_[r] = step_;
      row_of_[seq_ids[s]] = r;
      out.rows[s] = r;
    }
  }

  // The entries that differ from what the device holds.
  for (int s = 0; s < S; ++s) {
    const int nb = (in.context_lens[s] + in.block_size - 1) / in.block_size;
    const int32_t* want = in.block_tables.data() + size_t(s) * in.block_table_stride;
    const int64_t base = int64_t(out.rows[s]) * stride_;
    if (std::memcmp(mirror_.data() + base, want, sizeof(int32_t) * nb) == 0) continue;  // the usual case
    for (int c = 0; c < nb; ++c) {
      int32_t& have = mirror_[base + c];
      if (have == want[c]) continue;
      have = want[c];
      out.updates.push_back({static_cast<int32_t>(base + c), want[c]});
    }
  }
}

}  // namespace servelab::cuda
