// The FP8 KV cache's kernels (kernels/kv_fp8.h) on the GPU against kernels/ref/kv_fp8_ref.h:
// the fused RoPE + K/V write bit-equal to the CPU backend's quantization of the row the bf16
// kernel writes; decode attention over FP8 arenas on tensor cores and CUDA cores (GQA 1 / 4 / 8,
// batches 1 / 17 / 128, head_dim 32 / 64 / 128, paged
// blocks of 1 / 16 / 32 and naive, contexts 1..5000, auto and fixed splits, graph replays) and
// prefill attention over the dequantized scratch against attention_ref on the arena read back;
// block copies and swaps moving codes and scales together. bf16 and fp16 storage.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kv_fp8.h"
#include "kernels/ops.h"
#include "kernels/ref/kv_fp8_ref.h"
#include "kernels/ref/ops_ref.h"
#include "tests/kernels/kv_fixture.h"
#include "tests/kernels_gpu/attention_gpu_util.h"
#include "tests/kernels_gpu/gpu_util.h"

namespace servelab::kernels {
namespace kv_fp8_gpu_test {  // named, not anonymous: a unity batch shares one translation unit

using testing::DeviceBuffer;

int sm_count() {
  int n = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
  return n;
}

/// A batch whose K/V live in FP8 arenas: `ref` holds the arenas read back (what attention_ref
/// checks against), k8 / v8 the arenas themselves.
struct Fp8Batch {
  testing::KvBatch ref;
  std::vector<uint8_t> k8, v8;
};
Fp8Batch quantized(testing::KvBatch b) {
  Fp8Batch f;
  f.k8 = kv_fp8_pack_ref(b.k_cache, b.shape);
  f.v8 = kv_fp8_pack_ref(b.v_cache, b.shape);
  b.k_cache = kv_fp8_unpack_ref(f.k8, b.shape);
  b.v_cache = kv_fp8_unpack_ref(f.v8, b.shape);
  f.ref = std::move(b);
  return f;
}

/// decode_attention_fp8 over f (workspace zeroed, sized by its split); the output rows.
std::vector<float> run_decode_fp8(ScalarType t, const Fp8Batch& f, SplitPolicy split, DecodeSplit* used = nullptr,
                                  Fp8KvDecode variant = Fp8KvDecode::by_env) {
  testing::DeviceBatch d(f.ref, t);
  DeviceBuffer k8 = testing::upload(f.k8), v8 = testing::upload(f.v8);
  DecodeAttentionArgs a = d.decode_args(f.ref, t);
  a.k_cache = k8.get();
  a.v_cache = v8.get();
  a.split = split;
  const DecodeSplit s = decode_attention_fp8_split(a, sm_count(), variant);
  if (used) *used = s;
  d.workspace = DeviceBuffer(decode_attention_workspace_bytes(a.n_seqs, a.n_heads, f.ref.shape.head_dim, s.n_splits));
  CUDA_CHECK(cudaMemset(d.workspace.get(), 0, d.workspace.bytes()));
  a.workspace = d.workspace.get<float>();
  a.workspace_bytes = d.workspace.bytes();
  decode_attention_fp8(a, nullptr, variant);
  return testing::download16(t, d.out, f.ref.q.size());
}

class KvFp8Gpu : public ::testing::TestWithParam<ScalarType> {};

/// The fused kernel (and rope_inplace + kv_write_fp8) writes, for every written row, exactly the
/// codes and scale the CPU backend's formula gives on the row the bf16 kernel writes; Q as the
/// bf16 kernel rotates it; padding rows and unused slots untouched.
TEST_P(KvFp8Gpu, RopeKvWriteIsBitEqualToTheCpuQuantizationOfTheRow) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (const auto& [n_heads, n_kv] : {std::pair{8, 2}, std::pair{32, 8}, std::pair{32, 32}, std::pair{4, 1}})
    for (int hd : {32, 64, 128})
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE("heads " + std::to_string(n_heads) + "/" + std::to_string(n_kv) + " hd " + std::to_string(hd) +
                     (with_bias ? " bias" : ""));
        const int n_tokens = 17, stride = (n_heads + 2 * n_kv) * hd;
        const int64_t n_slots = 40, sb = fp8_kv_slot_bytes(n_kv, hd), arena_bytes = fp8_kv_arena_slots(n_slots) * sb;
        ASSERT_EQ(sb, kv_fp8_slot_bytes_ref(n_kv, hd));
        ASSERT_EQ(fp8_kv_arena_slots(n_slots), kv_fp8_arena_slots_ref(n_slots));
        const Fp8KvLayout lay = Fp8KvLayout::of(n_kv, hd);
        for (int64_t slot : {0, 15, 16, 37})
          for (int h : {0, n_kv - 1}) {
            ASSERT_EQ(lay.codes_at(slot, h), kv_fp8_codes_at_ref(slot, h, n_kv, hd));
            ASSERT_EQ(lay.scale_at(slot, h), kv_fp8_scale_at_ref(slot, h, n_kv, hd));
          }
        std::vector<float> qkv = testing::random16(t, size_t(n_tokens) * stride, rng);
        qkv[size_t(3) * stride + n_heads * hd] = 0.0f;  // an outlier and a zero row among the K/V rows
        qkv[size_t(4) * stride + (n_heads + n_kv) * hd + 1] = testing::rounding(t)(300.0f);
        std::fill_n(qkv.begin() + size_t(6) * stride + (n_heads + n_kv) * hd, hd, 0.0f);  // token 6's first V row: zero
        const std::vector<float> bias = with_bias ? testing::random16(t, stride, rng) : std::vector<float>{};
        std::vector<int32_t> pos(n_tokens);
        std::vector<int64_t> slots(n_tokens);
        std::uniform_int_distribution<int> p(0, 8000);
        for (int tok = 0; tok < n_tokens; ++tok) pos[tok] = tok == 0 ? 0 : p(rng);
        std::iota(slots.begin(), slots.end(), 3);
        slots[5] = -1;  // a padding row: never written
        const std::vector<float> inv = rope_inv_freq(500000.0f, hd);
        DeviceBuffer d_bias = testing::upload16(t, bias), d_pos = testing::upload(pos), d_slots = testing::upload(slots),
                     d_inv = testing::upload(inv);
        auto args = [&](DeviceBuffer& d_qkv, void* kc, void* vc) {
          QkvArgs a;
          a.dtype = t;
          a.qkv = d_qkv.get();
          a.qkv_row_stride = stride;
          a.n_tokens = n_tokens;
          a.n_heads = n_heads;
          a.n_kv_heads = n_kv;
          a.head_dim = hd;
          a.bias = with_bias ? d_bias.get() : nullptr;
          a.positions = d_pos.get<int32_t>();
          a.inv_freq = d_inv.get<float>();
          a.slot_mapping = d_slots.get<int64_t>();
          a.k_cache = kc;
          a.v_cache = vc;
          return a;
        };
        // The bf16 / fp16 kernel: the rows the cache would hold.
        DeviceBuffer q16 = testing::upload16(t, qkv), kc(size_t(n_slots) * n_kv * hd * 2), vc(kc.bytes());
        CUDA_CHECK(cudaMemset(kc.get(), 0, kc.bytes()));
        CUDA_CHECK(cudaMemset(vc.get(), 0, vc.bytes()));
        rope_kv_write(args(q16, kc.get(), vc.get()), nullptr);
        const std::vector<float> k_rows = testing::download16(t, kc, size_t(n_slots) * n_kv * hd);
        const std::vector<float> v_rows = testing::download16(t, vc, size_t(n_slots) * n_kv * hd);
        const std::vector<float> q_out = testing::download16(t, q16, qkv.size());
        // The expected arenas: the CPU formula on those rows, slots the step writes only.
        std::vector<uint8_t> k_want(size_t(arena_bytes), 0), v_want = k_want;
        for (int tok = 0; tok < n_tokens; ++tok) {
          if (slots[tok] < 0) continue;
          for (int h = 0; h < n_kv; ++h)
            for (int kind = 0; kind < 2; ++kind) {
              const std::vector<float>& rows = kind ? v_rows : k_rows;
              uint8_t* arena = (kind ? v_want : k_want).data();
              const float scale = quantize_kv_row_fp8_ref(rows.data() + (slots[tok] * n_kv + h) * hd, hd,
                                                          arena + kv_fp8_codes_at_ref(slots[tok], h, n_kv, hd));
              std::memcpy(arena + kv_fp8_scale_at_ref(slots[tok], h, n_kv, hd), &scale, 4);
            }
        }
        for (bool fused : {true, false}) {
          SCOPED_TRACE(fused ? "fused" : "rope_inplace + kv_write_fp8");
          DeviceBuffer q8 = testing::upload16(t, qkv), k8{size_t(arena_bytes)}, v8{size_t(arena_bytes)};
          CUDA_CHECK(cudaMemset(k8.get(), 0, k8.bytes()));
          CUDA_CHECK(cudaMemset(v8.get(), 0, v8.bytes()));
          const QkvArgs a = args(q8, k8.get(), v8.get());
          if (fused) {
            rope_kv_write_fp8(a, nullptr);
          } else {
            rope_inplace(a, nullptr);
            kv_write_fp8(a, nullptr);
          }
          EXPECT_EQ(testing::download<uint8_t>(k8, k8.bytes()), k_want);
          EXPECT_EQ(testing::download<uint8_t>(v8, v8.bytes()), v_want);
          const std::vector<float> q_got = testing::download16(t, q8, qkv.size());
          for (int tok = 0; tok < n_tokens; ++tok)  // the Q heads of every row as the 16-bit kernel leaves them
            ASSERT_TRUE(std::equal(q_got.begin() + size_t(tok) * stride, q_got.begin() + size_t(tok) * stride + n_heads * hd,
                                   q_out.begin() + size_t(tok) * stride))
                << "token " << tok;
        }
      }
}

