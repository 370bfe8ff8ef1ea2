#pragma once
// Verification steps of speculative decoding as decode steps (plain C++, tested on the CPU).
//
// A verification step gives a sequence k + 1 query rows: its last accepted token and k drafts, at
// consecutive positions ending at its context length, each row drawn once. Row j of them attends
// to the positions before it and itself, exactly what a one-row decode of a sequence whose context
// ends at row j's position computes. So the step can run as a plain decode step of one-row
// "sequences", one per row, each reading its owner's block-table row (or naive region) up to its
// own position: the decode attention kernel and the decode CUDA graphs serve it, instead of the
// prefill attention path run eagerly. Every per-row and per-draw array keeps its order, so the
// draws (and the sampled tokens) are the step's own.
#include <cstdint>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/block_table.h"

namespace servelab::cuda {

/// The most query rows any sequence of `in` has (a verification step's k + 1).
int max_query_rows(const kernels::StepInput& in);

/// True when `in` is a verification-shaped step that is not already one row per sequence: every
/// sequence's rows sit at consecutive positions ending at its context length - 1, every row is
/// drawn exactly once and in row order (sample_rows = 0, 1, ...), and no mask travels in
/// mask_words (late masks are fine: their draws keep their mask_index).
bool verification_as_decode_ok(const kernels::StepInput& in);

/// Writes into `out` the step as one-row sequences (see the top of this file): query_start 0..n,
/// context_lens = position + 1, seq_ids, block-table rows and naive base slots repeated for each
/// row of their sequence, decode_only set; every other array copied. `seq_of_row` (optional) gets
/// each row's original sequence. Throws std::invalid_argument unless verification_as_decode_ok(in).
void verification_as_decode(const kernels::StepInput& in, kernels::StepInput& out,
                            std::vector<int32_t>* seq_of_row = nullptr);

/// The same for a whole backend step and its planned persistent block tables: `flat` gets the
/// step as one-row sequences (n_padding, logprobs and the late-mask filler carried over) and
/// `tables->rows` (if given) is repeated per row to match. `spans` (if given) gets, per one-row
/// sequence, how its rows group into the step's sequences (decode_attention_rows,
/// kernels/attention_decode_rows.h): the last row of a sequence of R rows R, the rows before it 0.
/// Returns false, changing nothing, when the step is not verification-shaped
/// (verification_as_decode_ok).
bool plan_verification_as_decode(const Step& step, Step& flat, BlockTableStep* tables,
                                 std::vector<int32_t>* spans = nullptr);

}  // namespace servelab::cuda
