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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  ///< "cpu", "cuda", "sim"
  virtual const ModelConfig& config() const = 0;
  /// Bytes one token's K and V take over all layers in this backend's arena.
  virtual int64_t kv_bytes_per_slot() const = 0;
  /// Allocates the arena for n_slots token slots (called once, before any forward).
  virtual void init_kv(int64_t n_slots) = 0;
  /// Runs the batch: reads/writes K/V at kv.slot(seq, pos), samples. Does not modify the seqs.
  virtual ForwardResult forward(const Batch& batch, const KvManager& kv) = 0;
  virtual void copy_slots(std::span<const KvCopy> copies) = 0;
  /// Swap out: copies the given slots' K/V to host bytes. Swap in: writes them back.
  virtual void save_slots(std::span<const int64_t> slots, std::vector<std::byte>& host) = 0;
  virtual void load_slots(std::span<const int64_t> slots, const std::vector<std::byte>& host) = 0;
};

}  // namespace servelab
