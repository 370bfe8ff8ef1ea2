// Decode attention over the paged or naive KV cache, FlashDecoding-style, in one launch.
//
// Grid (n_kv_heads * n_sub, n_seqs, n_splits): a block owns one KV head of one sequence over one
// split of its context and computes all the query heads that share that KV head (up to G at a
// time), so K and V are read from memory once per KV head, not once per query head. With several
// splits, each block stores a partial (normalized output, max and sum in log2 units) and the last
// block of a (sequence, KV head) to finish merges them in split order (attention_decode_common.cuh).
// Both kernels are launched with programmatic dependent launch (launch_pdl, common.cuh) where the
// step's kernels use it: a block waits at the top for the kernel that wrote q and the step's K/V,
// and the next kernel (the O product, streaming its weights) may start while attention runs.
//
// Two kernels: GQA (group >= 2) at head_dim 64/128 runs on tensor cores (attention_decode_mma.cuh);
// otherwise (and with DecodeAttentionArgs::tensor_cores off) this file's CUDA-core kernel: a
// "lane group" of HD / 8 threads holds one position's K (and V) row as 16-byte vectors, one vector
// per thread; the block walks kThreads / (HD / 8) positions at once, U deep, loading all U rows
// before using any (several independent 16-byte loads in flight per thread). Each lane group keeps
// its own online-softmax state (max, sum, output row) in registers; the groups are merged through
// shared memory at the end.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cmath>
#include <tuple>
#include <utility>
#include <stdexcept>
#include <string>

#include "kernels/attention.h"
#include "kernels/attention_decode_common.cuh"
#include "kernels/attention_decode_mma.cuh"
#include "kernels/common.cuh"

namespace servelab::kernels {
namespace {

using decode::kLog2e;
using decode::kThreads;
using decode::kv_slot;
using DecodeParams = decode::Params;

template <typename T, int HD, int G>
__global__ void __launch_bounds__(kThreads, G == 1 ? 7 : G <= 4 ? 4 : 2) decode_split_kernel(const DecodeParams p) {
  constexpr int kTpt = HD / 8;            // threads per position (one 16-byte vector each)
  constexpr int kLg = kThreads / kTpt;    // positions per pass
  constexpr int kU = G >= 8 ? 2 : 4;      // passes loaded before use
  __shared__ float sm_m[kLg][G], sm_l[kLg][G];
  __shared__ __align__(16) float sm_o[kLg][G][HD];

  pdl_wait();  // q and this step's K/V are the previous kernel's (RoPE/KV write, or the q|k|v gemv)
  if (p.pdl_trigger == 1) pdl_launch_dependents();
  const int kvh = blockIdx.x / p.n_sub, sub = blockIdx.x % p.n_sub, s = blockIdx.y, split = blockIdx.z;
  const int ctx = p.context_lens[s];
  const int t_begin = split * p.split_len;
  if (t_begin >= ctx) return;  // uniform over the block
  const int t_end = min(ctx, t_begin + p.split_len);
  const int lg = threadIdx.x / kTpt, c = threadIdx.x % kTpt;
  const int row = p.query_start ? p.query_start[s + 1] - 1 : s;
  const int64_t table_row = p.kv.kind == KvLayoutKind::paged ? p.kv.table_row(s) : int64_t(s);

  float qf[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int h = sub * G + g;
    if (h < p.group) {
      const T* qp = static_cast<const T*>(p.q) + row * p.q_row_stride + int64_t(kvh * p.group + h) * HD + c * 8;
      unpack8<T>(*reinterpret_cast<const Vec8*>(qp), qf[g]);
#pragma unroll
      for (int j = 0; j < 8; ++j) qf[g][j] *= p.scale_log2;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) qf[g][j] = 0.0f;
    }
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -1e30f;  // finite: exp2(m_old - m_new) stays 1, not NaN, before the first real score
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[g][j] = 0.0f;
  }
  const char* kbase = static_cast<const char*>(p.k_cache);
  const char* vbase = static_cast<const char*>(p.v_cache);
  const int64_t col = (int64_t(kvh) * HD + c * 8) * int64_t(sizeof(T));

