#pragma once
// What the attention GPU tests share (attention_gpu_test.cpp, attention_prefill_fa7_gpu_test.cpp):
// a KvBatch on the device (poisoned output) and one prefill launch through a chosen kernel.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/step_input.h"
#include "kernels/attention.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels::testing {

/// The batch on the device, and the addressing that points there.
struct DeviceBatch {
  DeviceBuffer k, v, q, out, query_start, context_lens, block_tables, base_slots, workspace;
  KvAddressing kv;
  DeviceBatch(const KvBatch& b, ScalarType t)
      : k(testing::upload16(t, b.k_cache)),
        v(testing::upload16(t, b.v_cache)),
        q(testing::upload16(t, b.q)),
        out(b.q.size() * 2),
        query_start(testing::upload(b.in.query_start)),
        context_lens(testing::upload(b.in.context_lens)),
        block_tables(testing::upload(b.in.block_tables)),
        base_slots(testing::upload(b.in.base_slots)) {
    kv = b.in.addressing();
    kv.block_tables = block_tables.get<int32_t>();
    kv.base_slots = base_slots.get<int64_t>();
    out.poison();
  }
  /// Decode arguments over this batch (b is the batch it was made from): every pointer, shape and
  /// scale; split policy, kernel choice and workspace left at their defaults for the test to set.
  DecodeAttentionArgs decode_args(const KvBatch& b, ScalarType t) const {
    DecodeAttentionArgs a;
    a.dtype = t;
    a.q = q.get();
    a.q_row_stride = int64_t(b.spec.n_heads) * b.shape.head_dim;
    a.query_start = query_start.get<int32_t>();
    a.k_cache = k.get();
    a.v_cache = v.get();
    a.shape = b.shape;
    a.n_heads = b.spec.n_heads;
    a.n_seqs = b.in.n_seqs();
    a.context_lens = context_lens.get<int32_t>();
    a.kv = kv;
    a.max_context = b.in.max_context();
    a.scale = 1.0f / std::sqrt(float(b.shape.head_dim));
    a.out = out.get();
    a.out_row_stride = a.q_row_stride;
    return a;
  }
};

/// Cuts a's splits for this GPU, points a at a zeroed workspace of that many splits (its split
/// counters must start at zero) held in ws, and returns the cut.
inline DecodeSplit attach_zeroed_workspace(DecodeAttentionArgs& a, DeviceBuffer& ws) {
  int n_sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, 0));
  const DecodeSplit used = decode_attention_split(a, n_sms);
  ws = DeviceBuffer(decode_attention_workspace_bytes(a.n_seqs, a.n_heads, a.shape.head_dim, used.n_splits));
  CUDA_CHECK(cudaMemset(ws.get(), 0, ws.bytes()));
  a.workspace = ws.get<float>();
  a.workspace_bytes = ws.bytes();
  return used;
}

/// Whether the split counters at the end of a decode workspace are all back at zero (the last
/// block of each merge resets its counter, so graph replays start clean).
inline bool split_counters_zero(const DeviceBuffer& ws, int head_dim) {
  const size_t n = ws.bytes() / (4 * size_t(head_dim + 3));
  const std::vector<int32_t> c = download<int32_t>(ws, ws.bytes() / 4);
  return std::all_of(c.end() - n, c.end(), [](int32_t x) { return x == 0; });
}

/// The awkward prefill shapes every wgmma kernel is checked on: seven sequences at tile edges with
/// cached prefixes, GQA 1, 4 and 8 over 8 heads (head_dim 128), paged blocks of 1, 16, 32, 64 and
/// 256 slots and naive; fn(batch, "layout L group G block B") for each.
template <class Fn>
void for_each_awkward_prefill(std::mt19937_64& rng, Fn&& fn) {
  for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive})
    for (int group : {1, 4, 8})
      for (int bs : {1, 16, 32, 64, 256}) {
        if (kind == KvLayoutKind::naive && bs != 16) continue;
        const std::vector<int> ctx = {1, 17, 129, 300, 256, 140, 5}, q = {1, 17, 129, 171, 128, 1, 5};
        fn(make_batch({ctx, q, 8, 8 / group, 128, kind, bs}, rng),
           "layout " + std::to_string(int(kind)) + " group " + std::to_string(group) + " block " + std::to_string(bs));
      }
}

/// Query rows [r0, r1) of sequence s of b (its KV as in b), as a batch of one sequence.
inline KvBatch rows_of(const KvBatch& b, int s, int r0, int r1) {
  KvBatch one = b;
  const int q_len = b.in.query_start[s + 1] - b.in.query_start[s];
  one.in.query_start = {0, r1 - r0};
  one.in.context_lens = {b.in.context_lens[s] - q_len + r1};
  if (b.spec.kind == KvLayoutKind::paged) {
    const auto first = b.in.block_tables.begin() + size_t(s) * b.in.block_table_stride;
    one.in.block_tables.assign(first, first + b.in.block_table_stride);
  } else {
    one.in.base_slots = {b.in.base_slots[s]};
  }
  const size_t row = size_t(b.spec.n_heads) * b.spec.head_dim, q0 = size_t(b.in.query_start[s]) + r0;
  one.q.assign(b.q.begin() + q0 * row, b.q.begin() + (q0 + (r1 - r0)) * row);
  return one;
}

/// A prefill kernel entry point (prefill_attention or one by name).
using PrefillFn = void (*)(const PrefillAttentionArgs&, cudaStream_t);

/// Runs fn on b (bf16 or fp16 storage t) and returns the output rows as floats.
inline std::vector<float> run_prefill(ScalarType t, const KvBatch& b, PrefillFn fn = prefill_attention) {
  DeviceBatch d(b, t);
  PrefillAttentionArgs a;
  a.dtype = t;
  a.q = d.q.get();
  a.q_row_stride = int64_t(b.spec.n_heads) * b.spec.head_dim;
  a.k_cache = d.k.get();
  a.v_cache = d.v.get();
  a.shape = b.shape;
  a.n_heads = b.spec.n_heads;
  a.n_seqs = b.in.n_seqs();
  a.n_tokens = b.n_tokens();
  a.query_start = d.query_start.get<int32_t>();
  a.context_lens = d.context_lens.get<int32_t>();
  a.kv = d.kv;
  a.scale = 1.0f / std::sqrt(float(b.shape.head_dim));
  a.out = d.out.get();
  a.out_row_stride = a.q_row_stride;
  fn(a, nullptr);
  return testing::download16(t, d.out, b.q.size());
}

}  // namespace servelab::kernels::testing
