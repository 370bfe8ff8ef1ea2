// kernel_bench's paged decode attention part (paged_decode_attn): every shape of the grid
// (contexts 1k-32k, batches 1-256, GQA 1 and 4) on the engine's own block tables, with the columns
// the defaults were chosen from, each row beside the copy ceiling.
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
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "bench/kernels/bench_timing.h"
#include "bench/kernels/bench_util.cuh"
#include "bench/kernels/paged_batch.cuh"

namespace servelab::kernels::bench {

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

}  // namespace

void bench_decode_attention(const DecodeBenchOptions& opt, std::mt19937_64& rng, int n_sms, int64_t l2, double copy_gbs) {
  const bool quick = opt.quick, sweep = opt.sweep;
  const std::string& only = opt.only;
  std::string decode_shapes = std::getenv("DECODE_SHAPES") ? std::getenv("DECODE_SHAPES") : "";
  if (!decode_shapes.empty()) decode_shapes = ";" + decode_shapes + ";";
  {
    std::printf("paged decode attention (block 16, head_dim 128):\n");
    std::printf("  tensor-core decode kernel, HD 128, resident blocks per SM: %d pipelined, %d not\n",
                decode_mma_resident_blocks(ScalarType::bf16, 128, true), decode_mma_resident_blocks(ScalarType::bf16, 128, false));
    if (!decode_shapes.empty()) std::printf("  DECODE_SHAPES: %s\n", decode_shapes.c_str());
  }
  const std::vector<int> batches = quick ? std::vector<int>{1, 32} : std::vector<int>{1, 8, 32, 128, 256};
  const std::vector<int> ctxs = quick ? std::vector<int>{4096} : std::vector<int>{1024, 4096, 32768};
  for (int group : {1, 4})
    for (int batch : batches)
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
}

}  // namespace servelab::kernels::bench