  // Slots of the first pass; each pass then looks up the next pass's slots (block-table reads)
  // while its own K/V loads are in flight, so the table latency is off the critical path.
  int64_t slot[kU];
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int t = t_begin + u * kLg + lg;
    slot[u] = t < t_end ? kv_slot(p, s, table_row, t) : 0;
  }
  for (int base = t_begin; base < t_end; base += kLg * kU) {  // uniform trip count: shuffles are safe
    Vec8 kv_k[kU], kv_v[kU];
    bool ok[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = base + u * kLg + lg;
      ok[u] = t < t_end;
      if (ok[u]) {
        const int64_t off = slot[u] * p.kv_row * int64_t(sizeof(T)) + col;
        kv_k[u] = load_stream(kbase + off);
        kv_v[u] = load_stream(vbase + off);
      } else {
        kv_k[u] = kv_v[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int t = base + kLg * kU + u * kLg + lg;
      slot[u] = t < t_end ? kv_slot(p, s, table_row, t) : 0;
    }
    float sc[kU][G];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float kf[8];
      unpack8<T>(kv_k[u], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) d = fmaf(qf[g][j], kf[j], d);
#pragma unroll
        for (int o = kTpt / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        sc[u][g] = ok[u] ? d : -INFINITY;
      }
    }
    decode::online_softmax_pass<T, kU, G>(sc, kv_v, m, l, acc);
  }

  // Merge the lane groups.
  decode::store_lane_group<kLg, G, HD>(sm_m, sm_l, sm_o, lg, c, m, l, acc);
  __syncthreads();
  if (p.pdl_trigger == 2) pdl_launch_dependents();
  decode::finish_block<T, HD, G, kLg, HD>(p, sm_m, sm_l, &sm_o[0][0][0], s, row, kvh, sub, split, ctx);
}

constexpr int kMmaSteps = 2;  // 16-position steps per warp per pass on the tensor-core path

/// The tensor-core kernel launched in clusters of (1, 1, grid.z): one per (sequence, block column).
/// Sizes above 8 are non-portable: the attribute is set once per kernel and device; when it cannot
/// place such a cluster (cudaOccupancyMaxActiveClusters says 0) this returns false and launches
/// nothing.
template <typename T, int HD, bool kPipe>
bool launch_cluster(const DecodeParams& p, dim3 grid, cudaStream_t stream, bool probe_only) {
  auto kernel = decode::decode_mma_kernel<T, HD, kMmaSteps, true, kPipe>;
  static std::atomic<uint64_t> attr_set{0};        // devices (bit = ordinal) whose attribute is set
  static std::atomic<int> fits[kMaxClusterSplits + 1];  // 0 unknown, 1 yes, 2 no (same GPU kind assumed)
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (!(attr_set.load(std::memory_order_acquire) & bit)) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    attr_set.fetch_or(bit, std::memory_order_acq_rel);
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = grid.z;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const int cs = int(grid.z);
  if (cs > 8 && fits[cs].load(std::memory_order_relaxed) == 0) {
    int n = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, kernel, &cfg);
    if (e != cudaSuccess) (void)cudaGetLastError();  // a size the device refuses: counted as 0
    fits[cs].store(e == cudaSuccess && n > 0 ? 1 : 2, std::memory_order_relaxed);
  }
  if (cs > 8 && fits[cs].load(std::memory_order_relaxed) != 1) return false;
  if (probe_only) return true;
  cfg.numAttrs = p.pdl_trigger != 0 && pdl_enabled() ? 2 : 1;  // PDL (common.cuh) where the step's kernels use it
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
  CUDA_CHECK_LAUNCH();
  return true;
}

/// The tensor-core kernel, with or without the load pipeline; in clusters where p.cluster (false:
/// the device cannot place them), else plainly.
template <typename T, int HD>
bool run_mma(const DecodeParams& p, bool pipe, dim3 grid, cudaStream_t stream, bool probe_only = false) {
  if (p.cluster)
    return pipe ? launch_cluster<T, HD, true>(p, grid, stream, probe_only) : launch_cluster<T, HD, false>(p, grid, stream, probe_only);
  if (probe_only) return true;
  const bool pdl = p.pdl_trigger != 0;
  if (pipe) launch_pdl_if(pdl, decode::decode_mma_kernel<T, HD, kMmaSteps, false, true>, grid, kThreads, 0, stream, p);
  else launch_pdl_if(pdl, decode::decode_mma_kernel<T, HD, kMmaSteps, false, false>, grid, kThreads, 0, stream, p);
  CUDA_CHECK_LAUNCH();
  return true;
}

