// kernel_bench: validates the shipped kernels against the CPU references, then times them with
// CUDA events after warm-up (median of repeats, inputs rotated so repeats do not run from L2),
// and prints achieved GB/s and TFLOP/s next to ceilings measured in the same run: a large
// device-to-device copy and a large cuBLASLt bf16 GEMM on random data.
//   kernel_bench [--json FILE] [--quick] [--sweep] [--decode-only | --prefill-only] [--only SHAPE] [--commit SHA]
// --sweep also times, for GQA decode shapes: 2 blocks per SM (SplitPolicy::blocks_per_sm: bps2), the
// CUDA-core kernel (DecodeAttentionArgs::tensor_cores off: cudacore), the workspace split merge
// instead of the cluster one (max_cluster_splits 0: nocluster), the tensor-core kernel without its
// load pipeline (pipeline off: nopipe), two blocks per SM with the load pipeline
// (DecodeAttentionArgs::pipeline_blocks_per_sm 2: bps2pipe), one block per SM with the pipeline
// as before the fourth pass (bps1), the layout columns (the same bytes on other arenas, fifth
// pass: blocks in order (ident), no block table (naive), one KV head per slot row (onehead,
// onehead_ident, onehead_naive), shuffled within 2 MB windows (win2m), shuffled blocks of 64 / 256
// slots (bs64, bs256); PagedBatch; ident also at GQA 1), the split merge's arrival by every
// thread's fence.sc (DecodeAttentionArgs::release_arrive false: fenced, the default before the
// seventh pass; every shape), and the default again (again: the spread of one configuration).
// DECODE_VARIANTS="shuffled,invariant,fenced,again"
// (environment) keeps only the listed columns (and the default). (The fifth pass's headlock / headlock2 / touch columns timed kernel variants
// since removed: kernels/README.md.)
// Decode's default column (paged_decode_attn, seventh pass) reads the engine's own layout: the block
// tables a real PagedKvManager gives the batch's sequences after a seeded serving churn
// (engine/kv/paged_churn.h, ArenaOrder::engine; the shape names it and its blocks per physical run);
// `shuffled` (always timed) is the same shape on a shuffled 16-slot block table, the default column
// of every pass before (the sixth pass's `engine` column is now the default).
// DECODE_SHAPES (environment, ';'-separated "b8 ctx1024 gqa4;b1 ctx32768 gqa4"): only those
// decode shapes (as scripts/gpu-bench-peers.py reads it too).
// A shape's variants are timed in interleaved rounds (bench_timing.h: time_rounds).
// --decode-only: validation, the copy ceiling and paged decode attention only. --only "b1 ctx1024
// gqa4": that decode shape alone (e.g. under ncu; its first decode_mma_kernel launch after the
// validation's is the default variant's eager call).
// The decode weight products of llama2-7b (M = 1 and 8) are timed through Gemm with its skinny
// kernel (gemv.cu) and with cuBLASLt alone, side by side.
// JSON: a list of {name, value, unit, peer_or_ceiling, ratio, shape, device, date, commit}.
// Exit status: 0 ok, 1 a validation failed, 2 bad usage.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/kv/paged_churn.h"
#include "engine/model/half.h"
#include "kernels/attention.h"
#include "kernels/bench/bench_timing.h"
#include "kernels/bench/bench_util.cuh"
#include "kernels/common.cuh"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/sampling.h"

using namespace servelab;
using namespace servelab::kernels;
using namespace servelab::kernels::bench;

