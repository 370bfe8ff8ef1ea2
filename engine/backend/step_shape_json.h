#pragma once
// A step's shape as a servelab.profile/2 file writes it (each grid sample, the sustained-load
// probe's points): n_seqs, n_tokens, n_padding_tokens, n_sampled, sum_context, max_context,
// prefill_pairs, decode_context, attention_pairs, and verify_rows / verify_pairs when it verifies
// drafts. One writer and one reader, so the two stay in step.
#include <string>

#include <nlohmann/json.hpp>

#include "engine/backend/cost_model.h"

namespace servelab {

nlohmann::ordered_json step_shape_json(const StepShape& shape);

/// The shape of object `o` (written by step_shape_json). Throws std::runtime_error starting with
/// `where` for a missing number or verification fields out of range.
StepShape step_shape_from_json(const nlohmann::json& o, const std::string& where);

}  // namespace servelab
