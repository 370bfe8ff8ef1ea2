#include "engine/backend/cuda/verify_rows.h"

#include <algorithm>
#include <stdexcept>

namespace servelab::cuda {

int max_query_rows(const kernels::StepInput& in) {
  int m = 0;
  for (int s = 0; s < in.n_seqs(); ++s) m = std::max(m, in.query_start[s + 1] - in.query_start[s]);
  return m;
}

bool verification_as_decode_ok(const kernels::StepInput& in) {
  if (in.decode_only || in.n_seqs() == 0 || !in.mask_words.empty()) return false;
  if (in.n_samples() != in.n_tokens()) return false;
  for (int i = 0; i < in.n_samples(); ++i)
    if (in.sample_rows[i] != i) return false;
  for (int s = 0; s < in.n_seqs(); ++s) {
    const int first = in.query_start[s], last = in.query_start[s + 1] - 1;
    if (last < first || in.positions[last] != in.context_lens[s] - 1) return false;
    for (int r = first; r < last; ++r)
      if (in.positions[r + 1] != in.positions[r] + 1) return false;
  }
  return true;
}

void verification_as_decode(const kernels::StepInput& in, kernels::StepInput& out, std::vector<int32_t>* seq_of_row) {
  if (!verification_as_decode_ok(in))
    throw std::invalid_argument("verification_as_decode: the step is not verification-shaped");
  const bool paged = in.kv_kind == kernels::KvLayoutKind::paged;
  const int n = in.n_tokens();
  const size_t stride = size_t(in.block_table_stride);
  // Per-row and per-draw arrays keep their order; the per-sequence ones are rebuilt below.
#define SERVELAB_VERIFY_COPY(name, type, extent, travel, pad, pad_value) out.name = in.name;
  SERVELAB_STEP_FIELDS(SERVELAB_VERIFY_COPY)
#undef SERVELAB_VERIFY_COPY
  out.kv_kind = in.kv_kind;
  out.block_size = in.block_size;
  out.block_table_stride = in.block_table_stride;
  out.mask_words_per_row = in.mask_words_per_row;
  out.late_masks = in.late_masks;
  out.decode_only = true;
  out.query_start.resize(size_t(n) + 1);
  out.context_lens.resize(size_t(n));
  out.seq_ids.resize(in.seq_ids.empty() ? 0 : size_t(n));
  out.block_tables.resize(paged ? size_t(n) * stride : 0);
  out.base_slots.resize(paged ? 0 : size_t(n));
  if (seq_of_row) seq_of_row->resize(size_t(n));
  for (int s = 0; s < in.n_seqs(); ++s)
    for (int r = in.query_start[s]; r < in.query_start[s + 1]; ++r) {
      out.query_start[size_t(r)] = r;
      out.context_lens[size_t(r)] = in.positions[size_t(r)] + 1;
      if (!in.seq_ids.empty()) out.seq_ids[size_t(r)] = in.seq_ids[size_t(s)];
      if (paged)
        std::copy(in.block_tables.begin() + ptrdiff_t(size_t(s) * stride),
                  in.block_tables.begin() + ptrdiff_t(size_t(s + 1) * stride),
                  out.block_tables.begin() + ptrdiff_t(size_t(r) * stride));
      else
        out.base_slots[size_t(r)] = in.base_slots[size_t(s)];
      if (seq_of_row) (*seq_of_row)[size_t(r)] = s;
    }
  out.query_start[size_t(n)] = n;
}

bool plan_verification_as_decode(const Step& step, Step& flat, BlockTableStep* tables, std::vector<int32_t>* spans) {
  if (!verification_as_decode_ok(step.in)) return false;
  std::vector<int32_t> seq_of_row;
  verification_as_decode(step.in, flat.in, &seq_of_row);
  flat.n_padding = step.n_padding;
  flat.want_logprobs = step.want_logprobs;
  flat.want_draw_probs = step.want_draw_probs;
  flat.fill_masks = step.fill_masks;
  if (tables) {
    if (tables->rows.size() != size_t(step.in.n_seqs()))
      throw std::logic_error("plan_verification_as_decode: the block-table plan is not this step's");
    std::vector<int32_t> rows(seq_of_row.size());
    for (size_t r = 0; r < rows.size(); ++r) rows[r] = tables->rows[size_t(seq_of_row[r])];
    tables->rows = std::move(rows);
  }
  if (spans) {
    spans->assign(seq_of_row.size(), 0);
    for (int s = 0; s < step.in.n_seqs(); ++s) {
      const int last = step.in.query_start[s + 1] - 1;
      (*spans)[size_t(last)] = last - step.in.query_start[s] + 1;
    }
  }
  return true;
}

}  // namespace servelab::cuda