/// Every kernel decode_attention_fp8 runs, against attention_ref on the read-back arena: the
/// tensor-core kernel (4 and 2 steps a pass in registers, and staged by cp.async; head_dim 32
/// falls back to CUDA cores) and the CUDA-core one (its two conversions giving the same bits).
TEST_P(KvFp8Gpu, DecodeMatchesReferenceOnAwkwardShapes) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int> len(1, 300);
  for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive})
    for (int group : {1, 4, 8})
      for (int bs : {1, 16, 32}) {
        if (kind == KvLayoutKind::naive && bs != 16) continue;
        for (int hd : {32, 64, 128}) {
          std::vector<int> ctx = {1, 97};
          while (ctx.size() < 17) ctx.push_back(len(rng));
          const Fp8Batch f = quantized(testing::make_batch({ctx, std::vector<int>(17, 1), 8, 8 / group, hd, kind, bs}, rng));
          const std::vector<float> ref = testing::reference_attention(f.ref);
          for (SplitPolicy split : {SplitPolicy{0}, SplitPolicy{32}}) {
            for (Fp8KvDecode v :
                 {Fp8KvDecode::shift_mask, Fp8KvDecode::mma, Fp8KvDecode::mma2, Fp8KvDecode::mma_async,
                  Fp8KvDecode::mma_async3, Fp8KvDecode::mma_async4, Fp8KvDecode::mma_async4f, Fp8KvDecode::mma_bulk,
                  Fp8KvDecode::mma_regs}) {
              DecodeSplit used;
              const std::vector<float> out = run_decode_fp8(t, f, split, &used, v);
              EXPECT_EQ(used.tensor_cores, v != Fp8KvDecode::shift_mask && hd != 32);
              EXPECT_LT(testing::rel_error(out, ref), testing::tolerance(t))
                  << "variant " << int(v) << " layout " << int(kind) << " group " << group << " block " << bs << " hd "
                  << hd << " split " << split.fixed_split_len << " splits " << used.n_splits;
              // The byte-permute conversion gives the same codes' values, so the same bits.
              if (v == Fp8KvDecode::shift_mask) {
                EXPECT_EQ(run_decode_fp8(t, f, split, nullptr, Fp8KvDecode::prmt), out)
                    << "prmt variant, layout " << int(kind) << " group " << group << " hd " << hd;
              }
            }
          }
        }
      }
}

