// The decode step's fused epilogues (issue 26's fixed cost a step) against the kernels they
// replace, through the whole cuda backend: the q|k|v product with RoPE and the K/V write in its
// epilogue (DecodePathOptions::fuse_qkv_rope; bf16 gemv and quant_gemv's steps kernel) gives the
// bits of the product followed by rope_kv_write, in CUDA graphs and eagerly, paged and naive KV,
// over prefill (not fused: more than 8 rows), decode steps of 3 and 5 sequences (fused) and their
// greedy tokens; and decode attention's PDL modes give the same bits. Skipped without a device.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/step_input.h"
#include "engine/kv/kv_manager.h"
#include "tests/backend/backend_test_util.h"
#include "tests/cuda_backend_gpu/gpu_test_model.h"

namespace servelab {
namespace decode_fusion_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::make_sequence;
using testing::random_tokens;

constexpr int64_t kSlots = 4096;  // naive KV: 5 extents of max_model_len 512 and room

std::unique_ptr<CudaBackend> backend(Quantization q, bool graphs, bool fuse_rope, int attention_pdl = 0) {
  CudaBackendOptions o;
  o.quantization = q;
  o.cuda_graphs = graphs;
  o.decode.fuse_qkv_rope = fuse_rope;
  o.decode.attention_pdl = attention_pdl;
  auto gpu = CudaBackend::random(testing::gpu_test_model("decode-fusion", 512), 31, o);
  gpu->init_kv(kSlots);
  return gpu;
}

/// Prefill of 5 sequences, then decode steps of 3 (eager, capture, replay) and of 5: every
/// step's logits of `a` and `b` bit for bit, greedy tokens from `a`'s.
void expect_same_bits(CudaBackend& a, CudaBackend& b, KvKind kind) {
  KvConfig kc;
  kc.kind = kind;
  kc.block_size = 16;
  kc.prefix_caching = false;
  kc.max_model_len = 512;
  auto kv = make_kv_manager(kc, kSlots);
  std::vector<Sequence> seqs;
  for (int i = 0; i < 5; ++i) seqs.push_back(make_sequence(i + 1, random_tokens(20 + 13 * i, 1000, 60 + i)));
  Batch prefill;
  for (Sequence& s : seqs) {
    testing::hold_kv(*kv, s, s.n_tokens());
    prefill.entries.push_back({&s, s.n_tokens(), true});
  }
  const std::vector<float> pa = a.logits(make_step(a, prefill, *kv));
  ASSERT_EQ(pa, b.logits(make_step(b, prefill, *kv)));
  testing::append_argmax(prefill, pa, 1000);
  for (int step = 0; step < 6; ++step) {
    Batch batch;
    for (size_t i = 0; i < (step < 3 ? 3u : 5u); ++i) {
      testing::hold_kv(*kv, seqs[i], seqs[i].n_tokens());
      batch.entries.push_back({&seqs[i], 1, true});
    }
    const std::vector<float> x = a.logits(make_step(a, batch, *kv));
    ASSERT_EQ(x, b.logits(make_step(b, batch, *kv))) << "step " << step;
    testing::append_argmax(batch, x, 1000);
  }
}

TEST(DecodeFusionGpu, QkvRopeEpilogueGivesTheBitsOfTheRopeKernel) {
  SKIP_WITHOUT_GPU();
  for (Quantization q : {Quantization::none, Quantization::fp8, Quantization::int4_awq})
    for (bool graphs : {true, false})
      for (KvKind kind : {KvKind::paged, KvKind::naive}) {
        SCOPED_TRACE(std::string(to_string(q)) + (graphs ? " graphs " : " eager ") +
                     (kind == KvKind::paged ? "paged" : "naive"));
        auto fused = backend(q, graphs, true), plain = backend(q, graphs, false);
        expect_same_bits(*fused, *plain, kind);
      }
}

// Decode attention's PDL modes (DecodePathOptions::attention_pdl) order the same arithmetic.
TEST(DecodeFusionGpu, AttentionPdlModesGiveTheSameBits) {
  SKIP_WITHOUT_GPU();
  auto plain = backend(Quantization::none, true, true, 0);
  for (int mode : {1, 2}) {
    SCOPED_TRACE("attention_pdl " + std::to_string(mode));
    auto other = backend(Quantization::none, true, true, mode);
    expect_same_bits(*other, *plain, KvKind::paged);
  }
}

}  // namespace decode_fusion_gpu_test
}  // namespace servelab
