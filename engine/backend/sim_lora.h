#pragma once
// What multi-LoRA adds to a step on the sim backend (docs/lora.md, "On the sim"). The adapters'
// own work is tiny next to the base model's (llama2-7b at rank 16 on all seven linears: 40 M
// parameters an adapter, 0.6% of the model), so on a GPU what a step with adapters costs beyond
// the base step is how the kernels run it. SimDevice's lora_* figures price that, fitted to the
// cuda backend's LoRA path on an H200 (`servelab profile --lora-rank 16`, hardware.h):
//   decode rows:  n_layers · the knots' interpolation at the rows that run an adapter (shrink and
//                 expand launches beside each product, in the decode graphs: about as dear at 8
//                 rows as at 32, so not a figure per row), plus the distinct adapters' weights
//                 read at lora_bandwidth_share of the memory bandwidth;
//   prefill rows: n_layers · (lora_prefill_layer_s + lora_prefill_run_s per run after the first +
//                 lora_prefill_row_s per row), plus their weights read likewise. A run is
//                 consecutive prefill entries on one adapter: the cuda backend's tensor-core path
//                 multiplies each contiguous run of rows of one slot by its own GEMMs
//                 (kernels/lora_runs.h), so 32 prompts alternating between 8 adapters cost 32 runs
//                 (an H200 profile: as much as 32 prompts on 32 adapters, 7x one adapter's;
//                 results/gpu/lora/2026-11-30-h200x2-99c35a2-profile);
// and never less than the adapters' FLOPs at the device's peak (what the cpu backend's plain
// formula costs: cpu-2core's fitted figures are 0). An adapter loaded into a slot (a miss) costs
// its weights' bytes over the host link, copied beside the next step as the cuda backend does
// (lora_copies_seconds: the first layer's part, or what outlasts the step's layers), plus what is left of packing
// them when the backend keeps no image of that adapter object (as the cuda backend's
// DeviceLoraPool keeps twice max_loras images, keyed by the adapter object: lora_pack_seconds),
// the packing priced as the cuda backend's worker runs it, one at a time from the request's
// arrival on the engine's clock (SimBackend::stage_lora, lora_ready). Reading an adapter into host
// memory delays only the request naming it (lora_host_load_seconds, through the run's source:
// SimBackend::lora_read_seconds). Under tensor parallelism the
// sim prices adapters as on one GPU (the cuda backend refuses LoRA there).
#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/hardware.h"
#include "engine/model/config.h"

namespace servelab {

struct LoraAdapter;

/// An adapter as the sim prices it: its parameters (A and B of every adapted linear and layer).
struct SimLoraSlot {
  int64_t params = 0;
};

/// The parameters of `adapter`'s A and B matrices in `model`: rank × (in + out) of every linear it
/// targets, in every layer (0 for null). From its rank and targets alone: the sim's adapters carry
/// no weights (loadgen/lora_workload.h).
int64_t lora_params(const ModelConfig& model, const LoraAdapter* adapter);

/// Seconds that the rows of `step` running adapters add to it. A row's slot is the entry's
/// Step::seq_lora_slot, or with that empty in.lora_slot at the entry's first row; both empty:
/// no adapters, 0. `slots[s]` is slot s's adapter (a slot outside them, or empty, prices none).
double lora_step_seconds(const SimDevice& device, const ModelConfig& model, const Step& step,
                         std::span<const SimLoraSlot> slots);

/// One entry of a step that runs an adapter, as a step record keeps it: its rows, its slot (which
/// entries share an adapter) and that adapter's parameters.
struct LoraRows {
  int32_t rows = 0;
  int32_t slot = 0;
  int64_t params = 0;
};

/// The entries of `step` that run an adapter (each with its slot's parameters from `slots`, the
/// adapters' parameters by slot); empty when none does.
std::vector<LoraRows> lora_rows_of(const Step& step, std::span<const int64_t> slot_params);

/// What lora_step_seconds prices those entries at (the same step told by its adapted entries).
double lora_rows_seconds(const SimDevice& device, const ModelConfig& model, std::span<const LoraRows> rows);

/// Seconds per layer that `rows` decode rows running adapters add (the device's knots, or
/// lora_decode_row_s per row without them; the weights' read apart).
double lora_decode_layer_seconds(const SimDevice& device, double rows);

/// Seconds to copy an adapter of `params` parameters from host memory into its slot.
double lora_load_seconds(const SimDevice& device, int64_t params);
/// What the copies of one step's loads (`copies`, seconds each, in load order) add to a step whose
/// device work takes `step_s` over `n_layers` layers. The cuda backend copies an image on its own
/// stream, layer by layer, beside the step that loads it, each layer waiting for its own part
/// (cuda_lora.h): the last load adds max(copy / L, copy − step_s · (L − 1) / L). A load before it
/// waits for the copy under way (one image under copy at a time), so the loads before the last add
/// their whole copies.
double lora_copies_seconds(std::span<const double> copies, double step_s, int n_layers);
/// Packing an adapter of `params` parameters from fp32 into the backend's image (a load whose
/// image is not kept): 4 bytes a parameter at lora_pack_bytes_s; 0 where that is 0.
double lora_pack_seconds(const SimDevice& device, int64_t params);
/// Reading or drawing an adapter of `params` parameters into host memory (what the front end does
/// before the request reaches the engine: SimBackend::lora_read_seconds): 4 bytes a parameter at
/// lora_host_load_bytes_s; 0 where that is 0.
double lora_host_load_seconds(const SimDevice& device, int64_t params);

/// One LoRA point of a profile (`servelab profile --lora-rank`, engine/backend/profile_lora.h): a
/// step whose sequences all run adapters (`adapters` distinct ones among them), timed in turn with
/// its base twin, the same step without adapters.
struct LoraProfilePoint {
  bool prefill = false;  ///< each sequence computes its prompt (else one decode row each)
  int n_seqs = 0;
  int64_t rows = 0;      ///< rows computed, every one adapted
  int adapters = 0;      ///< distinct adapters among the sequences
  int context = 0;       ///< decode: cached positions per sequence
  double base_s = 0.0;   ///< median of the step without adapters
  double lora_s = 0.0;   ///< median of the step with them
};

/// A profile's LoRA points: every adapter of `rank` on all seven linears (`params` parameters each).
struct LoraProfile {
  int rank = 0;
  int64_t params = 0;
  std::vector<LoraProfilePoint> points;
};

/// `device` with its lora_* figures fitted to `profile` (non-negative least squares of what each
/// point's adapters added, lora_s - base_s, relative to its base step): lora_step_seconds' terms
/// as columns, the weights' read at lora_bandwidth_share <= 1 of mem_bw_bytes_s. Figures the
/// points cannot tell apart get the least-norm split. Throws std::invalid_argument naming the
/// point when one is malformed, or when there is none.
SimDevice fit_lora(const SimDevice& device, const ModelConfig& model, const LoraProfile& profile);

/// What `device`'s lora_* figures price point p's adapters at (lora_step_seconds of its shape).
double lora_point_seconds(const SimDevice& device, const ModelConfig& model, int64_t params, const LoraProfilePoint& p);

}  // namespace servelab