/// The tensor-core kernels (registers, 2 steps; the cp.async rings) at batches 1 and 128 (GQA 1 / 4 / 8, 32
/// query heads, paged and naive): within the tolerance of attention_ref, every output row written
/// (poisoned before).
TEST_P(KvFp8Gpu, MmaDecodeMatchesReferenceAtBatches1To128) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int> len(1, 200);
  for (int batch : {1, 128})
    for (int group : {1, 4, 8})
      for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive}) {
        std::vector<int> ctx(batch);
        for (int& c : ctx) c = len(rng);
        ctx[0] = batch == 1 ? 1000 : 333;
        const Fp8Batch f = quantized(testing::make_batch({ctx, std::vector<int>(batch, 1), 32, 32 / group, 128, kind, 16}, rng));
        const std::vector<float> ref = testing::reference_attention(f.ref);
        for (Fp8KvDecode v : {Fp8KvDecode::mma2, Fp8KvDecode::mma_async, Fp8KvDecode::mma_async3, Fp8KvDecode::mma_async4,
                              Fp8KvDecode::mma_async4f, Fp8KvDecode::mma_bulk, Fp8KvDecode::mma_regs}) {
          DecodeSplit used;
          const std::vector<float> out = run_decode_fp8(t, f, SplitPolicy{}, &used, v);
          EXPECT_TRUE(used.tensor_cores);
          EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }));
          EXPECT_LT(testing::rel_error(out, ref), testing::tolerance(t))
              << "variant " << int(v) << " batch " << batch << " group " << group << " layout " << int(kind) << " splits "
              << used.n_splits;
        }
      }
}

