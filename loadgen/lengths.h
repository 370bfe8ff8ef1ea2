#pragma once
// Token-length distributions for prompts and outputs.
#include <string>

#include "loadgen/rng.h"

namespace servelab {

enum class LengthDistKind { fixed, uniform, normal, lognormal, sharegpt };
const char* to_string(LengthDistKind k);  ///< "fixed", "uniform", "normal", "lognormal", "sharegpt"

/// Which side of a request a length is for (the ShareGPT-like mix differs between the two).
enum class LengthRole { prompt, output };

/// A distribution of token counts. Every draw is rounded to an integer and clamped to
/// [min, max] (sharegpt: [4, 1024] unless given). Fields a kind does not use are ignored.
///
/// - fixed: always `value`.
/// - uniform: integers in [min, max], each equally likely.
/// - normal: N(mean, std²).
/// - lognormal: exp(N(mu, sigma²)) with the lengths' own mean = `mean`; either `std` (the
///   lengths' standard deviation: sigma² = ln(1 + std²/mean²)) or `sigma` (log-space) gives the spread.
/// - sharegpt: a lognormal mix shaped like ShareGPT conversations (means ≈ 161 prompt and
///   ≈ 338 output tokens after clipping to [4, 1024]); see sharegpt_like().
struct LengthDist {
  LengthDistKind kind = LengthDistKind::fixed;
  LengthRole role = LengthRole::prompt;
  int value = 128;      ///< fixed
  int min = 1;          ///< uniform, normal, lognormal, sharegpt: lower clamp (sharegpt default 4)
  int max = 1 << 30;    ///< upper clamp (sharegpt default 1024)
  double mean = 0.0;    ///< normal, lognormal
  double std = 0.0;     ///< normal, lognormal
  double sigma = 0.0;   ///< lognormal: log-space sigma, instead of std

  /// One draw, in [lower(), upper()].
  int sample(Rng& rng) const;
  /// Smallest and largest value a draw can take.
  int lower() const;
  int upper() const;
  /// One-line description, e.g. "uniform[32, 128]" or "lognormal(mean 200, std 80) in [1, 2048]".
  std::string describe() const;
};

/// The sharegpt kind's mix, for tests and docs: prompt = 0.7·LN(median 45, σ 1.0) +
/// 0.3·LN(median 272, σ 0.9); output = LN(median 254, σ 0.85); both clipped to [4, 1024].
/// Analytic means after clipping: 161.0 and 337.9.
LengthDist sharegpt_like(LengthRole role);

}  // namespace servelab