namespace {

/// DECODE_VARIANTS (environment): comma-separated decode column tags without the leading '_'
/// ("shuffled,fenced,again"); unset or empty: every column. The default column is always timed.
bool variant_wanted(const char* tag) {
  static const std::string list = [] {
    const char* e = std::getenv("DECODE_VARIANTS");
    return e && *e ? "," + std::string(e) + "," : std::string();
  }();
  if (list.empty() || !*tag) return true;
  return list.find("," + std::string(tag + (*tag == '_')) + ",") != std::string::npos;
}

/// How a PagedBatch lays its sequences' blocks over the arena: shuffled (the default: a block
/// table as a long-running paged cache leaves it), identity (the table's blocks in arena order, so
/// a sequence's slots are one contiguous run) or naive (the same contiguous runs addressed by
/// KvAddressing::base_slots, no block table).
/// window: shuffled within aligned groups of 64 blocks (2 MB of K rows at 8 KV heads, block 16).
/// engine: the tables the engine's PagedKvManager gives the batch's sequences after a seeded
/// serving churn (engine/kv/paged_churn.h: background requests come and go while these prefill a
/// share of ctx and decode to it), in an arena 1.5x their blocks.
enum class ArenaOrder { shuffled, identity, naive, window, engine };

/// A paged batch on the device: n_rot independent copies of every sequence's KV (rotation),
/// blocks shuffled over one arena (or in order: ArenaOrder).
struct PagedBatch {
  int batch, ctx, n_heads, n_kv, hd = 128, bs = 16, n_rot = 1;
  ArenaOrder order = ArenaOrder::shuffled;
  int64_t n_slots = 0;
  std::unique_ptr<Buf> k, v, q, out, ctx_lens, qstart, tables, bases, ws;
  int blocks_per_seq = 0;
  double mean_run_blocks = 0;  ///< engine: blocks per physical run of the batch's tables
  PagedBatch(int batch_, int ctx_, int n_heads_, int n_kv_, int64_t l2_bytes, std::mt19937_64& rng,
             ArenaOrder order_ = ArenaOrder::shuffled, int block_size = 16)
      : batch(batch_), ctx(ctx_), n_heads(n_heads_), n_kv(n_kv_), bs(block_size), order(order_) {
    const int64_t kv_bytes = int64_t(batch) * ctx * n_kv * hd * 2 * 2;
    n_rot = int(std::min<int64_t>(8, std::max<int64_t>(1, 4 * l2_bytes / kv_bytes + 1)));
    blocks_per_seq = (ctx + bs - 1) / bs;
    int64_t n_blocks = int64_t(blocks_per_seq) * batch * n_rot;
    std::vector<int32_t> perm(n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    if (order == ArenaOrder::engine) {  // every rotation's sequences are targets of one churn
      PagedChurnConfig churn;
      churn.block_size = bs;
      churn.n_targets = batch * n_rot;
      churn.ctx = ctx;
      const PagedChurnResult r = run_paged_churn(churn);
      n_blocks = r.n_blocks;
      for (size_t i = 0; i < r.tables.size(); ++i) std::copy(r.tables[i].begin(), r.tables[i].end(), perm.begin() + i * blocks_per_seq);
      mean_run_blocks = r.mean_run_blocks();
      std::printf("  engine layout, %d x ctx %d: %lld-block arena after %lld steps, %lld background requests: %.1f blocks per run\n",
                  churn.n_targets, ctx, (long long)r.n_blocks, (long long)r.n_steps, (long long)r.n_background, mean_run_blocks);
    }
    n_slots = n_blocks * bs;
    k = std::make_unique<Buf>(n_slots * n_kv * hd * 2);
    v = std::make_unique<Buf>(n_slots * n_kv * hd * 2);
    fill_random(k->p, n_slots * n_kv * hd, rng());
    fill_random(v->p, n_slots * n_kv * hd, rng());
    if (order == ArenaOrder::shuffled) std::shuffle(perm.begin(), perm.end(), rng);
    if (order == ArenaOrder::window)
      for (size_t w = 0; w < perm.size(); w += 64) std::shuffle(perm.begin() + w, perm.begin() + std::min(perm.size(), w + 64), rng);
    tables = std::make_unique<Buf>(perm.size() * 4);  // rotation r uses rows [r * batch, (r+1) * batch)
    CUDA_CHECK(cudaMemcpy(tables->p, perm.data(), perm.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int64_t> base(size_t(batch) * n_rot);  // naive: sequence i of all rotations at slot i * blocks * bs
    for (size_t i = 0; i < base.size(); ++i) base[i] = int64_t(i) * blocks_per_seq * bs;
    bases = std::make_unique<Buf>(base.size() * 8);
    CUDA_CHECK(cudaMemcpy(bases->p, base.data(), base.size() * 8, cudaMemcpyHostToDevice));
    q = std::make_unique<Buf>(size_t(batch) * n_heads * hd * 2);
    fill_random(q->p, int64_t(batch) * n_heads * hd, rng());
    out = std::make_unique<Buf>(size_t(batch) * n_heads * hd * 2);
    std::vector<int32_t> lens(batch, ctx), qs(batch + 1);
    std::iota(qs.begin(), qs.end(), 0);
    ctx_lens = std::make_unique<Buf>(batch * 4);
    qstart = std::make_unique<Buf>((batch + 1) * 4);
    CUDA_CHECK(cudaMemcpy(ctx_lens->p, lens.data(), batch * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(qstart->p, qs.data(), (batch + 1) * 4, cudaMemcpyHostToDevice));
  }
  DecodeAttentionArgs decode_args(int rot, SplitPolicy split, int n_sms, bool tensor_cores = true,
                                  int max_cluster = DecodeAttentionArgs{}.max_cluster_splits, bool pipeline = true,
                                  int pipe_bps = 0) {
    DecodeAttentionArgs a;
    a.q = q->p;
    a.q_row_stride = int64_t(n_heads) * hd;
    a.k_cache = k->p;
    a.v_cache = v->p;
    a.shape = KvShape{n_slots, n_kv, hd};
    a.n_heads = n_heads;
    a.n_seqs = batch;
    a.context_lens = ctx_lens->get<int32_t>();
    a.kv.kind = KvLayoutKind::paged;
    a.kv.block_size = bs;
    a.kv.block_table_stride = blocks_per_seq;
    a.kv.block_tables = tables->get<int32_t>() + size_t(rot % n_rot) * batch * blocks_per_seq;
    if (order == ArenaOrder::naive) {
      a.kv.kind = KvLayoutKind::naive;
      a.kv.base_slots = bases->get<int64_t>() + size_t(rot % n_rot) * batch;
    }
    a.max_context = ctx;
    a.scale = 1.0f / std::sqrt(float(hd));
    a.out = out->p;
    a.out_row_stride = a.q_row_stride;
    a.split = split;
    a.tensor_cores = tensor_cores;
    a.max_cluster_splits = max_cluster;
    a.pipeline = pipeline;
    a.pipeline_blocks_per_sm = pipe_bps;
    const DecodeSplit s = decode_attention_split(a, n_sms);
    const size_t need = decode_attention_workspace_bytes(batch, n_heads, hd, s.n_splits);
    if (!ws || ws->bytes < need) {
      ws = std::make_unique<Buf>(need);
      CUDA_CHECK(cudaMemset(ws->p, 0, need));  // the split counters start at zero
    }
    a.workspace = ws->get<float>();
    a.workspace_bytes = ws->bytes;
    return a;
  }
};

/// Decode and prefill on small shapes against attention_ref: the numbers below time checked code.
bool validate(std::mt19937_64& rng, int n_sms) {
  bool ok = true;
  for (int group : {1, 4}) {
    PagedBatch b(3, 300, 8, 8 / group, 0, rng);
    DecodeAttentionArgs a = b.decode_args(0, SplitPolicy{}, n_sms);
    a.split.fixed_split_len = 64;  // exercise the split path too
    const size_t need = decode_attention_workspace_bytes(3, 8, 128, 5);
    b.ws = std::make_unique<Buf>(need);
    CUDA_CHECK(cudaMemset(b.ws->p, 0, need));
    a.workspace = b.ws->get<float>();
    a.workspace_bytes = need;
    CUDA_CHECK(cudaMemset(b.out->p, 0xFF, b.out->bytes));
    decode_attention(a, nullptr);
    // Host copies for the reference.
    const std::vector<float> kf = to_float_bf16(*b.k, b.n_slots * b.n_kv * 128), vf = to_float_bf16(*b.v, b.n_slots * b.n_kv * 128);
    const std::vector<float> qf = to_float_bf16(*b.q, 3 * 8 * 128), got = to_float_bf16(*b.out, 3 * 8 * 128);
    std::vector<int32_t> tables(3 * b.blocks_per_seq), lens(3, 300), qs = {0, 1, 2, 3};
    CUDA_CHECK(cudaMemcpy(tables.data(), b.tables->p, tables.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> ref(qf.size());
    AttentionRefArgs r;
    r.q = qf.data();
    r.k_cache = kf.data();
    r.v_cache = vf.data();
    r.shape = KvShape{b.n_slots, b.n_kv, 128};
    r.n_heads = 8;
    r.n_seqs = 3;
    r.query_start = qs.data();
    r.context_lens = lens.data();
    r.kv = a.kv;
    r.kv.block_tables = tables.data();
    r.scale = a.scale;
    r.out = ref.data();
    attention_ref(r);
    const double e = rel_err(got, ref);
    std::printf("  validate decode group %d: rel err %.2e\n", group, e);
    ok = ok && e < 1e-2;

    // Prefill: the same KV, 300 query rows of sequence 0 (q drawn fresh).
    Buf pq(size_t(300) * 8 * 128 * 2), pout(size_t(300) * 8 * 128 * 2);
    fill_random(pq.p, 300 * 8 * 128, rng());
    CUDA_CHECK(cudaMemset(pout.p, 0xFF, pout.bytes));
    std::vector<int32_t> pqs = {0, 300};
    Buf dqs(8);
    CUDA_CHECK(cudaMemcpy(dqs.p, pqs.data(), 8, cudaMemcpyHostToDevice));
    PrefillAttentionArgs p;
    p.q = pq.p;
    p.q_row_stride = 8 * 128;
    p.k_cache = b.k->p;
    p.v_cache = b.v->p;
    p.shape = r.shape;
    p.n_heads = 8;
    p.n_seqs = 1;
    p.n_tokens = 300;
    p.query_start = dqs.get<int32_t>();
    p.context_lens = b.ctx_lens->get<int32_t>();
    p.kv = a.kv;
    p.scale = a.scale;
    p.out = pout.p;
    p.out_row_stride = 8 * 128;
    prefill_attention(p, nullptr);
    const std::vector<float> pqf = to_float_bf16(pq, 300 * 8 * 128), pgot = to_float_bf16(pout, 300 * 8 * 128);
    CUDA_CHECK(cudaMemset(pout.p, 0xFF, pout.bytes));
    prefill_attention_wmma(p, nullptr);
    const std::vector<float> pgot_wmma = to_float_bf16(pout, 300 * 8 * 128);
    CUDA_CHECK(cudaMemset(pout.p, 0xFF, pout.bytes));
    prefill_attention_mma(p, nullptr);
    const std::vector<float> pgot_mma = to_float_bf16(pout, 300 * 8 * 128);
    std::vector<float> pgot_sync = pgot_mma;  // the v4.1 wgmma kernel where it runs
    if (prefill_wgmma_supported(128)) {
      CUDA_CHECK(cudaMemset(pout.p, 0xFF, pout.bytes));
      prefill_attention_wgmma_sync(p, nullptr);
      pgot_sync = to_float_bf16(pout, 300 * 8 * 128);
    }
    std::vector<float> pref(pqf.size());
    r.q = pqf.data();
    r.n_seqs = 1;
    r.query_start = pqs.data();
    r.out = pref.data();
    attention_ref(r);
    const double pe = rel_err(pgot, pref), pe_wmma = rel_err(pgot_wmma, pref), pe_mma = rel_err(pgot_mma, pref),
                 pe_sync = rel_err(pgot_sync, pref);
    std::printf("  validate prefill group %d (%s): rel err %.2e (mma %.2e, wmma %.2e, wgmma_sync %.2e)\n", group,
                prefill_wgmma_supported(128) ? "wgmma" : "mma", pe, pe_mma, pe_wmma, pe_sync);
    ok = ok && pe < 1e-2 && pe_wmma < 1e-2 && pe_mma < 1e-2 && pe_sync < 1e-2;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path = "kernel_bench.json";
  std::string commit = "unknown", only;
  bool quick = false, sweep = false, decode_only = false, prefill_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--commit") && i + 1 < argc) commit = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--sweep")) sweep = true;
    else if (!std::strcmp(argv[i], "--decode-only")) decode_only = true;
    else if (!std::strcmp(argv[i], "--prefill-only")) prefill_only = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: kernel_bench [--json FILE] [--quick] [--sweep] [--decode-only] [--only SHAPE] [--commit SHA]\n");
      return 2;
    }
  }
  try {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const int n_sms = prop.multiProcessorCount;
    const int64_t l2 = prop.l2CacheSize;
    std::printf("device: %s, %d SMs, L2 %.0f MB\n", prop.name, n_sms, l2 / 1e6);
    std::mt19937_64 rng(12345);

    std::printf("validation against the CPU references:\n");
    const bool valid_attention = validate(rng, n_sms), valid_gemv = decode_only || prefill_only || validate_gemv();
    const bool valid = valid_attention && valid_gemv;
    if (!valid) std::printf("VALIDATION FAILED\n");

    std::printf("ceilings:\n");
    double copy_gbs = 0, gemm_tflops = 0;
    {
      const size_t bytes = size_t(1) << 31;
      Buf a(bytes), b(bytes);
      fill_random(a.p, bytes / 2, 1);
      const double ms = time_ms([&](int) { CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice)); }, 20);
      copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;  // bytes read + bytes written
      record("d2d_copy", "2 GiB", copy_gbs, "GB/s", "-", 0);
    }
    if (!decode_only) {
      const int n = 8192;
      Buf x(size_t(n) * n * 2), w(size_t(n) * n * 2), y(size_t(n) * n * 2);
      fill_random(x.p, int64_t(n) * n, 2);
      fill_random(w.p, int64_t(n) * n, 3);
      Gemm gemm(false);
      const double ms = time_ms([&](int) { gemm.run(ScalarType::bf16, x.p, w.p, y.p, n, n, n, false, nullptr); }, 10);
      gemm_tflops = 2.0 * n * n * double(n) / (ms * 1e-3) / 1e12;
      record("cublaslt_gemm_bf16", "8192x8192x8192", gemm_tflops, "TFLOP/s", "-", 0);
    }

    if (!decode_only && !prefill_only) {
      std::printf("decode weight products (llama2-7b, bf16; gemv vs cuBLASLt):\n");
      bench_gemv(l2, copy_gbs);
    }

    std::string decode_shapes = std::getenv("DECODE_SHAPES") ? std::getenv("DECODE_SHAPES") : "";
    if (!decode_shapes.empty()) decode_shapes = ";" + decode_shapes + ";";
    if (!prefill_only) {
      std::printf("paged decode attention (block 16, head_dim 128):\n");
      std::printf("  tensor-core decode kernel, HD 128, resident blocks per SM: %d pipelined, %d not\n",
                  decode_mma_resident_blocks(ScalarType::bf16, 128, true), decode_mma_resident_blocks(ScalarType::bf16, 128, false));
      if (!decode_shapes.empty()) std::printf("  DECODE_SHAPES: %s\n", decode_shapes.c_str());
    }
    const std::vector<int> batches = quick ? std::vector<int>{1, 32} : std::vector<int>{1, 8, 32, 128, 256};
    const std::vector<int> ctxs = quick ? std::vector<int>{4096} : std::vector<int>{1024, 4096, 32768};
    for (int group : {1, 4})
      for (int batch : prefill_only ? std::vector<int>{} : batches)
        for (int ctx : ctxs) {
          const int n_heads = 32, n_kv = 32 / group;
          const int64_t kv_bytes = int64_t(batch) * ctx * n_kv * 128 * 4;
          if (kv_bytes > (int64_t(24) << 30)) continue;  // keep the arena well inside GPU memory
          const std::string base_shape =
              "b" + std::to_string(batch) + " ctx" + std::to_string(ctx) + " gqa" + std::to_string(group);
          if (!only.empty() && only != base_shape) continue;
          if (!decode_shapes.empty() && decode_shapes.find(";" + base_shape + ";") == std::string::npos) continue;
          // batches[0]: the shape on the engine's layout, batches[1] on a shuffled arena (below); with
          // --sweep, the same bytes laid out otherwise (the layout columns, fifth pass): the same shape with its blocks in arena
          // order (ident) or addressed without a block table (naive), and the equivalent shape with
          // one KV head per slot row (batch x n_kv sequences of one KV head and `group` query heads:
          // the same grid, cut and bytes, each head's K/V a run of 16-slot blocks of 4 KB, or one
          // contiguous [ctx, 128] stream per head as SDPA reads it with onehead_ident / onehead_naive).
          // The default column's layout is the engine's own since the seventh pass; `shuffled` is the
          // 16-slot table every earlier pass timed as the default (unless DECODE_VARIANTS leaves it out).
          std::vector<std::unique_ptr<PagedBatch>> batches;
          batches.push_back(std::make_unique<PagedBatch>(batch, ctx, n_heads, n_kv, l2, rng, ArenaOrder::engine));
          if (variant_wanted("_shuffled")) batches.push_back(std::make_unique<PagedBatch>(batch, ctx, n_heads, n_kv, l2, rng));
          // The default policy, the batch-invariant one (fixed 512-position splits), and with
          // --sweep the comparisons the defaults were chosen from (GQA only: GQA 1 runs the
          // CUDA-core kernel, whose rules are settled), the layouts, then the default again (the
          // spread). DECODE_VARIANTS (environment, e.g. "shuffled,fenced,again") keeps only those.
          struct Variant {
            SplitPolicy pol;
            const char* tag = "";  // name suffix
            bool tc = true;
            int max_cluster = DecodeAttentionArgs{}.max_cluster_splits;
            bool pipe = true;
            int pipe_bps = 0;  // DecodeAttentionArgs::pipeline_blocks_per_sm
            int arena = 0;     // index into batches
            bool release = true;  // DecodeAttentionArgs::release_arrive
          };
          std::vector<Variant> variants = {{SplitPolicy{0, 0}}, {SplitPolicy{512, 0}, "_invariant"}};
          if (batches.size() > 1) {
            Variant v{SplitPolicy{0, 0}, "_shuffled"};
            v.arena = 1;
            variants.push_back(v);
          }
          if (sweep && group > 1) {
            Variant v;
            v = {SplitPolicy{0, 2}, "_bps2"};
            variants.push_back(v);
            v = {SplitPolicy{0, 0}, "_cudacore"};
            v.tc = false;
            variants.push_back(v);
            v = {SplitPolicy{0, 0}, "_nocluster"};
            v.max_cluster = 0;
            variants.push_back(v);
            v = {SplitPolicy{0, 0}, "_nopipe"};
            v.pipe = false;
            variants.push_back(v);
            v = {SplitPolicy{0, 2}, "_bps2pipe"};
            v.pipe_bps = 2;
            variants.push_back(v);
            v = {SplitPolicy{0, 1}, "_bps1"};
            v.pipe_bps = 1;
            variants.push_back(v);
          }
          // The layout columns (fifth pass; at GQA 1 `ident` since the sixth).
          if (sweep) {
            Variant v;
            const struct {
              const char* tag;
              bool one_head;
              ArenaOrder order;
              int bs = 16;
              bool gqa_only = true;
            } layouts[] = {{"_ident", false, ArenaOrder::identity, 16, false},
                           {"_naive", false, ArenaOrder::naive},   {"_onehead", true, ArenaOrder::shuffled},
                           {"_onehead_ident", true, ArenaOrder::identity}, {"_onehead_naive", true, ArenaOrder::naive},
                           {"_win2m", false, ArenaOrder::window},  {"_bs64", false, ArenaOrder::shuffled, 64},
                           {"_bs256", false, ArenaOrder::shuffled, 256}};
            for (const auto& l : layouts) {
              if ((l.gqa_only && group == 1) || !variant_wanted(l.tag)) continue;  // no arena for a column left out
              batches.push_back(l.one_head ? std::make_unique<PagedBatch>(batch * n_kv, ctx, group, 1, l2, rng, l.order, l.bs)
                                           : std::make_unique<PagedBatch>(batch, ctx, n_heads, n_kv, l2, rng, l.order, l.bs));
              v = {SplitPolicy{0, 0}, l.tag};
              v.arena = int(batches.size()) - 1;
              variants.push_back(v);
            }
            v = {SplitPolicy{0, 0}, "_fenced"};  // the split merge's arrival by every thread's fence.sc (the
            v.release = false;                   // default before release_arrive, seventh pass)
            variants.push_back(v);
            variants.push_back({SplitPolicy{0, 0}, "_again"});
          }
          std::erase_if(variants, [](const Variant& var) { return *var.tag && !variant_wanted(var.tag); });
          // Every variant's arguments first (the workspace grows to the largest need), then one
          // graph each, then interleaved rounds (time_rounds): no variant is always timed first.
          std::vector<std::vector<DecodeAttentionArgs>> args(variants.size());
          for (size_t k = 0; k < variants.size(); ++k) {
            const Variant& var = variants[k];
            PagedBatch& bb = *batches[var.arena];
            for (int r = 0; r < bb.n_rot; ++r) {
              args[k].push_back(bb.decode_args(r, var.pol, n_sms, var.tc, var.max_cluster, var.pipe, var.pipe_bps));
              args[k].back().release_arrive = var.release;
            }
          }
          for (size_t k = 0; k < variants.size(); ++k)
            for (auto& a : args[k]) {
              const PagedBatch& bb = *batches[variants[k].arena];
              a.workspace = bb.ws->get<float>();
              a.workspace_bytes = bb.ws->bytes;
            }
          std::vector<std::unique_ptr<GraphTimer>> timers;
          std::vector<GraphTimer*> tp;
          for (size_t k = 0; k < variants.size(); ++k) {
            auto& list = args[k];
            timers.push_back(std::make_unique<GraphTimer>(
                [&list, n_rot = batches[variants[k].arena]->n_rot](int i, cudaStream_t st) { decode_attention(list[i % n_rot], st); }, 20));
            tp.push_back(timers.back().get());
          }
          const std::vector<double> med = time_rounds(tp, 15);
          for (size_t k = 0; k < variants.size(); ++k) {
            const double ms = med[k];
            const int fixed = variants[k].pol.fixed_split_len;
            const double bytes = double(kv_bytes) + 2.0 * batch * n_heads * 128 * 2;
            const DecodeSplit used = decode_attention_split(args[k][0], n_sms);
            const std::string shape = base_shape + (fixed ? " split512" : "");
            const std::string name = std::string("paged_decode_attn") + variants[k].tag;
            // After the cut: the layout of the engine and shuffled arenas (the other layout columns'
            // names say theirs).
            const PagedBatch& bb = *batches[variants[k].arena];
            char runs[32];
            std::snprintf(runs, sizeof runs, "%.1f", bb.mean_run_blocks);
            const std::string layout = bb.order == ArenaOrder::engine
                                           ? std::string("; engine blocks: PagedKvManager after a seeded churn, ") + runs + " blocks a run"
                                       : bb.order == ArenaOrder::shuffled && bb.n_kv == n_kv && bb.bs == 16 ? "; shuffled blocks"
                                                                                                            : "";
            record(name, shape + " (" + std::to_string(used.n_splits) + " splits" + (used.tensor_cores ? " mma" : "") +
                       (used.cluster ? " cluster" : "") + (used.pipeline ? " pipe" : "") +
                       (used.tensor_cores && used.blocks_per_sm == 2 && !fixed ? " bps2" : "") + ")" + layout,
                   bytes / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
          }
        }

    if (!decode_only) {
    std::printf("prefill attention (causal, head_dim 128, 32 heads; prefill_attn runs %s):\n",
                prefill_wgmma_supported(128) ? "the wgmma kernel" : "the mma kernel");
    const auto shape_of = [](int seq, int group) { return "seq" + std::to_string(seq) + " gqa" + std::to_string(group); };
    for (int group : {1, 4})
      for (int seq : quick ? std::vector<int>{4096} : std::vector<int>{1024, 4096}) {
        // Four KV layouts: paged blocks of 16, shuffled (rows "seqN gqaG"), the contiguous arena SDPA
        // reads (" naive"), paged blocks of 256, shuffled (" block256"; ninth pass), and blocks of 16 as
        // the engine's PagedKvManager lays them after a seeded churn (" engine", tenth pass: physical
        // runs, most 128-key tiles on consecutive blocks).
        struct PrefillLayout { const char* suffix; ArenaOrder order; int block; };
        const PrefillLayout layouts[] = {{"", ArenaOrder::shuffled, 16}, {" naive", ArenaOrder::naive, 16}, {" block256", ArenaOrder::shuffled, 256},
                                         {" engine", ArenaOrder::engine, 16}};
        Buf pq(size_t(seq) * 32 * 128 * 2), pout(size_t(seq) * 32 * 128 * 2), dqs(8);
        fill_random(pq.p, int64_t(seq) * 32 * 128, rng());
        const int32_t qs[2] = {0, seq};
        CUDA_CHECK(cudaMemcpy(dqs.p, qs, 8, cudaMemcpyHostToDevice));
        std::vector<std::unique_ptr<PagedBatch>> batches;
        std::vector<PrefillAttentionArgs> args;
        for (const PrefillLayout& l : layouts) {
          PagedBatch& b = *batches.emplace_back(std::make_unique<PagedBatch>(1, seq, 32, 32 / group, 0, rng, l.order, l.block));
          const DecodeAttentionArgs d = b.decode_args(0, SplitPolicy{}, n_sms);
          PrefillAttentionArgs& p = args.emplace_back();
          p.q = pq.p;
          p.q_row_stride = p.out_row_stride = 32 * 128;
          p.k_cache = b.k->p, p.v_cache = b.v->p, p.shape = d.shape;
          p.n_heads = 32, p.n_seqs = 1, p.n_tokens = seq;
          p.query_start = dqs.get<int32_t>();
          p.context_lens = b.ctx_lens->get<int32_t>();
          p.kv = d.kv;
          p.scale = d.scale;
          p.out = pout.p;
          if (l.order == ArenaOrder::engine) {  // the tiles fa11 loads by TMA: whole, on consecutive blocks
            std::vector<int32_t> tbl(size_t(b.blocks_per_seq));
            CUDA_CHECK(cudaMemcpy(tbl.data(), p.kv.block_tables, tbl.size() * 4, cudaMemcpyDeviceToHost));
            const int per_tile = 128 / l.block;
            int whole = 0, runs = 0;
            for (int t = 0; (t + 1) * 128 <= seq; ++t, ++whole) {
              bool run = true;
              for (int i = 1; i < per_tile; ++i) run = run && tbl[size_t(t * per_tile + i)] == tbl[size_t(t * per_tile)] + i;
              runs += run;
            }
            std::printf("    engine table, seq %d: %d of %d whole key tiles on consecutive blocks (%.1f blocks per run)\n", seq, runs, whole,
                        b.mean_run_blocks);
          }
        }
        const double flops = 4.0 * 0.5 * double(seq) * seq * 128 * 32;  // QKᵀ and PV, causal half
        const std::string shape = shape_of(seq, group);
        // Timed as the peer script times SDPA: a CUDA graph of 20 calls, >= 25 ms of warm-up replays,
        // median of 15 replays; in kPrefillRounds interleaved rounds (every (kernel, layout) once a
        // round, odd rounds backwards), each row the median of its rounds (all printed), so that a
        // clock or thermal drift touches every kernel alike.
        using PrefillFn = void (*)(const PrefillAttentionArgs&, cudaStream_t);
        struct Timed { const char* name; PrefillFn fn; int layout; std::vector<double> ms; };
        const PrefillFn dispatched = [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention(a, st); };
        std::vector<Timed> timed = {{"prefill_attn", dispatched, 0, {}}};  // then by name, on each layout
        if (prefill_wgmma_supported(128)) {  // each wgmma kernel by name
          // fa8, fa10 (fa8's consumers on v6's TMA producer) and fa11 (TMA per tile where its slots
          // are consecutive, else fa8's gather) on the shuffled, naive and engine layouts, fa11_vote
          // (call 1's fa11) on the shuffled and engine ones; prefill_attn on all four. fa5, fa6, fa9 and older kernels: kernels/notes-prefill.md.
          const PrefillFn fa8 = [](const PrefillAttentionArgs& a, cudaStream_t st) { prefill_attention_wgmma_fa8(a, st, 0); },
                          fa10 = prefill_attention_wgmma_fa10, fa11 = prefill_attention_wgmma_fa11, fa11v = prefill_attention_wgmma_fa11_vote;
          const char *n8 = "prefill_attn_wgmma_fa8", *n10 = "prefill_attn_wgmma_fa10", *n11 = "prefill_attn_wgmma_fa11",
                     *n11v = "prefill_attn_wgmma_fa11_vote";
          timed.insert(timed.end(), {{n8, fa8, 0, {}}, {n11, fa11, 0, {}}, {n11v, fa11v, 0, {}}, {n10, fa10, 0, {}},
                                     {"prefill_attn", dispatched, 3, {}}, {n8, fa8, 3, {}}, {n11, fa11, 3, {}}, {n11v, fa11v, 3, {}},
                                     {n10, fa10, 3, {}}, {"prefill_attn", dispatched, 1, {}}, {n8, fa8, 1, {}}, {n11, fa11, 1, {}},
                                     {n10, fa10, 1, {}}, {"prefill_attn", dispatched, 2, {}}});
          // fa11 and fa8 fill the same shared memory: the same output bytes on every layout (checked here
          // on the engine's own tables too, which the tests do not build).
          for (size_t li = 0; li < args.size(); ++li) {
            const size_t bytes = size_t(seq) * 32 * 128 * 2;
            std::vector<uint16_t> o8(bytes / 2), o11(bytes / 2);
            fa8(args[li], nullptr);
            CUDA_CHECK(cudaMemcpy(o8.data(), pout.p, bytes, cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemset(pout.p, 0xff, bytes));
            fa11(args[li], nullptr);
            CUDA_CHECK(cudaMemcpy(o11.data(), pout.p, bytes, cudaMemcpyDeviceToHost));
            std::printf("    fa11 %s fa8 bit for bit on %s\n", o8 == o11 ? "==" : "!= (MISMATCH)", (shape_of(seq, group) + layouts[li].suffix).c_str());
          }
        } else {
          timed.push_back({"prefill_attn", dispatched, 1, {}});
        }
        constexpr int kPrefillRounds = 7;
        for (int round = 0; round < kPrefillRounds; ++round)
          for (size_t i = 0; i < timed.size(); ++i) {
            Timed& k = timed[round % 2 == 0 ? i : timed.size() - 1 - i];
            const PrefillAttentionArgs& p = args[size_t(k.layout)];
            k.ms.push_back(time_graph_ms([&](int, cudaStream_t st) { k.fn(p, st); }, 20, 15));
          }
        for (auto& k : timed) {
          std::vector<double> sorted = k.ms;
          std::sort(sorted.begin(), sorted.end());
          const std::string kshape = shape + layouts[k.layout].suffix;
          std::printf("    %-34s %-20s rounds:", k.name, kshape.c_str());
          for (double m : k.ms) std::printf(" %.1f", flops / (m * 1e-3) / 1e12);
          std::printf(" TFLOP/s\n");
          record(k.name, kshape, flops / (sorted[sorted.size() / 2] * 1e-3) / 1e12, "TFLOP/s", "cublaslt_gemm_bf16", gemm_tflops);
        }
        const PrefillAttentionArgs& p = args[0];
        double ms = time_graph_ms([&](int, cudaStream_t st) { prefill_attention_mma(p, st); }, 20, 15);
        record("prefill_attn_mma", shape, flops / (ms * 1e-3) / 1e12, "TFLOP/s", "cublaslt_gemm_bf16", gemm_tflops);
        ms = time_graph_ms([&](int, cudaStream_t st) { prefill_attention_wmma(p, st); }, 5, 5);
        record("prefill_attn_wmma", shape, flops / (ms * 1e-3) / 1e12, "TFLOP/s", "cublaslt_gemm_bf16", gemm_tflops);
      }

    if (!prefill_only) std::printf("element-wise kernels (256 rows, d 4096, ffn 11008):\n");
    if (!prefill_only) {
      const int r = 256, d = 4096, ffn = 11008, n_rot = 8;
      Buf x(size_t(n_rot) * r * d * 2), res(size_t(r) * d * 2), w(d * 2), out(size_t(r) * d * 2);
      fill_random(x.p, int64_t(n_rot) * r * d, 4);
      fill_random(res.p, int64_t(r) * d, 5);
      fill_random(w.p, d, 6);
      auto xr = [&](int i) { return x.get<char>() + size_t(i % n_rot) * r * d * 2; };
      const double rb = double(r) * d * 2;
      double ms = time_ms([&](int i) { add_rms_norm(ScalarType::bf16, xr(i), res.p, w.p, out.p, r, d, 1e-5f, nullptr); }, 50);
      record("add_rms_norm_fused", "256x4096", 4 * rb / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
      ms = time_ms([&](int i) {
        residual_add(ScalarType::bf16, xr(i), res.p, int64_t(r) * d, nullptr);
        rms_norm(ScalarType::bf16, res.p, w.p, out.p, r, d, 1e-5f, nullptr);
      }, 50);
      record("add_rms_norm_unfused", "256x4096 (same bytes counted)", 4 * rb / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
      Buf gu(size_t(n_rot) * r * 2 * ffn * 2), act(size_t(r) * ffn * 2);
      fill_random(gu.p, int64_t(n_rot) * r * 2 * ffn, 7, 3.0f);
      ms = time_ms([&](int i) { silu_mul(ScalarType::bf16, gu.get<char>() + size_t(i % n_rot) * r * 2 * ffn * 2, act.p, r, ffn, nullptr); }, 50);
      record("silu_mul_fused", "256x11008", 3.0 * r * ffn * 2 / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
      ms = time_ms([&](int i) { silu_then_mul(ScalarType::bf16, gu.get<char>() + size_t(i % n_rot) * r * 2 * ffn * 2, act.p, r, ffn, nullptr); }, 50);
      record("silu_mul_unfused", "256x11008 (same bytes counted)", 3.0 * r * ffn * 2 / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
    }
    if (!prefill_only) {
      const int t = 256, nh = 32, nkv = 8, hd = 128, stride = (nh + 2 * nkv) * hd;
      Buf qkv(size_t(t) * stride * 2), kc(size_t(t) * nkv * hd * 2), vc(size_t(t) * nkv * hd * 2);
      fill_random(qkv.p, int64_t(t) * stride, 8);
      std::vector<int32_t> pos(t);
      std::vector<int64_t> slots(t);
      std::iota(pos.begin(), pos.end(), 100);
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      const std::vector<float> inv = rope_inv_freq(500000.0f, hd);
      Buf dpos(t * 4), dslots(t * 8), dinv(inv.size() * 4);
      CUDA_CHECK(cudaMemcpy(dpos.p, pos.data(), t * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(dslots.p, slots.data(), t * 8, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(dinv.p, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice));
      QkvArgs a;
      a.qkv = qkv.p;
      a.qkv_row_stride = stride;
      a.n_tokens = t;
      a.n_heads = nh;
      a.n_kv_heads = nkv;
      a.head_dim = hd;
      a.positions = dpos.get<int32_t>();
      a.inv_freq = dinv.get<float>();
      a.slot_mapping = dslots.get<int64_t>();
      a.k_cache = kc.p;
      a.v_cache = vc.p;
      const double bytes = double(t) * (stride + (nh + 2 * nkv) * hd) * 2;  // read qkv, write q, k, v
      double ms = time_ms([&](int) { rope_kv_write(a, nullptr); }, 50);
      record("rope_kv_write_fused", "256 tokens 32/8 heads", bytes / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
      ms = time_ms([&](int) {
        rope_inplace(a, nullptr);
        kv_write(a, nullptr);
      }, 50);
      record("rope_kv_write_unfused", "256 tokens 32/8 heads", bytes / (ms * 1e-3) / 1e9, "GB/s", "d2d_copy", copy_gbs);
    }
    if (!prefill_only) {
      const int n = 256, vocab = 128256;
      Buf logits(size_t(n) * vocab * 4), temp(n * 4), topk(n * 4), topp(n * 4), seed(n * 8), key(n * 8), pos(n * 4),
          tok(n * 4);
      fill_random_f32_kernel<<<4096, 256>>>(logits.get<float>(), int64_t(n) * vocab, 9, 8.0f);
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaMemset(seed.p, 0, n * 8));
      CUDA_CHECK(cudaMemset(key.p, 0, n * 8));
      CUDA_CHECK(cudaMemset(pos.p, 0, n * 4));
      SampleArgs a;
      a.logits = logits.get<float>();
      a.n_rows = n;
      a.vocab = vocab;
      a.temperature = temp.get<float>();
      a.top_k = topk.get<int32_t>();
      a.top_p = topp.get<float>();
      a.seed = seed.get<uint64_t>();
      a.seq_key = key.get<uint64_t>();
      a.position = pos.get<int32_t>();
      a.tokens = tok.get<int32_t>();
      const double bytes = double(n) * vocab * 4;
      for (int mode = 0; mode < 2; ++mode) {
        const std::vector<float> t(n, mode ? 0.8f : 0.0f), p(n, mode ? 0.9f : 1.0f);
        const std::vector<int32_t> k(n, mode ? 50 : 0);
        CUDA_CHECK(cudaMemcpy(temp.p, t.data(), n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(topp.p, p.data(), n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(topk.p, k.data(), n * 4, cudaMemcpyHostToDevice));
        const double ms = time_ms([&](int) { sample_tokens(a, nullptr); }, 20);
        record(mode ? "sample_topk50_topp0.9" : "sample_greedy", "256 rows x 128256", bytes / (ms * 1e-3) / 1e9,
               "GB/s", "d2d_copy", copy_gbs);
      }
    }

    }  // !decode_only

    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows)
      out.push_back({{"name", r.name}, {"value", r.value}, {"unit", r.unit}, {"peer_or_ceiling", r.ceiling_name},
                     {"ratio", r.ceiling > 0 ? r.value / r.ceiling : 0.0}, {"shape", r.shape}, {"device", prop.name},
                     {"date", date}, {"commit", commit}});
    std::ofstream(json_path) << out.dump(2) << "\n";
    std::printf("wrote %s (%zu figures)%s\n", json_path.c_str(), rows.size(), valid ? "" : "; VALIDATION FAILED");
    return valid ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_bench: %s\n", e.what());
    return 1;
  }
}