/// The variant that turns codes into f16 (mma_async4f) where f16's range matters: Q
/// 2^17 times larger than usual with K 2^17 times smaller (the same scores; Q past f16's 65504 unless
/// the kernel scales it; 2^8 with f16 storage, which holds no larger Q), and V scales spread over 2^-7..2^7 from position to position (P times
/// the ratio to the first step's largest). Within the tolerance of attention_ref, as the bf16 variant.
TEST_P(KvFp8Gpu, CvtVariantsKeepTheRangeOfQAndVScales) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int group : {1, 4})
    for (int hd : {64, 128}) {
      testing::KvBatch b = testing::make_batch({{700, 33, 1, 260}, {1, 1, 1, 1}, 8, 8 / group, hd, KvLayoutKind::paged, 16}, rng);
      const float big = t == ScalarType::f16 ? 256.0f : 131072.0f;  // 2^17 (f16 storage: Q must fit it)
      for (float& x : b.q) x *= big;
      for (float& x : b.k_cache) x /= big;
      const size_t row = size_t(b.shape.n_kv_heads) * hd;
      for (size_t slot = 0; slot < b.v_cache.size() / row; ++slot)
        for (size_t e = 0; e < row; ++e) b.v_cache[slot * row + e] *= std::ldexp(1.0f, int(slot * 7 % 15) - 7);
      const Fp8Batch f = quantized(std::move(b));
      const std::vector<float> ref = testing::reference_attention(f.ref);
      for (Fp8KvDecode v : {Fp8KvDecode::mma_async4, Fp8KvDecode::mma_async4f, Fp8KvDecode::mma_bulk, Fp8KvDecode::mma_regs})
        for (SplitPolicy split : {SplitPolicy{0}, SplitPolicy{64}}) {
          const std::vector<float> out = run_decode_fp8(t, f, split, nullptr, v);
          EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }));
          EXPECT_LT(testing::rel_error(out, ref), testing::tolerance(t))
              << "variant " << int(v) << " group " << group << " hd " << hd << " split " << split.fixed_split_len;
        }
    }
}

/// The default by shape picks, on 132 SMs, what kernel_bench --fp8kv measured fastest on the H200
/// (results/gpu/quant/h200-2026-12-03-fp8kv-regs/, fractions of the copy): mma_bulk at GQA 1 where its
/// blocks fill the SMs with long runs of pages, mma_regs at GQA 4 and 8 and on small grids; without
/// bulk copies the cp.async ring or mma2. No GPU needed.
TEST(KvFp8Default, ByShapeFollowsTheMeasuredShapes) {
  constexpr int kSms = 132;
  struct Case { int seqs, kv, group, ctx; bool bulk_fits; Fp8KvDecode want; };
  const Case cases[] = {
      {32, 32, 1, 1024, true, Fp8KvDecode::mma_bulk},   // GQA 1 b32 1k: 0.77, mma_regs 0.78
      {128, 32, 1, 1024, true, Fp8KvDecode::mma_bulk},  // GQA 1 b128 1k: 0.87 against 0.76
      {128, 32, 1, 4096, true, Fp8KvDecode::mma_bulk},  // GQA 1 b128 4k: 0.88 against 0.84
      {32, 8, 4, 4096, true, Fp8KvDecode::mma_regs},    // GQA 4 b32 4k: 0.87 against 0.75
      {32, 8, 4, 1024, true, Fp8KvDecode::mma_regs},    // GQA 4 b32 1k: 0.70 against 0.57 (mma2)
      {32, 4, 8, 4096, true, Fp8KvDecode::mma_regs},    // GQA 8 b32 4k: 0.74 against 0.64
      {128, 4, 8, 4096, true, Fp8KvDecode::mma_regs},   // GQA 8 b128 4k: 0.87 against 0.83
      {1, 32, 1, 4096, true, Fp8KvDecode::mma_regs},    // b1 4k: 18.1 against 21.1 us (mma2)
      {1, 8, 4, 4096, true, Fp8KvDecode::mma_regs},
      {32, 32, 1, 1024, false, Fp8KvDecode::mma_async4f},
      {32, 8, 4, 4096, false, Fp8KvDecode::mma2},
  };
  for (const Case& c : cases)
    EXPECT_EQ(fp8_kv_decode_by_shape(c.seqs, c.kv, c.group, c.ctx, kSms, c.bulk_fits), c.want)
        << "b" << c.seqs << " kv " << c.kv << " ctx " << c.ctx << " bulk " << c.bulk_fits;
}

