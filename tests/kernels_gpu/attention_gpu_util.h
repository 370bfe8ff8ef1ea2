#pragma once
// What the attention GPU tests share (attention_gpu_test.cpp, attention_prefill_fa7_gpu_test.cpp):
// a KvBatch on the device (poisoned output) and one prefill launch through a chosen kernel.
#include <cmath>
#include <random>
#include <string>
#include <vector>

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
};

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
