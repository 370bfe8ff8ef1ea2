#pragma once
// ShapeDecoder: what a backend that reads no rows (the sim) does with a step of plain decodes,
// offered to the engine so that such a step costs one walk over its sequences rather than a Step
// built, checked, drawn from and measured in four (Backend::shape_decoder). A plain decode: one
// row at the end of its sequence, one draw, no drafts, no token mask.
#include <cstdint>
#include <span>

#include "engine/backend/cost_model.h"
#include "engine/request.h"

namespace servelab {

class ShapeDecoder {
 public:
  virtual ~ShapeDecoder() = default;
  /// The token a plain draw with these keys takes (Step's seed, seq_key, sample_position): what
  /// execute() draws for it.
  virtual TokenId draw(uint64_t seed, uint64_t seq_key, int sample_position) const = 0;
  /// draw() in two parts, for a caller that keeps a key per sequence: draw(seed, seq_key, p) ==
  /// draw_at(sequence_key(seed, seq_key), p).
  virtual uint64_t sequence_key(uint64_t seed, uint64_t seq_key) const = 0;
  /// One plain draw: its sequence's key (sequence_key) and its sample_position.
  struct DrawKey {
    uint64_t sequence_key;
    int sample_position;
  };
  /// The draw of each key in order, into out[0, keys.size()): a step's draws in one call.
  virtual void draw_all(std::span<const DrawKey> keys, TokenId* out) const = 0;
  /// The step's predicted seconds from its shape, as execute() prices a step of that shape (what
  /// execute() charges with it, swaps, copies and drafting since the last step, is charged here).
  virtual double price(StepShape shape) = 0;
};

/// StepShape::of for a step of plain decodes, one sequence at a time in step order: the same
/// sums in the same order as StepShape::of's walk over such a step, so the same bits.
struct DecodeShape {
  StepShape shape;
  /// A sequence whose context after the step is `context` (its one row at context - 1).
  void add(int64_t context) {
    const int64_t begin = context - 1;
    const double pairs = static_cast<double>(begin) + 1.0;  // n·begin + n(n + 1)/2 at n = 1
    shape.n_tokens += 1;
    shape.n_sampled += 1;  // each draw its own row
    shape.n_seqs += 1;
    shape.sum_context += context;
    shape.attention_pairs += pairs;
    if (begin > 0) shape.decode_context += static_cast<double>(context);
    else shape.prefill_pairs += pairs;
    if (context > shape.max_context) shape.max_context = context;
  }
  /// The shape with the step's padding rows.
  StepShape finish(int n_padding) const {
    StepShape s = shape;
    s.n_padding_tokens = n_padding;
    s.attention_pairs += static_cast<double>(n_padding) * static_cast<double>(s.max_context);
    return s;
  }
};

}  // namespace servelab