/// The bulk ring copies whole pages: the rows of a sequence's last page past its context, and
/// every slot no sequence holds, are NaN codes with NaN scales here (E4M3 0xFF, fp32 0xFFFFFFFF),
/// which must not reach the output (the kernel zeroes those V rows and scales in its stage). Paged
/// blocks of 16 and 32, contexts off the page boundary, one split and splits of 32 and 48.
TEST_P(KvFp8Gpu, BulkRingIgnoresThePageBeyondTheContext) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int group : {1, 4})
    for (int bs : {16, 32}) {
      const Fp8Batch clean =
          quantized(testing::make_batch({{1, 17, 300, 33, 4095, 47}, std::vector<int>(6, 1), 8, 8 / group, 128, KvLayoutKind::paged, bs}, rng));
      Fp8Batch f = clean;
      const testing::KvBatch& b = f.ref;
      const int n_kv = b.shape.n_kv_heads;
      std::vector<bool> used(size_t(b.shape.n_slots), false);
      for (size_t s = 0; s < b.in.context_lens.size(); ++s)
        for (int pos = 0; pos < b.in.context_lens[s]; ++pos)
          used[size_t(b.in.block_tables[s * b.in.block_table_stride + pos / bs]) * bs + pos % bs] = true;
      const Fp8KvLayout lay = Fp8KvLayout::of(n_kv, 128);
      for (int64_t slot = 0; slot < b.shape.n_slots; ++slot)
        for (int h = 0; h < n_kv && !used[size_t(slot)]; ++h)
          for (std::vector<uint8_t>* arena : {&f.k8, &f.v8}) {
            std::fill_n(arena->begin() + lay.codes_at(slot, h), 128, uint8_t(0xFF));
            std::fill_n(arena->begin() + lay.scale_at(slot, h), 4, uint8_t(0xFF));
          }
      const std::vector<float> ref = testing::reference_attention(f.ref);
      for (SplitPolicy split : {SplitPolicy{0}, SplitPolicy{32}, SplitPolicy{48}}) {
        const std::string what = "group " + std::to_string(group) + " block " + std::to_string(bs) + " split " +
                                 std::to_string(split.fixed_split_len);
        const std::vector<float> out = run_decode_fp8(t, f, split, nullptr, Fp8KvDecode::mma_bulk);
        EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); })) << what;
        EXPECT_LT(testing::rel_error(out, ref), testing::tolerance(t)) << what;
        // The same bits as the cp.async ring on the clean arena (same arithmetic, same order, same cut).
        EXPECT_EQ(out, run_decode_fp8(t, clean, split, nullptr, Fp8KvDecode::mma_async4f)) << what;
        // The register loads read whole pages too (V rows and scales past the context zeroed in
        // registers): the same arithmetic in the same order, so the same bits where their cut (for 2
        // blocks an SM) is mma_bulk's.
        DecodeSplit cut_bulk, cut;
        run_decode_fp8(t, f, split, &cut_bulk, Fp8KvDecode::mma_bulk);
        const std::vector<float> regs = run_decode_fp8(t, f, split, &cut, Fp8KvDecode::mma_regs);
        EXPECT_TRUE(std::all_of(regs.begin(), regs.end(), [](float x) { return std::isfinite(x); })) << what;
        EXPECT_LT(testing::rel_error(regs, ref), testing::tolerance(t)) << what;
        if (cut.split_len == cut_bulk.split_len) EXPECT_EQ(regs, out) << what;
      }
    }
}

