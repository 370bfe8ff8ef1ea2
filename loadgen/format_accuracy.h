#pragma once
// Before a run's first request: what each strategy's storage formats (`quantization:`,
// `kv_cache_dtype:`) cost in accuracy on the run's own backend — the model's unquantized weights
// and each distinct format run over the same teacher-forced streams and compared
// (engine/backend/quant_check.h's quant_check_backends). The results go into runs.json and the
// reports (analysis/format_accuracy.h). `report.accuracy_positions` (default 1024; 0 = off) sets
// how many positions.
#include <functional>
#include <map>
#include <string>

#include "analysis/format_accuracy.h"
#include "engine/backend/make_backend.h"
#include "loadgen/scenario.h"

namespace servelab {

/// By strategy label, for each strategy whose formats are not the model's own (quantized weights
/// or an FP8 KV cache); strategies sharing formats share one measurement. A sim backend (no
/// weights) or a quantized checkpoint (no unquantized reference) gets a note instead of figures.
/// Empty when every strategy runs the model's formats or accuracy_positions is 0. `on_format`
/// (optional) hears each format before it is measured ("fp8 weights + fp8 KV").
std::map<std::string, analysis::FormatAccuracy> measure_strategy_accuracy(
    const Scenario& scenario, const BackendFactory& backends,
    const std::function<void(const std::string&)>& on_format = {});

}  // namespace servelab
