#pragma once
// How the engine applies structured output's token masks (EngineConfig::structured_output,
// scenario `engine.structured_output`). A plain header: the scenario includes it without the engine.

namespace servelab {

/// Structured output in the engine (requests with a TokenConstraint; issue 30, item 3).
struct StructuredOutputConfig {
  /// Fill a step's token masks while its forward runs (Step::fill_masks, called by the backend
  /// once the forward is launched), not before the step on the engine's thread. Same tokens
  /// either way; false is the old path, kept to measure the difference.
  bool overlap_masks = true;
  /// Jump-forward: when a constrained request's grammar allows exactly one continuation string,
  /// its tokens (TokenConstraint::forced_tokens) are appended without a forward; their K/V is
  /// computed in the next step like a prefill chunk. Continuous batching only.
  bool jump_forward = false;
};

}  // namespace servelab
