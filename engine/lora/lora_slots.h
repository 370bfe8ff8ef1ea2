#pragma once
// LoraSlots: which adapter sits in each of the backend's max_loras slots. The engine asks for a
// slot per adapter of a step; a resident adapter keeps its slot, a missing one is loaded into a
// free slot or over the least recently used one the step does not use (Backend::load_lora: on a
// device backend the host → device copy, the "adapter miss"). The scheduler keeps a step's distinct
// adapters <= the slots (ContinuousScheduler's adapter bound), so a step always fits.
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/lora/lora_adapter.h"

namespace servelab {

class LoraSlots {
 public:
  explicit LoraSlots(int n_slots);
  /// The slot holding `adapter` for step `step_no` (step numbers increase), loading it into
  /// `backend` when it is not resident. Throws std::logic_error when every slot is taken by other
  /// adapters of the same step.
  int acquire(const std::shared_ptr<const LoraAdapter>& adapter, uint64_t step_no, Backend& backend);
  int n_slots() const { return static_cast<int>(slots_.size()); }
  /// Adapters loaded into the backend so far (misses, first loads included).
  int64_t n_loads() const { return n_loads_; }
  /// Some slot holds the adapter of this id.
  bool holds(uint64_t id) const;
  /// Id of the adapter slot s holds (0 = empty).
  uint64_t resident(int s) const { return slots_[size_t(s)].id; }

 private:
  struct Slot {
    uint64_t id = 0;
    uint64_t last_step = 0;
    bool used = false;  // ever used: last_step is meaningful
  };
  std::vector<Slot> slots_;
  int64_t n_loads_ = 0;
};

}  // namespace servelab
