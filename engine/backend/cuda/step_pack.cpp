#include "engine/backend/cuda/step_pack.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace servelab::cuda {
namespace {

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

PackedLayout make_layout(int rows, int tokens, int seqs, int stride, bool paged, int samples,
                         const BlockTableStep* tables, bool spans) {
  using kernels::StepExtent;
  using kernels::StepTravel;
  const bool persistent = paged && tables != nullptr;
  PackedLayout l;
  l.paged = paged;
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
  // The table's packed arrays in its order (persistent tables send rows + changes instead of
  // block_tables), then the persistent-table extras; the changes go last, so a bucket's offsets
  // do not depend on how many there are.
#define SERVELAB_LAYOUT(name, type, extent, travel, pad, pad_value)                                  \
  if (StepTravel::travel == StepTravel::packed) l.name = take(sizeof(type) * l.count(StepExtent::extent));
  SERVELAB_STEP_FIELDS(SERVELAB_LAYOUT)
#undef SERVELAB_LAYOUT
  l.table_rows = take(persistent ? sizeof(int32_t) * seqs : 0);
  l.update_count = take(persistent ? sizeof(int32_t) : 0);
  l.has_row_spans = spans;
  l.row_spans = take(spans ? sizeof(int32_t) * seqs : 0);
  l.updates = take(sizeof(kernels::BlockTableUpdate) * l.n_updates);
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

/// Copies v to dst and pads it to `count` entries as `pad` says.
template <typename T>
void pack_array(uint8_t* dst, const std::vector<T>& v, size_t count, kernels::StepPad pad, T pad_value) {
  if (v.size() > count) throw std::logic_error("pack_step: an array holds more entries than its layout");
  T* p = reinterpret_cast<T*>(dst);
  if (!v.empty()) std::memcpy(p, v.data(), v.size() * sizeof(T));
  for (size_t i = v.size(); i < count; ++i) {
    switch (pad) {
      case kernels::StepPad::running: p[i] = i == 0 ? T(0) : static_cast<T>(p[i - 1] + T(1)); break;
      case kernels::StepPad::iota: p[i] = static_cast<T>(i); break;
      default: p[i] = pad_value; break;
    }
  }
}

}  // namespace

size_t PackedLayout::count(kernels::StepExtent extent) const {
  using kernels::StepExtent;
  switch (extent) {
    case StepExtent::rows:
    case StepExtent::opt_rows: return size_t(n_rows);
    case StepExtent::tokens: return size_t(n_tokens);
    case StepExtent::seqs: return size_t(n_seqs);
    case StepExtent::seq_bounds: return size_t(n_seqs) + 1;
    case StepExtent::table: return paged && !persistent_tables ? size_t(n_seqs) * table_stride : 0;
    case StepExtent::naive_seqs: return paged ? 0 : size_t(n_seqs);
    case StepExtent::samples: return size_t(n_samples);
    case StepExtent::masks: return 0;  // masks upload on their own
    case StepExtent::dists: return 0;  // draft distributions upload on their own (CudaBackend: draft_q)
  }
  return 0;
}

PackedLayout compact_layout(const Step& plan, const BlockTableStep* tables, const std::vector<int32_t>* spans) {
  const kernels::StepInput& in = plan.in;
  return make_layout(plan.n_rows(), in.n_tokens(), in.n_seqs(), in.block_table_stride,
                     in.kv_kind == kernels::KvLayoutKind::paged, in.n_samples(), tables, spans != nullptr);
}

bool bucketable(const Step& plan) {
  const kernels::StepInput& in = plan.in;
  if (!in.decode_only || plan.n_padding != 0 || in.n_samples() != in.n_seqs() || !in.mask_words.empty()) return false;
  for (int i = 0; i < in.n_samples(); ++i)
    if (in.sample_rows[i] != i) return false;
  return true;
}

PackedLayout bucket_layout(const Step& plan, int bucket, int table_stride, const BlockTableStep* tables,
                           const std::vector<int32_t>* spans) {
  const kernels::StepInput& in = plan.in;
  if (!bucketable(plan)) throw std::logic_error("bucket_layout: the plan is not a plain decode step");
  if (bucket < in.n_seqs()) throw std::logic_error("bucket_layout: bucket smaller than the batch");
  const bool paged = in.kv_kind == kernels::KvLayoutKind::paged;
  if (paged && !tables && table_stride < in.block_table_stride) throw std::logic_error("bucket_layout: stride too small");
  return make_layout(bucket, bucket, bucket, table_stride, paged, bucket, tables, spans != nullptr);
}

void pack_step(const Step& plan, const PackedLayout& l, uint8_t* out, const BlockTableStep* tables,
               const std::vector<int32_t>* spans) {
  using kernels::StepExtent;
  using kernels::StepPad;
  using kernels::StepTravel;
  const kernels::StepInput& in = plan.in;
  // Each packed array: the host's entries, then padding up to the layout's count.
#define SERVELAB_PACK(name, type, extent, travel, pad, pad_value)                                     \
  if (StepTravel::travel == StepTravel::packed && StepPad::pad != StepPad::table)                      \
    pack_array(out + l.name, in.name, l.count(StepExtent::extent), StepPad::pad, static_cast<type>(pad_value));
  SERVELAB_STEP_FIELDS(SERVELAB_PACK)
#undef SERVELAB_PACK
  const int S = in.n_seqs();
  if (l.has_row_spans) {
    if (!spans || spans->size() != size_t(S)) throw std::logic_error("pack_step: the row spans differ from the layout's");
    put(out, l.row_spans, *spans);
    std::fill(at<int32_t>(out, l.row_spans) + S, at<int32_t>(out, l.row_spans) + l.n_seqs, 1);  // padding: one row each
  }
  if (l.persistent_tables) {
    if (!tables || tables->rows.size() != size_t(S) || tables->updates.size() != size_t(l.n_updates))
      throw std::logic_error("pack_step: the block-table step differs from the layout's");
    put(out, l.table_rows, tables->rows);
    std::fill(at<int32_t>(out, l.table_rows) + S, at<int32_t>(out, l.table_rows) + l.n_seqs, 0);  // reserved zero row
    *at<int32_t>(out, l.update_count) = l.n_updates;
    put(out, l.updates, tables->updates);
  } else if (l.paged) {
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
  }
}

}  // namespace servelab::cuda