/// Contexts up to 5000 (several splits merged through the workspace), GQA 1 / 4 / 8, head_dim 128,
/// on tensor cores and CUDA cores.
TEST_P(KvFp8Gpu, DecodeLongContextsMatchReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (int group : {1, 4, 8})
    for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive}) {
      const Fp8Batch f =
          quantized(testing::make_batch({{5000, 1, 1000, 4097, 2}, {1, 1, 1, 1, 1}, 32, 32 / group, 128, kind, 16}, rng));
      const std::vector<float> ref = testing::reference_attention(f.ref);
      // Auto splits on each kernel, and a fixed split of 1024 (5 at 5000) on the tensor-core ones:
      // at GQA 1 (5 x 32 KV heads, one block a KV head) their auto cut is a single split.
      const std::pair<Fp8KvDecode, SplitPolicy> runs[] = {{Fp8KvDecode::shift_mask, SplitPolicy{}},
                                                          {Fp8KvDecode::mma2, SplitPolicy{}},
                                                          {Fp8KvDecode::mma2, SplitPolicy{1024}},
                                                          {Fp8KvDecode::mma_async, SplitPolicy{1024}},
                                                          {Fp8KvDecode::mma_async4, SplitPolicy{1024}},
                                                          {Fp8KvDecode::mma_async4f, SplitPolicy{1024}},
                                                          {Fp8KvDecode::mma_bulk, SplitPolicy{}},
                                                          {Fp8KvDecode::mma_bulk, SplitPolicy{1024}},
                                                          {Fp8KvDecode::mma_regs, SplitPolicy{}},
                                                          {Fp8KvDecode::mma_regs, SplitPolicy{1024}},};
      for (const auto& [v, split] : runs) {
        DecodeSplit used;
        const std::vector<float> out = run_decode_fp8(t, f, split, &used, v);
        if (v == Fp8KvDecode::shift_mask || split.fixed_split_len > 0) {
          EXPECT_GT(used.n_splits, 1);
        }
        EXPECT_LT(testing::rel_error(out, ref), testing::tolerance(t))
            << "variant " << int(v) << " group " << group << " layout " << int(kind) << " splits " << used.n_splits;
        if (v == Fp8KvDecode::shift_mask) {
          EXPECT_EQ(run_decode_fp8(t, f, SplitPolicy{}, nullptr, Fp8KvDecode::prmt), out) << "prmt variant, group " << group;
        }
      }
    }
}

/// A CUDA graph of the FP8 decode replays to the eager call's bits (the split counters reset), on
/// the default kernel and the cp.async one.
TEST_P(KvFp8Gpu, DecodeGraphReplaysGiveTheEagerBits) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const Fp8Batch f = quantized(testing::make_batch({{3000, 17, 700}, {1, 1, 1}, 32, 8, 128, KvLayoutKind::paged, 16}, rng));
  for (Fp8KvDecode v : {Fp8KvDecode::by_env, Fp8KvDecode::mma_async, Fp8KvDecode::mma_regs}) {
    testing::DeviceBatch d(f.ref, t);
    DeviceBuffer k8 = testing::upload(f.k8), v8 = testing::upload(f.v8);
    DecodeAttentionArgs a = d.decode_args(f.ref, t);
    a.k_cache = k8.get();
    a.v_cache = v8.get();
    const DecodeSplit s = decode_attention_fp8_split(a, sm_count(), v);
    ASSERT_GT(s.n_splits, 1);
    d.workspace = DeviceBuffer(decode_attention_workspace_bytes(a.n_seqs, a.n_heads, 128, s.n_splits));
    CUDA_CHECK(cudaMemset(d.workspace.get(), 0, d.workspace.bytes()));
    a.workspace = d.workspace.get<float>();
    a.workspace_bytes = d.workspace.bytes();
    decode_attention_fp8(a, nullptr, v);
    const std::vector<uint16_t> eager = testing::download<uint16_t>(d.out, f.ref.q.size());
    testing::CapturedGraph graph([&](cudaStream_t st) { decode_attention_fp8(a, st, v); });
    for (int i = 0; i < 2; ++i) {
      d.out.poison();
      graph.replay();
      EXPECT_EQ(testing::download<uint16_t>(d.out, f.ref.q.size()), eager) << "variant " << int(v) << " replay " << i;
    }
    EXPECT_TRUE(testing::split_counters_zero(d.workspace, 128));
  }
}