template <typename T, int HD>
void launch(const DecodeParams& p, bool mma, bool pipe, int g_bucket, dim3 grid, cudaStream_t stream) {
  if constexpr (HD % 64 == 0) {
    if (mma) {
      run_mma<T, HD>(p, pipe, grid, stream);
      return;
    }
  }
  const bool pdl = p.pdl_trigger != 0;
  if (g_bucket == 1) launch_pdl_if(pdl, decode_split_kernel<T, HD, 1>, grid, kThreads, 0, stream, p);
  else if (g_bucket == 4) launch_pdl_if(pdl, decode_split_kernel<T, HD, 4>, grid, kThreads, 0, stream, p);
  else launch_pdl_if(pdl, decode_split_kernel<T, HD, 8>, grid, kThreads, 0, stream, p);
  CUDA_CHECK_LAUNCH();
}

/// Whether the device places clusters of grid.z blocks of the tensor-core kernel (always for <= 8).
template <typename T>
bool cluster_fits(int hd, const DecodeParams& p, bool pipe, dim3 grid) {
  if (grid.z <= 8) return true;
  if (hd == 64) return run_mma<T, 64>(p, pipe, grid, nullptr, true);
  return run_mma<T, 128>(p, pipe, grid, nullptr, true);
}

template <typename T>
void dispatch_hd(int hd, const DecodeParams& p, bool mma, bool pipe, int g_bucket, dim3 grid, cudaStream_t stream) {
  switch (hd) {
    case 32: return launch<T, 32>(p, mma, pipe, g_bucket, grid, stream);
    case 64: return launch<T, 64>(p, mma, pipe, g_bucket, grid, stream);
    case 128: return launch<T, 128>(p, mma, pipe, g_bucket, grid, stream);
    default: throw std::invalid_argument("decode_attention: head_dim " + std::to_string(hd) + " not built (32, 64, 128)");
  }
}

int group_bucket(int group) { return group == 1 ? 1 : group <= 4 ? 4 : 8; }

bool use_tensor_cores(const DecodeAttentionArgs& a) {
  const int group = a.shape.n_kv_heads > 0 ? a.n_heads / a.shape.n_kv_heads : 1;
  return a.tensor_cores && group >= 2 && (a.shape.head_dim == 64 || a.shape.head_dim == 128) &&
         a.shape.n_slots < (int64_t(1) << 31);
}

/// Where the counters start in a workspace of `bytes` (the last bytes / (4 (hd + 3)) ints; see
/// decode_attention_workspace_bytes), and how many there are.
std::pair<size_t, size_t> counter_region(size_t bytes, int head_dim) {
  const size_t n = bytes / (4 * size_t(head_dim + 3));
  return {bytes / 4 - n, n};  // in 4-byte units
}

}  // namespace

