// A mixed step (prefill chunks beside decodes, eager) whose leading one-row sequences run through
// the decode attention kernel and its chunks through the prefill kernel
// (CudaBackendOptions::mixed_decodes = decode_kernel): the same logits within the kernels'
// rounding as every sequence through the prefill kernel, the same greedy tokens but at near ties,
// paged and naive KV, with a chunk that starts mid-prompt; skipped without a device.
#include <algorithm>
#include <cmath>
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
namespace mixed_attention_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

#ifndef SKIP_WITHOUT_GPU  // as the other files of this binary define it (one unity batch may hold several)
#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"
#endif

using testing::make_sequence;
using testing::random_tokens;

constexpr int64_t kSlots = 8192;

std::unique_ptr<CudaBackend> backend(bool split) {
  CudaBackendOptions o;
  o.mixed_decodes = split ? cuda::MixedDecodes::decode_kernel : cuda::MixedDecodes::prefill_kernel;
  auto gpu = CudaBackend::random(testing::gpu_test_model("mixed-attention", 1024), 41, o);
  gpu->init_kv(kSlots);
  return gpu;
}

/// Argmax of each row of logits[rows, vocab].
std::vector<int> argmax_rows(const std::vector<float>& logits, int vocab) {
  std::vector<int> out;
  for (size_t r = 0; r * vocab < logits.size(); ++r)
    out.push_back(int(std::max_element(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab) -
                      (logits.begin() + r * vocab)));
  return out;
}

TEST(MixedAttentionGpu, DecodesBesideChunksThroughTheDecodeKernelGiveTheSameLogits) {
  SKIP_WITHOUT_GPU();
  for (KvKind kind : {KvKind::paged, KvKind::naive}) {
    SCOPED_TRACE(kind == KvKind::paged ? "paged" : "naive");
    auto split = backend(true), plain = backend(false);
    const int vocab = split->config().vocab_size;
    KvConfig kc;
    kc.kind = kind;
    kc.block_size = 16;
    kc.prefix_caching = false;
    kc.max_model_len = 1024;
    auto kv = make_kv_manager(kc, kSlots);
    // Four sequences prefilled (contexts 90-600), then mixed steps: their decodes first, then a
    // fifth prompt in chunks of 96 (the second chunk starts mid-prompt, as chunked prefill does).
    std::vector<Sequence> seqs;
    for (int i = 0; i < 4; ++i) seqs.push_back(make_sequence(i + 1, random_tokens(90 + 170 * i, vocab, 70 + i)));
    seqs.push_back(make_sequence(9, random_tokens(200, vocab, 99)));
    Batch prefill;
    for (int i = 0; i < 4; ++i) {
      testing::hold_kv(*kv, seqs[i], seqs[i].n_tokens());
      prefill.entries.push_back({&seqs[i], seqs[i].n_tokens(), true});
    }
    const std::vector<float> pa = split->logits(make_step(*split, prefill, *kv));
    ASSERT_EQ(pa, plain->logits(make_step(*plain, prefill, *kv)));  // no decode row: the same path
    testing::append_argmax(prefill, pa, vocab);
    double worst = 0.0;
    for (int step = 0; step < 3; ++step) {
      Batch batch;
      for (int i = 0; i < 4; ++i) {
        testing::hold_kv(*kv, seqs[i], seqs[i].n_tokens());
        batch.entries.push_back({&seqs[i], 1, true});
      }
      Sequence& p = seqs[4];
      const int chunk = std::min(96, p.n_tokens() - p.n_computed);
      if (chunk > 0) {
        testing::hold_kv(*kv, p, p.n_computed + chunk);
        batch.entries.push_back({&p, chunk, p.n_computed + chunk == p.n_tokens()});
      }
      const std::vector<float> a = split->logits(make_step(*split, batch, *kv));
      const std::vector<float> b = plain->logits(make_step(*plain, batch, *kv));
      ASSERT_EQ(a.size(), b.size());
      worst = std::max(worst, testing::rel_error(a, b));
      EXPECT_LT(testing::rel_error(a, b), 2e-2) << "step " << step;  // bf16 activations, other sum orders
      // The same greedy token wherever it is not a near tie: a row whose argmax differs must have
      // had its two candidates within the kernels' rounding in the prefill-kernel logits.
      const std::vector<int> top = argmax_rows(a, vocab), top_b = argmax_rows(b, vocab);
      for (size_t r = 0; r < top.size(); ++r) {
        if (top[r] == top_b[r]) continue;
        const float* br = b.data() + r * size_t(vocab);
        float scale = 0.0f;
        for (int v = 0; v < vocab; ++v) scale = std::max(scale, std::abs(br[v]));
        EXPECT_LT(br[top_b[r]] - br[top[r]], 2e-2f * scale) << "step " << step << " row " << r << ": not a near tie";
      }
      // Teacher forcing: each drawn row's argmax appended; the chunk marked computed.
      size_t row = 0;
      for (const BatchEntry& e : batch.entries) {
        e.seq->n_computed += e.n_new;
        if (e.sample) e.seq->tokens.push_back(static_cast<TokenId>(top[row++]));
      }
    }
    std::printf("  mixed steps, decodes through the decode kernel against the prefill kernel: worst relative logit error %.2e\n",
                worst);
  }
}

}  // namespace mixed_attention_gpu_test
}  // namespace servelab