/// Prefill over an FP8 cache: dequantize_kv_fp8 gives exactly the read-back rows rounded to the
/// dtype, and prefill_attention over them matches attention_ref on the read-back arena (chunks over
/// cached prefixes, GQA 1 / 4 / 8, paged and naive).
TEST_P(KvFp8Gpu, PrefillOverTheDequantizedScratchMatchesReference) {
  SKIP_WITHOUT_GPU();
  const ScalarType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  for (KvLayoutKind kind : {KvLayoutKind::paged, KvLayoutKind::naive})
    for (int group : {1, 4, 8})
      for (int hd : {64, 128}) {
        const std::vector<int> ctx = {1, 17, 129, 300, 256, 140, 5}, q = {1, 17, 129, 171, 128, 1, 5};
        const Fp8Batch f = quantized(testing::make_batch({ctx, q, 8, 8 / group, hd, kind, 16}, rng));
        SCOPED_TRACE("layout " + std::to_string(int(kind)) + " group " + std::to_string(group) + " hd " + std::to_string(hd));
        testing::DeviceBatch d(f.ref, t);
        DeviceBuffer k8 = testing::upload(f.k8), v8 = testing::upload(f.v8);
        const int64_t total = std::accumulate(ctx.begin(), ctx.end(), int64_t(0));
        const int64_t row = f.ref.shape.row_elems();
        DeviceBuffer ks(size_t(total * row * 2)), vs(ks.bytes()), bases(ctx.size() * 8);
        ks.poison();
        vs.poison();
        KvFp8DequantArgs x;
        x.dtype = t;
        x.k_cache = k8.get();
        x.v_cache = v8.get();
        x.shape = f.ref.shape;
        x.kv = d.kv;
        x.n_seqs = int(ctx.size());
        x.context_lens = d.context_lens.get<int32_t>();
        x.max_context = *std::max_element(ctx.begin(), ctx.end());
        x.total_context = total;
        x.k_out = ks.get();
        x.v_out = vs.get();
        x.out_slots = total;
        x.base_slots = bases.get<int64_t>();
        dequantize_kv_fp8(x, nullptr);
        // The scratch: sequence s's positions at the prefix sum of the contexts before it.
        const std::vector<float> kd = testing::download16(t, ks, size_t(total * row)), vd = testing::download16(t, vs, size_t(total * row));
        const KvAddressing addr = f.ref.in.addressing();
        int64_t at = 0;
        for (size_t s = 0; s < ctx.size(); ++s)
          for (int p = 0; p < ctx[s]; ++p, ++at)
            for (int64_t e = 0; e < row; ++e) {
              ASSERT_EQ(kd[at * row + e], testing::rounding(t)(f.ref.k_cache[addr.slot(int(s), p) * row + e])) << s << " " << p;
              ASSERT_EQ(vd[at * row + e], testing::rounding(t)(f.ref.v_cache[addr.slot(int(s), p) * row + e])) << s << " " << p;
            }
        PrefillAttentionArgs a;
        a.dtype = t;
        a.q = d.q.get();
        a.q_row_stride = int64_t(f.ref.spec.n_heads) * hd;
        a.k_cache = ks.get();
        a.v_cache = vs.get();
        a.shape = KvShape{total, f.ref.shape.n_kv_heads, hd};
        a.n_heads = f.ref.spec.n_heads;
        a.n_seqs = int(ctx.size());
        a.n_tokens = f.ref.n_tokens();
        a.query_start = d.query_start.get<int32_t>();
        a.context_lens = d.context_lens.get<int32_t>();
        a.kv.kind = KvLayoutKind::naive;
        a.kv.base_slots = bases.get<int64_t>();
        a.scale = 1.0f / std::sqrt(float(hd));
        a.out = d.out.get();
        a.out_row_stride = a.q_row_stride;
        prefill_attention(a, nullptr);
        EXPECT_LT(testing::rel_error(testing::download16(t, d.out, f.ref.q.size()), testing::reference_attention(f.ref)),
                  testing::tolerance(t));
      }
}

