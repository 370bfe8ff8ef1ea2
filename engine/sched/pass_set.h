#pragma once
// PassSet: the sequences a scheduler pass has given a chunk, as a set that costs nothing to empty
// and allocates only when it grows. A std::unordered_set rebuilt every step costs a malloc per
// sequence per step (issue 28: the simulator's per-step host work); this is an open-addressing
// table whose slots carry the pass they were written in, so clear() is one increment.
#include <cstdint>
#include <functional>
#include <vector>

namespace servelab {

template <typename T>
class PassSet {
 public:
  /// Empties the set: slots written before now count as free.
  void clear() {
    ++pass_;
    size_ = 0;
  }
  bool contains(const T* p) const {
    if (slots_.empty()) return false;
    for (size_t i = home(p);; i = (i + 1) & mask()) {
      const Slot& s = slots_[i];
      if (s.pass != pass_) return false;  // free: the probe chain ends here
      if (s.key == p) return true;        // (an erased slot keeps the chain going: key null)
    }
  }
  /// Adds p (not null); false when it was there already.
  bool insert(const T* p) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    // One probe: p is not in the set when the chain ends before it (an erased slot, key null,
    // is not reused, so the chain never skips a live key).
    for (size_t i = home(p);; i = (i + 1) & mask()) {
      Slot& s = slots_[i];
      if (s.pass != pass_) {
        s = {p, pass_};
        ++size_;
        return true;
      }
      if (s.key == p) return false;
    }
  }
  /// Removes p; false when it was not there. Its slot stays in the chain (key null).
  bool erase(const T* p) {
    if (slots_.empty()) return false;
    for (size_t i = home(p);; i = (i + 1) & mask()) {
      Slot& s = slots_[i];
      if (s.pass != pass_) return false;
      if (s.key == p) {
        s.key = nullptr;
        return true;
      }
    }
  }

 private:
  struct Slot {
    const T* key = nullptr;
    uint64_t pass = 0;  // written in this pass: occupied (or erased, key null)
  };
  size_t mask() const { return slots_.size() - 1; }
  size_t home(const T* p) const { return std::hash<const T*>{}(p) * 0x9e3779b97f4a7c15ull >> shift_; }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    shift_ = 64;
    for (size_t n = slots_.size(); n > 1; n >>= 1) --shift_;
    const uint64_t live = pass_;
    ++pass_;  // fresh slots are all free under the new pass
    size_ = 0;
    for (const Slot& s : old)
      if (s.pass == live && s.key) insert(s.key);
  }

  std::vector<Slot> slots_;  // a power of two, at most half full (erased slots count)
  uint64_t pass_ = 1;
  size_t size_ = 0;          // slots written in this pass (erased ones too)
  int shift_ = 64;
};

}  // namespace servelab