DecodeSplit decode_attention_split(const DecodeAttentionArgs& a, int n_sms) {
  DecodeSplit r;
  r.tensor_cores = use_tensor_cores(a);
  const int max_ctx = std::max(1, a.max_context);
  const int group = a.n_heads / a.shape.n_kv_heads;
  // Blocks per (sequence, KV head), and how many the SM holds at once (launch bounds): the
  // tensor-core kernel 2 (8 query heads a block), the CUDA-core kernel 7, 4 or 2 for group
  // buckets 1, 4, 8.
  const int per_block = r.tensor_cores ? decode::kMmaHeads : group_bucket(group);
  const int n_base = a.n_seqs * a.shape.n_kv_heads * ceil_div(group, per_block);
  // The tensor-core kernel's load pipeline pays where a block has its SM to itself (at most one
  // block per SM): b8 x GQA 4 0.90-0.96 -> 0.91-0.97 of SDPA; with two blocks per SM (b32-b256)
  // it cost ~1% (H100, the nopipe column of results/gpu/decode-attn-2026-11-24-*). A split of one
  // pass (<= 128 positions) has nothing to overlap, so it runs without (b1 x 1k x GQA 4 measured
  // 7.8 us with, 7.3 without in the cce42e8 sweep; the 0cc21cf sweep then timed one configuration
  // at 7.8 us first and 7.2 us last in its run: at that shape the difference is within the noise).
  // With pipeline_blocks_per_sm 2 (or the auto rule below, auto_two) the pipeline also runs at
  // two blocks per SM: the pipelined kernel's 252 registers (HD 128) round to 256 a thread, 32K a
  // block of 128 threads, so two blocks fill an SM's 64K.
  constexpr int kPass = (decode::kThreads / 32) * kMmaSteps * 16;
  int pipe_bps = a.pipeline_blocks_per_sm > 0 ? std::min(a.pipeline_blocks_per_sm, 2) : 1;
  auto pipeline_for = [&](int n_splits, int split_len) {
    return r.tensor_cores && a.pipeline && int64_t(n_base) * n_splits <= int64_t(n_sms) * pipe_bps && split_len > kPass;
  };
  if (a.split.fixed_split_len > 0) {
    r.split_len = a.split.fixed_split_len;
    r.n_splits = ceil_div(max_ctx, r.split_len);
    r.reduce = true;
    r.pipeline = pipeline_for(r.n_splits, r.split_len);
    return r;
  }
  const int resident = r.tensor_cores ? 2 : per_block == 1 ? 7 : per_block == 4 ? 4 : 2;
  const int64_t slots = int64_t(n_sms) * resident;
  // At least 64 positions a split, 128 (one pass of the kernel) on tensor cores: b1 x 1k x GQA 4
  // took 9.2 us in 16 splits of 64 and 7.9 us in 8 of 128 (H100, results/gpu/decode-attn-2026-11-24-*).
  const int min_len = a.split.min_split_len > 0 ? a.split.min_split_len : r.tensor_cores ? 128 : 64;
  const int most = std::min(kMaxAutoSplits, ceil_div(max_ctx, min_len));
  auto splits_of = [&](int k) {  // splits after rounding the split length up to 64 positions
    const int len = ceil_div(ceil_div(max_ctx, k), 64) * 64;
    return std::pair<int, int>(len, ceil_div(max_ctx, len));
  };
  // Two blocks per SM with the load pipeline (auto), a rule on the shape alone (sequences x KV
  // heads x head subgroups, context, SMs): where one block per SM fits exactly 2 splits per
  // (sequence, KV head) (45-66 of them on 132 SMs; merged in a cluster of 2) and two blocks per SM
  // cut splits of exactly 2 passes (129-256 positions). Measured at b8 x 1k x GQA 4 only (H100,
  // results/gpu/decode-attn-2026-11-24-h100-0054682: 1723 GB/s against 1710-1712 for one block
  // per SM, three columns of it in the same interleaved rounds); at splits of 8 or more passes
  // (b1 x 32k, b8 x 4k) two blocks per SM were 0.3-0.9% slower and at 64 passes (b8 x 32k) equal,
  // so they keep one block per SM.
  bool auto_two = false;
  if (r.tensor_cores && a.split.blocks_per_sm == 0) {
    auto fit = [&](int bps) { return int(std::max<int64_t>(1, std::min<int64_t>(int64_t(n_sms) * bps / n_base, most))); };
    const int len2 = splits_of(fit(2)).first;
    auto_two = splits_of(fit(1)).second == 2 && len2 > kPass && len2 <= 2 * kPass;
    if (auto_two && a.pipeline_blocks_per_sm == 0) pipe_bps = 2;
  }
  int k;
  if (r.tensor_cores) {
    // One block per SM (each keeps 64 KB of K/V loads in flight a pass), as many splits as fit:
    // fewer partials to merge than two per SM, and no slower at any measured shape but the auto_two
    // class above (H100, the bps1/bps2/bps2pipe columns of results/gpu/decode-attn-*).
    const int bps = a.split.blocks_per_sm > 0 ? a.split.blocks_per_sm : auto_two ? 2 : 1;
    r.blocks_per_sm = bps;
    k = int(std::max<int64_t>(1, std::min<int64_t>(int64_t(n_sms) * bps / n_base, most)));
  } else {
    // Measured on an H100 (results/gpu/kernels-*.md): about 4 blocks per SM, at least 64
    // positions a split.
    r.blocks_per_sm = a.split.blocks_per_sm > 0 ? a.split.blocks_per_sm : 4;
    k = std::max(1, std::min(ceil_div(int64_t(n_sms) * (a.split.blocks_per_sm > 0 ? a.split.blocks_per_sm : 4), n_base), most));
  }
  // A grid of 1-1.6 waves of resident blocks leaves a long tail (0.73-0.87 of SDPA at batch 32
  // without GQA, batch 8 at 32k with GQA 4, H100): cut it into >= 2.5 waves instead, and on until
  // the last wave is >= 3/4 full or there are >= 6 (batch 32 without GQA: 0.93 of SDPA with 3.3
  // waves, 0.98 with 8.9).
  if (a.split.blocks_per_sm == 0) {
    auto waves = [&](int kk) { return double(n_base) * splits_of(kk).second / double(slots); };
    if (waves(k) > 1.0 && waves(k) < 1.6)
      while (k < most && (waves(k) < 2.5 || (waves(k) < 6.0 && waves(k) - std::floor(waves(k)) < 0.75))) ++k;
  }
  std::tie(r.split_len, r.n_splits) = splits_of(k);
  // 2..max_cluster_splits splits on tensor cores, one block per SM at most: merge in a cluster.
  // Not more blocks than SMs: clusters of 4 over 256 blocks (two per SM) ran at 0.71-0.84 of
  // SDPA where the workspace merge ran at 0.90-0.96 (b8 x GQA 4, bps2 columns, H100); clusters of
  // 16 were 2-3% slower than the workspace merge of the same 16 splits (b1 x 4k / 32k x GQA 4).
  const int mc = std::min(a.max_cluster_splits, kMaxClusterSplits);
  r.cluster = r.tensor_cores && r.n_splits >= 2 && r.n_splits <= mc && int64_t(n_base) * r.n_splits <= n_sms;
  r.reduce = r.n_splits > 1 && !r.cluster;
  r.pipeline = pipeline_for(r.n_splits, r.split_len);
  return r;
}