/// Copies and swaps on FP8 arenas (pages of 16 slots split by head): copy_blocks of whole pages,
/// copy_slots_fp8 of single slots, gather_slots_fp8 / scatter_slots_fp8 through a packed buffer:
/// every row and scale of a copied slot arrives, the packed slot is [codes h0 | ... | scales], and
/// nothing else changes.
TEST(KvFp8CopyGpu, PageCopiesSlotCopiesAndSwapsMoveCodesAndScalesTogether) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(7);
  for (const auto& [n_kv, hd] : {std::pair{2, 32}, std::pair{1, 128}, std::pair{8, 64}}) {
    const int64_t sb = fp8_kv_slot_bytes(n_kv, hd), n_slots = 64, page = kFp8KvPageSlots * sb;
    SCOPED_TRACE("slot bytes " + std::to_string(sb));
    ASSERT_EQ(sb % 16, 0);
    const int n_arenas = 4;
    std::vector<std::vector<uint8_t>> host(n_arenas, std::vector<uint8_t>(size_t(n_slots * sb)));
    std::vector<DeviceBuffer> dev;
    std::vector<void*> ptrs;
    for (auto& h : host) {
      for (uint8_t& b : h) b = uint8_t(rng());
      dev.push_back(testing::upload(h));
      ptrs.push_back(dev.back().get());
    }
    DeviceBuffer d_ptrs = testing::upload(ptrs);
    // A slot's bytes in the packed order, read from / written to a host arena.
    const size_t packed = size_t(n_kv) * hd + 4 * size_t(n_kv);
    auto get = [&](const std::vector<uint8_t>& a, int64_t slot) {
      std::vector<uint8_t> out(packed);
      for (int h = 0; h < n_kv; ++h) {
        std::copy_n(a.begin() + kv_fp8_codes_at_ref(slot, h, n_kv, hd), hd, out.begin() + int64_t(h) * hd);
        std::copy_n(a.begin() + kv_fp8_scale_at_ref(slot, h, n_kv, hd), 4, out.begin() + int64_t(n_kv) * hd + 4 * h);
      }
      return out;
    };
    auto put = [&](std::vector<uint8_t>& a, int64_t slot, const std::vector<uint8_t>& in) {
      for (int h = 0; h < n_kv; ++h) {
        std::copy_n(in.begin() + int64_t(h) * hd, hd, a.begin() + kv_fp8_codes_at_ref(slot, h, n_kv, hd));
        std::copy_n(in.begin() + int64_t(n_kv) * hd + 4 * h, 4, a.begin() + kv_fp8_scale_at_ref(slot, h, n_kv, hd));
      }
    };
    std::vector<std::vector<uint8_t>> want = host;
    // Whole pages: page 0 -> 3, 2 -> 1 (bytes).
    const std::vector<int32_t> pages = {0, 3, 2, 1};
    DeviceBuffer d_pages = testing::upload(pages);
    copy_blocks(d_ptrs.get<void*>(), n_arenas, d_pages.get<int32_t>(), 2, page, nullptr);
    for (auto& w : want)
      for (size_t i = 0; i < pages.size(); i += 2) std::copy_n(w.begin() + pages[i] * page, page, w.begin() + pages[i + 1] * page);
    for (int r = 0; r < n_arenas; ++r) EXPECT_EQ(testing::download<uint8_t>(dev[r], host[r].size()), want[r]) << "pages, arena " << r;
    // Single slots across pages and rows: 5 -> 17, 31 -> 2, 40 -> 41.
    const std::vector<int32_t> pairs = {5, 17, 31, 2, 40, 41};
    DeviceBuffer d_pairs = testing::upload(pairs);
    copy_slots_fp8(d_ptrs.get<void*>(), n_arenas, d_pairs.get<int32_t>(), 3, n_kv, hd, nullptr);
    for (auto& w : want)
      for (size_t i = 0; i < pairs.size(); i += 2) put(w, pairs[i + 1], get(w, pairs[i]));
    for (int r = 0; r < n_arenas; ++r) EXPECT_EQ(testing::download<uint8_t>(dev[r], host[r].size()), want[r]) << "slots, arena " << r;
    // Swap out slots {9, 33, 63} and back into {10, 48, 0}.
    const std::vector<int32_t> out_slots = {9, 33, 63}, in_slots = {10, 48, 0};
    DeviceBuffer d_out = testing::upload(out_slots), d_in = testing::upload(in_slots), staging(size_t(3 * n_arenas * sb));
    gather_slots_fp8(d_ptrs.get<void*>(), n_arenas, d_out.get<int32_t>(), 3, n_kv, hd, staging.get(), nullptr);
    const std::vector<uint8_t> staged = testing::download<uint8_t>(staging, staging.bytes());
    for (int i = 0; i < 3; ++i)
      for (int r = 0; r < n_arenas; ++r) {
        const std::vector<uint8_t> slot = get(want[r], out_slots[i]);
        EXPECT_TRUE(std::equal(slot.begin(), slot.end(), staged.begin() + (int64_t(i) * n_arenas + r) * sb))
            << "packed slot " << i << ", arena " << r;
      }
    scatter_slots_fp8(d_ptrs.get<void*>(), n_arenas, d_in.get<int32_t>(), 3, n_kv, hd, staging.get(), nullptr);
    for (auto& w : want)
      for (int i = 0; i < 3; ++i) put(w, in_slots[i], get(w, out_slots[i]));
    for (int r = 0; r < n_arenas; ++r) EXPECT_EQ(testing::download<uint8_t>(dev[r], host[r].size()), want[r]) << "swap, arena " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Storage, KvFp8Gpu, ::testing::ValuesIn(testing::kStorageTypes), testing::dtype_name);

}  // namespace kv_fp8_gpu_test
}  // namespace servelab::kernels
