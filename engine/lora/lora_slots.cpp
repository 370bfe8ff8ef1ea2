#include "engine/lora/lora_slots.h"

#include <stdexcept>
#include <string>

namespace servelab {

LoraSlots::LoraSlots(int n_slots) : slots_(size_t(n_slots > 0 ? n_slots : 0)) {
  if (n_slots < 1) throw std::invalid_argument("LoraSlots: n_slots must be >= 1 (got " + std::to_string(n_slots) + ")");
}

int LoraSlots::acquire(const std::shared_ptr<const LoraAdapter>& adapter, uint64_t step_no, Backend& backend) {
  if (!adapter || adapter->id == 0) throw std::logic_error("LoraSlots::acquire: an adapter with an id is needed");
  int victim = -1;
  for (int s = 0; s < n_slots(); ++s) {
    Slot& slot = slots_[size_t(s)];
    if (slot.id == adapter->id) {
      slot.last_step = step_no;
      return s;
    }
    if (slot.used && slot.last_step == step_no) continue;  // another adapter of this step
    // Empty slots first, then the least recently used.
    if (victim < 0 || (!slot.used && slots_[size_t(victim)].used) ||
        (slot.used == slots_[size_t(victim)].used && slot.last_step < slots_[size_t(victim)].last_step))
      victim = s;
  }
  if (victim < 0)
    throw std::logic_error("LoraSlots: adapter '" + adapter->name + "' needs a slot but all " + std::to_string(n_slots()) +
                           " hold other adapters of step " + std::to_string(step_no) +
                           " (the scheduler must bound a step's adapters by max_loras)");
  backend.load_lora(victim, adapter);
  ++n_loads_;
  slots_[size_t(victim)] = Slot{adapter->id, step_no, true};
  return victim;
}

bool LoraSlots::holds(uint64_t id) const {
  for (const Slot& s : slots_)
    if (s.id == id) return true;
  return false;
}

}  // namespace servelab