int decode_mma_resident_blocks(ScalarType dtype, int head_dim, bool pipeline) {
  if (head_dim != 64 && head_dim != 128)
    throw std::invalid_argument("decode_mma_resident_blocks: head_dim " + std::to_string(head_dim) + " (64 or 128)");
  int n = 0;
  auto count = [&](auto kernel) { CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0)); };
  auto pick = [&](auto tag) {
    using T = decltype(tag);
    if (head_dim == 64) pipeline ? count(decode::decode_mma_kernel<T, 64, kMmaSteps, false, true>)
                                 : count(decode::decode_mma_kernel<T, 64, kMmaSteps, false, false>);
    else pipeline ? count(decode::decode_mma_kernel<T, 128, kMmaSteps, false, true>)
                  : count(decode::decode_mma_kernel<T, 128, kMmaSteps, false, false>);
  };
  if (dtype == ScalarType::bf16) {
    pick(__nv_bfloat16{});
  } else {
#if defined(SERVELAB_KERNELS_FP16)
    pick(__half{});
#else
    throw std::invalid_argument("decode_mma_resident_blocks: fp16 not built");
#endif
  }
  return n;
}

size_t decode_attention_workspace_bytes(int n_seqs, int n_heads, int head_dim, int n_splits) {
  return size_t(n_seqs) * n_heads * n_splits * (head_dim + 3) * sizeof(float);
}

