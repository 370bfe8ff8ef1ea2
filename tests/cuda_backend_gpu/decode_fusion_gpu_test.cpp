// The decode step's fused epilogues (issue 26's fixed cost a step) against the kernels they
// replace, through the whole cuda backend: the q|k|v product with RoPE and the K/V write in its
// epilogue (DecodePathOptions::fuse_qkv_rope; bf16 gemv and quant_gemv's steps kernel) gives the
// bits of the product followed by rope_kv_write, in CUDA graphs and eagerly, paged and naive KV,
// over prefill (not fused: more than 8 rows), decode steps of 3 and 5 sequences (fused) and their
// greedy tokens. Skipped without a device.
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

constexpr int64_t kSlots = 2048;

std::unique_ptr<CudaBackend> backend(Quantization q, bool graphs, bool fuse_rope) {
  CudaBackendOptions o;
  o.quantization = q;
  o.cuda_graphs = graphs;
  o.decode.fuse_qkv_rope = fuse_rope;
  auto gpu = CudaBackend::random(testing::gpu_test_model("decode-fusion", 512), 31, o);
  gpu->init_kv(kSlots);
  return gpu;
}

TEST(DecodeFusionGpu, QkvRopeEpilogueGivesTheBitsOfTheRopeKernel) {
  SKIP_WITHOUT_GPU();
  for (Quantization q : {Quantization::none, Quantization::fp8, Quantization::int4_awq})
    for (bool graphs : {true, false})
      for (KvKind kind : {KvKind::paged, KvKind::naive}) {
        SCOPED_TRACE(std::string(to_string(q)) + (graphs ? " graphs " : " eager ") +
                     (kind == KvKind::paged ? "paged" : "naive"));
        auto fused = backend(q, graphs, true), plain = backend(q, graphs, false);
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
        const std::vector<float> pa = fused->logits(make_step(*fused, prefill, *kv));
        ASSERT_EQ(pa, plain->logits(make_step(*plain, prefill, *kv)));
        testing::append_argmax(prefill, pa, 1000);
        for (int step = 0; step < 6; ++step) {  // 3 sequences (eager, capture, replay), then 5
          Batch batch;
          for (size_t i = 0; i < (step < 3 ? 3u : 5u); ++i) {
            testing::hold_kv(*kv, seqs[i], seqs[i].n_tokens());
            batch.entries.push_back({&seqs[i], 1, true});
          }
          const std::vector<float> x = fused->logits(make_step(*fused, batch, *kv));
          const std::vector<float> y = plain->logits(make_step(*plain, batch, *kv));
          ASSERT_EQ(x, y) << "step " << step;
          testing::append_argmax(batch, x, 1000);
        }
      }
}

}  // namespace decode_fusion_gpu_test
}  // namespace servelab
