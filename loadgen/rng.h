#pragma once
// Rng: the load generator's random numbers. Our own generator and samplers (xoshiro256** seeded
// by splitmix64; Box–Muller normals; Marsaglia–Tsang gammas) rather than <random>'s
// distributions, whose outputs differ between standard libraries: a plan must be the same on
// every platform for the same seed.
#include <cstddef>
#include <cstdint>

namespace servelab {

/// Independent random streams of one plan. Each stream is seeded from (scenario seed, stream,
/// index), so e.g. changing the request rate, which reshapes arrivals, leaves lengths and token
/// ids exactly as they were.
enum class RngStream : uint64_t {
  arrivals = 1,
  prompt_lengths = 2,  ///< one draw per request, in plan order
  tokens = 3,          ///< indexed by request id: request i's token ids depend only on (seed, i)
  shared_prefix = 4,
  dataset_order = 5,
  output_lengths = 6,  ///< apart from prompt lengths, so changing one distribution keeps the other
  prefix_groups = 7,   ///< indexed by group: group g's system-prompt token ids
  prefix_group_choice = 8,  ///< one draw per request: which prefix group it belongs to
  sessions = 9,        ///< one draw per session: its number of turns
  lora_choice = 10,    ///< indexed by request (or session): which LoRA adapter it names
  copied_spans = 11,   ///< indexed by request: whether its prompt copies a span, and its edits
};

/// xoshiro256**: small, fast, statistically strong, fully specified.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  /// The generator for one stream of a scenario seed (index: request id, or 0).
  static Rng stream(uint64_t seed, RngStream stream, uint64_t index = 0);

  uint64_t next_u64();
  /// Uniform in [0, 1), 53 random bits.
  double uniform();
  /// Uniform in (0, 1]: safe under log().
  double uniform_open0() { return 1.0 - uniform(); }
  /// Uniform integer in [lo, hi] (inclusive), unbiased (rejection).
  int64_t uniform_int(int64_t lo, int64_t hi);
  /// n draws of uniform_int(lo, hi) into out, the same values n calls give: the rejection bound
  /// and the remainder's divisor are worked out once (a prompt's token ids: hundreds of draws
  /// with one range, where two 64-bit divisions a draw were most of the cost). lo, hi within int32.
  void uniform_ints(int64_t lo, int64_t hi, int32_t* out, size_t n);
  /// Standard normal N(0, 1) (Box–Muller; the second value of a pair is kept for the next call).
  double normal();
  /// Exponential with mean 1.
  double exponential();
  /// Gamma(shape, scale 1): mean = shape, variance = shape. shape > 0.
  double gamma(double shape);

 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace servelab
