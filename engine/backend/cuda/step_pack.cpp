#include "engine/backend/cuda/step_pack.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace servelab::cuda {
namespace {

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

PackedLayout make_layout(int rows, int tokens, int seqs, int stride, bool paged, int samples,
                         const BlockTableStep* tables) {
  const bool persistent = paged && tables != nullptr;
  PackedLayout l;
  l.persistent_tables = persistent;
  l.n_updates = persistent ? static_cast<int>(tables->updates.size()) : 0;
  l.n_rows = rows;
  l.n_tokens = tokens;
  l.n_seqs = seqs;
  l.table_stride = paged && !persistent ? stride : 0;
  l.n_samples = samples;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t o = at;
    at += align16(bytes);
    return o;
  };
  l.token_ids = take(sizeof(int32_t) * rows);
  l.positions = take(sizeof(int32_t) * tokens);
  l.slot_mapping = take(sizeof(int64_t) * tokens);
  l.query_start = take(sizeof(int32_t) * (seqs + 1));
  l.context_lens = take(sizeof(int32_t) * seqs);
  l.block_tables = take(paged && !persistent ? sizeof(int32_t) * size_t(seqs) * stride : 0);
  l.base_slots = take(paged ? 0 : sizeof(int64_t) * seqs);
  l.sample_rows = take(sizeof(int32_t) * samples);
  l.temperature = take(sizeof(float) * samples);
  l.top_k = take(sizeof(int32_t) * samples);
  l.top_p = take(sizeof(float) * samples);
  l.seed = take(sizeof(uint64_t) * samples);
  l.seq_key = take(sizeof(uint64_t) * samples);
  l.sample_position = take(sizeof(int32_t) * samples);
  l.table_rows = take(persistent ? sizeof(int32_t) * seqs : 0);
  l.update_count = take(persistent ? sizeof(int32_t) : 0);
  l.updates = take(sizeof(kernels::BlockTableUpdate) * l.n_updates);  // last: a bucket's offsets stay put
  l.total = at;
  return l;
}

template <typename T>
T* at(uint8_t* base, size_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

template <typename T>
void put(uint8_t* base, size_t offset, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(base + offset, v.data(), v.size() * sizeof(T));
}

}  // namespace

PackedLayout compact_layout(const StepPlan& plan, const BlockTableStep* tables) {
  const kernels::StepInput& in = plan.in;
  return make_layout(plan.n_rows(), in.n_tokens(), in.n_seqs(), in.block_table_stride,
                     in.kv_kind == kernels::KvLayoutKind::paged, in.n_samples(), tables);
}

bool bucketable(const StepPlan& plan) {
  const kernels::StepInput& in = plan.in;
  if (!in.decode_only || plan.n_padding != 0 || in.n_samples() != in.n_seqs()) return false;
  for (int i = 0; i < in.n_samples(); ++i)
    if (in.sample_rows[i] != i) return false;
  return true;
}

PackedLayout bucket_layout(const StepPlan& plan, int bucket, int table_stride, const BlockTableStep* tables) {
  const kernels::StepInput& in = plan.in;
  if (!bucketable(plan)) throw std::logic_error("bucket_layout: the plan is not a plain decode step");
  if (bucket < in.n_seqs()) throw std::logic_error("bucket_layout: bucket smaller than the batch");
  const bool paged = in.kv_kind == kernels::KvLayoutKind::paged;
  if (paged && !tables && table_stride < in.block_table_stride) throw std::logic_error("bucket_layout: stride too small");
  return make_layout(bucket, bucket, bucket, table_stride, paged, bucket, tables);
}

void pack_step(const StepPlan& plan, const PackedLayout& l, uint8_t* out, const BlockTableStep* tables) {
  const kernels::StepInput& in = plan.in;
  const int T = in.n_tokens(), S = in.n_seqs(), N = in.n_samples();
  put(out, l.token_ids, in.token_ids);
  std::fill(at<int32_t>(out, l.token_ids) + T, at<int32_t>(out, l.token_ids) + l.n_rows, 0);
  put(out, l.positions, in.positions);
  std::fill(at<int32_t>(out, l.positions) + T, at<int32_t>(out, l.positions) + l.n_tokens, 0);
  put(out, l.slot_mapping, in.slot_mapping);
  std::fill(at<int64_t>(out, l.slot_mapping) + T, at<int64_t>(out, l.slot_mapping) + l.n_tokens, int64_t(-1));
  put(out, l.query_start, in.query_start);
  for (int s = S; s < l.n_seqs; ++s) at<int32_t>(out, l.query_start)[s + 1] = at<int32_t>(out, l.query_start)[s] + 1;
  put(out, l.context_lens, in.context_lens);
  std::fill(at<int32_t>(out, l.context_lens) + S, at<int32_t>(out, l.context_lens) + l.n_seqs, 1);
  if (l.persistent_tables) {
    if (!tables || tables->rows.size() != size_t(S) || tables->updates.size() != size_t(l.n_updates))
      throw std::logic_error("pack_step: the block-table step differs from the layout's");
    put(out, l.table_rows, tables->rows);
    std::fill(at<int32_t>(out, l.table_rows) + S, at<int32_t>(out, l.table_rows) + l.n_seqs, 0);  // reserved zero row
    *at<int32_t>(out, l.update_count) = l.n_updates;
    put(out, l.updates, tables->updates);
  } else if (in.kv_kind == kernels::KvLayoutKind::paged) {
    int32_t* table = at<int32_t>(out, l.block_tables);
    if (l.table_stride == in.block_table_stride) {
      put(out, l.block_tables, in.block_tables);
    } else {
      for (int s = 0; s < S; ++s)
        std::memcpy(table + size_t(s) * l.table_stride, in.block_tables.data() + size_t(s) * in.block_table_stride,
                    sizeof(int32_t) * in.block_table_stride);
    }
    // Entries past a sequence's own blocks are never read; padding sequences read block 0.
    for (int s = S; s < l.n_seqs; ++s) std::fill(table + size_t(s) * l.table_stride, table + size_t(s + 1) * l.table_stride, 0);
  } else {
    put(out, l.base_slots, in.base_slots);
    std::fill(at<int64_t>(out, l.base_slots) + S, at<int64_t>(out, l.base_slots) + l.n_seqs, int64_t(0));
  }
  put(out, l.sample_rows, in.sample_rows);
  put(out, l.temperature, in.temperature);
  put(out, l.top_k, in.top_k);
  put(out, l.top_p, in.top_p);
  put(out, l.seed, in.seed);
  put(out, l.seq_key, in.seq_key);
  put(out, l.sample_position, in.sample_position);
  for (int i = N; i < l.n_samples; ++i) {  // padding sequences: greedy on their own row
    at<int32_t>(out, l.sample_rows)[i] = i;
    at<float>(out, l.temperature)[i] = 0.0f;
    at<int32_t>(out, l.top_k)[i] = 0;
    at<float>(out, l.top_p)[i] = 1.0f;
    at<uint64_t>(out, l.seed)[i] = 0;
    at<uint64_t>(out, l.seq_key)[i] = 0;
    at<int32_t>(out, l.sample_position)[i] = 1;
  }
}

}  // namespace servelab::cuda
