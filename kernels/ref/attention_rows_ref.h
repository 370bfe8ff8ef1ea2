#pragma once
// Plain C++ reference for decode_attention_rows (kernels/attention_decode_rows.h): a step in its
// one-row form (entry s = one query row, context = its position + 1, its sequence's block-table
// row or base slot) grouped into sequences by `spans`. Each row attends to its own context, so the
// result is attention_ref over the one-row entries; the spans are checked, as the kernel trusts them.
#include <cstdint>

#include "kernels/ref/attention_ref.h"

namespace servelab::kernels {

/// Throws std::invalid_argument naming the first entry where `spans` does not describe sequences
/// of consecutive rows: spans[s] = R > 0 needs R <= max_rows, entries s - R + 1 .. s - 1 at spans 0
/// with contexts context_lens[s] - R + 1 .., and every entry covered by exactly one sequence.
void check_decode_row_spans(const int32_t* spans, const int32_t* context_lens, int n_entries, int max_rows);

/// decode_attention_rows on the host: check_decode_row_spans, then attention_ref over the entries
/// (a.n_seqs entries; a.query_start null means entry s is row s).
void attention_rows_ref(const AttentionRefArgs& a, const int32_t* spans, int max_rows);

}  // namespace servelab::kernels
