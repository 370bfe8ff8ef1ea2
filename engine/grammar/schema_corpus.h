#pragma once
// A deterministic corpus of real-world-like JSON schemas (JSONSchemaBench-like shapes: API
// payloads, tool-call arguments, configs, nested objects, enums, arrays, formats, patterns,
// ranges, nullable unions, $defs with $ref, recursive trees), generated from a seed. Used by the
// property tests, bench/grammar_bench.cpp and the load generator's built-in schema set
// (workload.structured_output, loadgen/structured_output.h).
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace servelab::grammar {

/// n schemas; the same seed gives the same schemas.
std::vector<nlohmann::ordered_json> make_schema_corpus(int n, uint64_t seed);

}  // namespace servelab::grammar