void decode_attention(const DecodeAttentionArgs& a, cudaStream_t stream) {
  if (a.n_seqs == 0) return;
  if (a.shape.n_kv_heads <= 0 || a.n_heads % a.shape.n_kv_heads != 0)
    throw std::invalid_argument("decode_attention: n_heads must be a multiple of n_kv_heads");
  if (a.split.fixed_split_len < 0 || a.split.fixed_split_len % 16 != 0)
    throw std::invalid_argument("decode_attention: fixed_split_len must be a multiple of 16");
  if (a.split.min_split_len < 0 || a.split.blocks_per_sm < 0)
    throw std::invalid_argument("decode_attention: min_split_len and blocks_per_sm must be >= 0");
  if (a.pipeline_blocks_per_sm < 0 || a.pipeline_blocks_per_sm > 2)
    throw std::invalid_argument("decode_attention: pipeline_blocks_per_sm must be 0, 1 or 2 (got " +
                                std::to_string(a.pipeline_blocks_per_sm) + ")");
  int device = 0, n_sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, device));
  DecodeSplit split = decode_attention_split(a, n_sms);
  const int hd = a.shape.head_dim, group = a.n_heads / a.shape.n_kv_heads, gb = group_bucket(group);
  DecodeParams p{};
  p.q = a.q;
  p.q_row_stride = a.q_row_stride;
  p.query_start = a.query_start;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.kv_row = a.shape.row_elems();
  p.n_heads = a.n_heads;
  p.group = group;
  p.n_sub = ceil_div(group, split.tensor_cores ? decode::kMmaHeads : gb);
  p.context_lens = a.context_lens;
  p.kv = a.kv;
  p.scale_log2 = a.scale * kLog2e;
  p.out = a.out;
  p.out_row_stride = a.out_row_stride;
  p.split_len = split.split_len;
  p.max_splits = split.n_splits;
  p.partial = split.reduce;
  p.cluster = split.cluster;
  p.release_arrive = a.release_arrive;
  if (a.pdl < 0 || a.pdl > 2) throw std::invalid_argument("decode_attention: pdl must be 0, 1 or 2");
  p.pdl_trigger = a.pdl;
  p.bs_shift = -1;
  if (a.kv.kind == KvLayoutKind::paged) {
    if (a.kv.block_size < 1) throw std::invalid_argument("decode_attention: block_size must be >= 1");
    if ((a.kv.block_size & (a.kv.block_size - 1)) == 0) p.bs_shift = __builtin_ctz(unsigned(a.kv.block_size));
  }
  const dim3 grid(a.shape.n_kv_heads * p.n_sub, a.n_seqs, split.n_splits);
  if (split.cluster) {  // a device that cannot place the cluster merges through the workspace
    bool fits = true;
    if (a.dtype == ScalarType::bf16) fits = cluster_fits<__nv_bfloat16>(hd, p, split.pipeline, grid);
#if defined(SERVELAB_KERNELS_FP16)
    else fits = cluster_fits<__half>(hd, p, split.pipeline, grid);
#endif
    if (!fits) {
      split.cluster = false;
      split.reduce = true;
      p.cluster = false;
      p.partial = true;
    }
  }
  if (split.reduce) {
    const size_t need = decode_attention_workspace_bytes(a.n_seqs, a.n_heads, hd, split.n_splits);
    const auto [ctr_at, n_ctr] = counter_region(a.workspace_bytes, hd);
    const size_t partial_floats = size_t(a.n_seqs) * a.n_heads * split.n_splits * (hd + 2);
    if (a.workspace == nullptr || a.workspace_bytes < need || partial_floats > ctr_at ||
        size_t(a.n_seqs) * grid.x > n_ctr)
      throw std::invalid_argument("decode_attention: workspace of " + std::to_string(a.workspace_bytes) +
                                  " bytes, needs " + std::to_string(need));
    p.ws_o = a.workspace;
    p.ws_ml = a.workspace + size_t(a.n_seqs) * a.n_heads * split.n_splits * hd;
    p.counters = reinterpret_cast<int32_t*>(a.workspace) + ctr_at;
  }
  if (a.dtype == ScalarType::bf16) {
    dispatch_hd<__nv_bfloat16>(hd, p, split.tensor_cores, split.pipeline, gb, grid, stream);
  } else {
#if defined(SERVELAB_KERNELS_FP16)
    dispatch_hd<__half>(hd, p, split.tensor_cores, split.pipeline, gb, grid, stream);
#else
    throw std::invalid_argument("decode_attention: fp16 not built (configure with -DSERVELAB_KERNELS_FP16=ON)");
#endif
  }
}

}  // namespace servelab::kernels
