#pragma once
// The contexts of a profile's spread decode point (ProfileOptions::spread_decodes): b sequences
// whose mean context is c, in one of two shapes. Plain C++, no backend.
#include <string>
#include <vector>

namespace servelab {

/// even: evenly over [c/2, 3c/2] (the longest 1.5 c). exponential: the b quantiles of an
/// exponential distribution scaled to mean c (the longest about c · ln 2b: 5.5 c at 128
/// sequences), the long tail of serving's batches, whose longest sequence sits at 3-4× the mean on
/// ShareGPT-like chat (results/gpu/tp/2026-11-30-h200x2-continuous-1000/residuals_run3.txt).
enum class SpreadShape { even, exponential };
const char* to_string(SpreadShape s);
/// "even" | "exponential"; throws std::invalid_argument listing them.
SpreadShape parse_spread_shape(const std::string& s);

/// b >= 2 contexts (each >= 1), ascending, whose mean is c within rounding (c >= 4).
std::vector<int> spread_contexts(int c, int b, SpreadShape shape);

}  // namespace servelab
