#pragma once
// Backend: runs one batched forward step over the KV arena and samples the next tokens.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/kv/kv_manager.h"
#include "engine/model/config.h"
#include "engine/request.h"

namespace servelab {

/// One sequence's share of a step: positions [seq->n_computed, seq->n_computed + n_new) are run
/// through the model and their K/V written to the arena. When `sample` is set (the chunk ends at
/// the last known token) the last position's logits give the next token: n_samples draws from
/// that one row (a request with n > 1 parallel samples draws all n first tokens from its
/// prefill's logits, as vLLM does). Draw k uses the sampler's seq_key seq->sample_index + k and
/// the position n_computed + n_new, so it equals what sample k would draw from the same row.
struct BatchEntry {
  Sequence* seq = nullptr;
  int n_new = 0;
  bool sample = false;
  int n_samples = 1;  ///< draws from the sampled row (>= 1; read only when sample is set)
};

/// A step's work. n_padding_tokens are rows computed and thrown away (static batching pads
/// prompts to the longest and keeps finished slots in the batch): they cost real compute.
struct Batch {
  std::vector<BatchEntry> entries;
  int n_padding_tokens = 0;
  int n_tokens() const;  ///< Σ n_new (padding excluded)
  bool empty() const { return entries.empty(); }
};

struct ForwardResult {
  /// n_samples tokens per entry with sample == true, in entry order (an entry's draws adjacent,
  /// k = 0 first).
  std::vector<TokenId> sampled;
  std::optional<double> predicted_s;  ///< sim backend: the step's predicted duration
};

/// Host memory for swapped-out K/V: n_slots host slots of bytes_per_slot bytes, in the layout of
/// the backend that made it (only its swap_out/swap_in read it). Allocated once per engine
/// (`engine.swap_space`) by Backend::make_host_pool: pinned and device-mapped on cuda, plain memory
/// on cpu, no memory on sim (it stores no K/V). SwapSpace decides which slots hold what.
class HostKvPool {
 public:
  using FreeFn = void (*)(void*);
  /// Takes ownership of data (freed with free_fn when non-null).
  HostKvPool(void* data, void* device_view, int64_t n_slots, int64_t bytes_per_slot, bool pinned, FreeFn free_fn)
      : data_(data), device_view_(device_view), n_slots_(n_slots), bytes_per_slot_(bytes_per_slot), pinned_(pinned),
        free_(free_fn) {}
  ~HostKvPool() {
    if (data_ && free_) free_(data_);
  }
  HostKvPool(const HostKvPool&) = delete;
  HostKvPool& operator=(const HostKvPool&) = delete;

  std::byte* data() const { return static_cast<std::byte*>(data_); }  ///< nullptr on sim
  /// The pool as the device addresses it (cuda: the mapped pinned memory), else nullptr.
  void* device_view() const { return device_view_; }
  int64_t n_slots() const { return n_slots_; }
  int64_t bytes_per_slot() const { return bytes_per_slot_; }
  int64_t bytes() const { return n_slots_ * bytes_per_slot_; }
  bool pinned() const { return pinned_; }
  /// Throws std::out_of_range naming `who` and the run when a run with n_slots > 0 leaves the
  /// arena [0, arena_slots) or this pool.
  void check(std::span<const KvSwap> runs, int64_t arena_slots, const char* who) const;

 private:
  void* data_;
  void* device_view_;
  int64_t n_slots_;
  int64_t bytes_per_slot_;
  bool pinned_;
  FreeFn free_;
};

/// The largest step an engine sends its backend: rows (tokens), sequences, the longest context,
/// and the KV block size (0 for the naive layout).
struct StepLimits {
  int max_rows = 0;
  int max_seqs = 0;
  int max_context = 0;
  int block_size = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  ///< "cpu", "cuda", "sim"
  virtual const ModelConfig& config() const = 0;
  /// Bytes one token's K and V take over all layers in this backend's arena.
  virtual int64_t kv_bytes_per_slot() const = 0;
  /// Allocates the arena for n_slots token slots (called once, before any forward).
  virtual void init_kv(int64_t n_slots) = 0;
  /// Sizes the step buffers for the largest step the scheduler will send (called by the engine
  /// after init_kv, before any forward), so nothing grows mid-run: on cuda a buffer that grows
  /// invalidates every captured graph, and the recaptures land in the measured latencies. A
  /// step larger than `limits` still runs (the buffers grow). Default: nothing to size (cpu, sim).
  virtual void reserve_steps(const StepLimits& limits) { (void)limits; }
  /// Batch sizes a decode-only step is padded up to before it runs (cuda: the CUDA graph
  /// buckets, a step of 9 sequences runs as 16), ascending; empty when steps run as they come
  /// (cpu, sim, cuda without graphs or in batch-invariant mode). The profile records them, so the
  /// sim prices a decode step at the size that actually runs.
  virtual std::vector<int> decode_row_buckets() const { return {}; }
  /// Runs the batch: reads/writes K/V at kv.slot(seq, pos), samples. Does not modify the seqs.
  virtual ForwardResult forward(const Batch& batch, const KvManager& kv) = 0;
  virtual void copy_slots(std::span<const KvCopy> copies) = 0;
  /// A host pool of n_slots slots for swap_out/swap_in (see HostKvPool). Throws
  /// std::runtime_error naming the bytes when the memory cannot be had.
  virtual std::unique_ptr<HostKvPool> make_host_pool(int64_t n_slots) = 0;
  /// Swap out: copies every layer's K and V of each run's arena slots into its pool slots.
  /// Swap in: the reverse. Runs are whole blocks where the KV layout has blocks; both return
  /// when the copy is done. Throw std::out_of_range for a run outside the arena or the pool.
  virtual void swap_out(std::span<const KvSwap> runs, HostKvPool& pool) = 0;
  virtual void swap_in(std::span<const KvSwap> runs, const HostKvPool& pool) = 0;
};

}  // namespace servelab
