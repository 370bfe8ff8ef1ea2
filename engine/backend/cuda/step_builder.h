#pragma once
// build_step_input and StepPlan moved to engine/backend/step_input.h (namespace servelab): the CPU
// backend runs on the same per-step input. These names keep the cuda backend's files (step_pack,
// cuda_backend_impl.h, edited in parallel) compiling unchanged; new code includes step_input.h.
#include "engine/backend/step_input.h"

namespace servelab::cuda {
using servelab::build_step_input;
using servelab::StepPlan;
}  // namespace servelab::cuda
