#include "engine/backend/step_input.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace servelab {
namespace {

std::string entry_name(size_t i, const Sequence* seq) {
  return "batch entry " + std::to_string(i) + (seq ? " (seq " + std::to_string(seq->id) + ")" : "");
}

void check_sampling(size_t e, const Sequence& seq) {
  const SamplingParams& p = seq.sampling;
  if (p.temperature >= 0.0f && p.temperature <= std::numeric_limits<float>::max() && p.top_k >= 0 && p.top_p > 0.0f &&
      p.top_p <= 1.0f)
    return;  // the common case, in one branch
  if (!(p.temperature >= 0.0f) || std::isinf(p.temperature))
    throw std::invalid_argument(entry_name(e, &seq) + ": sampling.temperature (" + std::to_string(p.temperature) +
                                ") must be a finite number >= 0");
  if (p.top_k < 0)
    throw std::invalid_argument(entry_name(e, &seq) + ": sampling.top_k (" + std::to_string(p.top_k) +
                                ") must be >= 0 (0 = off)");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    throw std::invalid_argument(entry_name(e, &seq) + ": sampling.top_p (" + std::to_string(p.top_p) +
                                ") must be in (0, 1]");
}

/// Writes entry e's rows [row, row + n_new): token ids, positions, slot mapping and lora slots,
/// and (paged) its row of the block table, or (naive) its base slot.
void fill_entry_rows(kernels::StepInput& in, const KvManager& kv, const BatchEntry& entry, size_t e, int block_size,
                     int vocab, bool any_lora, int row) {
  const bool paged = in.kv_kind == kernels::KvLayoutKind::paged;
  const Sequence& seq = *entry.seq;
  const int begin = seq.n_computed, end = seq.n_computed + entry.n_new;
  int32_t* table = paged ? in.block_tables.data() + e * size_t(in.block_table_stride) : nullptr;
  int64_t base = 0;
  if (paged) {
    const int n_blocks = (end + block_size - 1) / block_size;
    for (int b = kv.block_ids(seq, n_blocks, table) ? n_blocks : 0; b < n_blocks; ++b) {
      const int64_t first = kv.slot(seq, b * block_size);
      if (first < 0 || first % block_size != 0)
        throw std::logic_error(entry_name(e, &seq) + ": kv.slot() of position " + std::to_string(b * block_size) +
                               " is " + std::to_string(first) + ", not the start of a block of " +
                               std::to_string(block_size));
      table[b] = static_cast<int32_t>(first / block_size);
    }
  } else {
    base = kv.slot(seq, 0);
    in.base_slots.push_back(base);
  }
  for (int pos = begin; pos < end; ++pos, ++row) {
    const TokenId t = seq.token_at(pos);
    if (t < 0 || t >= vocab)
      throw std::invalid_argument(entry_name(e, &seq) + ": token " + std::to_string(t) + " at position " +
                                  std::to_string(pos) + " is outside the vocabulary [0, " + std::to_string(vocab) +
                                  ")");
    const auto r = static_cast<size_t>(row);
    in.token_ids[r] = t;
    in.positions[r] = pos;
    if (any_lora) in.lora_slot[r] = entry.lora_slot < 0 ? -1 : entry.lora_slot;
    in.slot_mapping[r] = paged ? int64_t(table[pos / block_size]) * block_size + pos % block_size : base + pos;
  }
}

/// Checks entry e (its sequence, rows, sampling, speculative rows and masks), throwing for the
/// first thing wrong, and returns how many draws it makes (0 when it does not sample). Out of
/// line and cold: check_entry runs it only for an entry its own tests refuse, for the message.
[[gnu::cold, gnu::noinline]] size_t check_entry_slow(const BatchEntry& entry, size_t e, int n_masks) {
  const Sequence* seq = entry.seq;
  if (!seq) throw std::invalid_argument(entry_name(e, seq) + ": seq is null");
  if (entry.n_new < 1)
    throw std::invalid_argument(entry_name(e, seq) + ": n_new (" + std::to_string(entry.n_new) + ") must be >= 1");
  const int begin = seq->n_computed, end = seq->n_computed + entry.n_new;
  if (begin < 0 || end > seq->n_with_spec())
    throw std::invalid_argument(entry_name(e, seq) + ": positions [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") are outside its " + std::to_string(seq->n_with_spec()) +
                                " tokens");
  if (!entry.sample) return 0;
  check_sampling(e, *seq);
  if (!seq->spec_tokens.empty() && (end != seq->n_with_spec() || begin > seq->n_tokens() - 1 || entry.n_samples > 1))
    throw std::invalid_argument(entry_name(e, seq) + ": verifying speculative tokens needs the chunk to cover "
                                "positions " + std::to_string(seq->n_tokens() - 1) + " to " +
                                std::to_string(seq->n_with_spec()) + " and n_samples 1");
  const int rows = seq->spec_tokens.empty() ? 1 : static_cast<int>(seq->spec_tokens.size()) + 1;
  if (entry.first_mask < -1 || (entry.first_mask >= 0 && entry.first_mask + rows > n_masks))
    throw std::invalid_argument(entry_name(e, seq) + ": first_mask " + std::to_string(entry.first_mask) +
                                " (+ " + std::to_string(rows) + " rows) names masks past the batch's " +
                                std::to_string(n_masks));
  return seq->spec_tokens.empty() ? size_t(std::max(1, entry.n_samples)) : size_t(rows);
}

/// check_entry_slow's checks as plain comparisons, without its messages: the common case (every
/// entry of every step) costs a few compares, not a call with a stack frame for the strings.
inline size_t check_entry(const BatchEntry& entry, size_t e, int n_masks) {
  const Sequence* seq = entry.seq;
  if (!seq || entry.n_new < 1) return check_entry_slow(entry, e, n_masks);
  const int begin = seq->n_computed, end = seq->n_computed + entry.n_new, n_with_spec = seq->n_with_spec();
  if (begin < 0 || end > n_with_spec) return check_entry_slow(entry, e, n_masks);
  if (!entry.sample) return 0;
  const SamplingParams& p = seq->sampling;
  const size_t n_spec = seq->spec_tokens.size();
  const int rows = n_spec == 0 ? 1 : static_cast<int>(n_spec) + 1;
  const bool ok = p.temperature >= 0.0f && p.temperature <= std::numeric_limits<float>::max() && p.top_k >= 0 &&
                  p.top_p > 0.0f && p.top_p <= 1.0f &&
                  (n_spec == 0 || (end == n_with_spec && begin <= seq->n_tokens() - 1 && entry.n_samples <= 1)) &&
                  entry.first_mask >= -1 && (entry.first_mask < 0 || entry.first_mask + rows <= n_masks);
  if (!ok) return check_entry_slow(entry, e, n_masks);
  return n_spec == 0 ? size_t(std::max(1, entry.n_samples)) : size_t(rows);
}

void resize_draws(kernels::StepInput& in, size_t n) {
  in.sample_rows.resize(n);
  in.temperature.resize(n);
  in.top_k.resize(n);
  in.top_p.resize(n);
  in.seed.resize(n);
  in.seq_key.resize(n);
  in.sample_position.resize(n);
  in.mask_index.resize(n);
  in.draft_token.resize(n);
  in.draft_dist.resize(n);
}

/// Writes the draws of sampling entry `entry` (its rows end before `row`) from draw d on; returns
/// the next draw.
size_t write_draws(kernels::StepInput& in, size_t d, const BatchEntry& entry, int row, int vocab) {
  const Sequence& seq = *entry.seq;
  const int end = seq.n_computed + entry.n_new;
  const SamplingParams& p = seq.sampling;
  const bool greedy = p.temperature == 0.0f || p.top_k == 1;
  auto draw = [&](int row_index, uint64_t key, int position, int mask, TokenId draft = -1, int dist = -1) {
    in.sample_rows[d] = row_index;
    in.temperature[d] = greedy ? 0.0f : p.temperature;
    in.top_k[d] = greedy ? 0 : p.top_k;
    in.top_p[d] = greedy ? 1.0f : p.top_p;
    in.seed[d] = p.seed;
    in.seq_key[d] = key;
    in.sample_position[d] = position;
    in.mask_index[d] = mask;
    in.draft_token[d] = draft;
    in.draft_dist[d] = dist;
    ++d;
  };
  if (seq.spec_tokens.empty()) {
    for (int k = 0; k < std::max(1, entry.n_samples); ++k)  // as CpuBackend: n_samples < 1 draws once
      draw(row - 1, static_cast<uint64_t>(seq.sample_index + k), end, entry.first_mask);
    return d;
  }
  // Verification: one draw per row from the last accepted token on.
  const int first = seq.n_tokens() - 1;
  const size_t n_spec = seq.spec_tokens.size();
  const bool with_q = !greedy && seq.spec_probs.size() >= n_spec * size_t(vocab);
  for (int pos = first; pos < end; ++pos) {
    // Draft j is the token at pos + 1; a point-mass draft too carries its token (the sim's
    // acceptance reads it; the samplers verify against q only where draft_dist is set).
    const size_t j = size_t(pos - first);
    int dist = -1;
    if (with_q && j < n_spec) {
      dist = static_cast<int>(in.draft_probs.size() / size_t(vocab));
      const float* q = seq.spec_probs.data() + j * size_t(vocab);
      in.draft_probs.insert(in.draft_probs.end(), q, q + vocab);
    }
    draw(row - (end - pos), static_cast<uint64_t>(seq.sample_index), pos + 1,
         entry.first_mask < 0 ? -1 : entry.first_mask + (pos - first), j < n_spec ? seq.spec_tokens[j] : -1, dist);
  }
  return d;
}

/// Swaps the arrays a shape-only step writes by index (ShapeStepBuilder) between a and b.
void swap_shape_arrays(kernels::StepInput& a, kernels::StepInput& b) {
  a.query_start.swap(b.query_start);
  a.context_lens.swap(b.context_lens);
  a.seq_ids.swap(b.seq_ids);
  a.sample_rows.swap(b.sample_rows);
  a.temperature.swap(b.temperature);
  a.top_k.swap(b.top_k);
  a.top_p.swap(b.top_p);
  a.seed.swap(b.seed);
  a.seq_key.swap(b.seq_key);
  a.sample_position.swap(b.sample_position);
  a.mask_index.swap(b.mask_index);
  a.draft_token.swap(b.draft_token);
  a.draft_dist.swap(b.draft_dist);
}

/// The step's token masks from the batch's: copied, or late (filled by the batch's filler).
void set_masks(const Batch& batch, Step& step, bool late, int n_masks, int words) {
  kernels::StepInput& in = step.in;
  step.fill_masks = nullptr;
  if (late) {
    in.late_masks = n_masks;
    in.mask_words_per_row = words;
    step.fill_masks = batch.fill_masks;
  } else if (n_masks > 0) {
    in.mask_words = batch.mask_words;
    in.mask_words_per_row = words;
  }
}

}  // namespace

void build_step_input(const Batch& batch, const KvManager& kv, int vocab, Step& step, StepDetail detail) {
  using kernels::KvLayoutKind;
  if (batch.n_padding_tokens < 0)
    throw std::invalid_argument("batch.n_padding_tokens (" + std::to_string(batch.n_padding_tokens) +
                                ") must be >= 0");
  kernels::StepInput& in = step.in;
  const bool rows = detail == StepDetail::full;
  step.n_padding = batch.n_padding_tokens;
  step.shape_only = !rows;
  in.clear();
  const bool paged = kv.kind() == KvKind::paged;
  const int block_size = paged ? static_cast<int>(kv.unit_slots()) : 1;
  if (block_size < 1) throw std::logic_error("KvManager::unit_slots() must be >= 1");
  in.kv_kind = paged ? KvLayoutKind::paged : KvLayoutKind::naive;
  in.block_size = paged ? block_size : 16;
  const int words = batch.mask_words_per_row;
  const bool late = batch.n_late_masks > 0;
  const int n_masks = late ? batch.n_late_masks : words > 0 ? static_cast<int>(batch.mask_words.size() / size_t(words)) : 0;
  if (words < 0 || (words > 0 && batch.mask_words.size() % size_t(words) != 0) || (words == 0 && !batch.mask_words.empty()))
    throw std::invalid_argument("batch.mask_words (" + std::to_string(batch.mask_words.size()) +
                                " words) must hold whole masks of mask_words_per_row (" + std::to_string(words) + ")");
  if (batch.n_late_masks < 0 || (late && (!batch.mask_words.empty() || words == 0 || !batch.fill_masks)))
    throw std::invalid_argument("batch.n_late_masks (" + std::to_string(batch.n_late_masks) +
                                ") needs mask_words empty, mask_words_per_row set and fill_masks");
  if (words > 0 && words != (vocab + 31) / 32)
    throw std::invalid_argument("batch.mask_words_per_row (" + std::to_string(words) + ") must be (vocab + 31) / 32 = " +
                                std::to_string((vocab + 31) / 32));

  if (!rows) {  // one walk over the entries: checks and writes together (ShapeStepBuilder)
    ShapeStepBuilder builder;
    builder.begin(kv, vocab, step, n_masks, batch.entries.size(), batch.n_padding_tokens);
    for (const BatchEntry& entry : batch.entries) builder.add(entry);
    builder.finish();
    set_masks(batch, step, late, n_masks, words);
    return;
  }
  // Pass 1 checks every entry and counts its draws (and sizes the block table); pass 2 writes.
  int stride = 0;
  size_t n_rows = 0, n_draws = 0;
  bool decode_only = !batch.entries.empty();
  for (size_t e = 0; e < batch.entries.size(); ++e) {
    const BatchEntry& entry = batch.entries[e];
    n_draws += check_entry(entry, e, n_masks);
    if (paged) stride = std::max(stride, (entry.seq->n_computed + entry.n_new + block_size - 1) / block_size);
    n_rows += static_cast<size_t>(entry.n_new);
    decode_only = decode_only && entry.n_new == 1;
  }
  in.block_table_stride = paged ? stride : 0;
  if (paged) in.block_tables.assign(batch.entries.size() * size_t(stride), 0);

  // Pass 2: rows and addressing, the sequences' bounds, sampling arrays.
  const bool any_lora =
      std::any_of(batch.entries.begin(), batch.entries.end(), [](const BatchEntry& e) { return e.lora_slot >= 0; });
  // The per-row arrays are sized once and written by index: a prefill step has thousands of rows,
  // and a push_back a row (three or four arrays) was a measurable share of the simulator's time.
  in.token_ids.resize(n_rows);
  in.positions.resize(n_rows);
  in.slot_mapping.resize(n_rows);
  if (any_lora) in.lora_slot.resize(n_rows);
  // The per-draw arrays too: ten push_backs a draw were most of this function's time on the sim.
  resize_draws(in, n_draws);
  size_t d = 0;  // the next draw
  in.query_start.resize(batch.entries.size() + 1);
  in.context_lens.resize(batch.entries.size());
  in.seq_ids.resize(batch.entries.size());
  in.query_start[0] = 0;
  int row = 0;
  for (size_t e = 0; e < batch.entries.size(); ++e) {
    const BatchEntry& entry = batch.entries[e];
    const Sequence& seq = *entry.seq;
    const int end = seq.n_computed + entry.n_new;
    fill_entry_rows(in, kv, entry, e, block_size, vocab, any_lora, row);
    row += entry.n_new;
    in.query_start[e + 1] = row;
    in.context_lens[e] = end;
    in.seq_ids[e] = seq.id;
    if (entry.sample) d = write_draws(in, d, entry, row, vocab);
  }
  in.decode_only = decode_only;
  if (d != n_draws) throw std::logic_error("build_step_input: " + std::to_string(d) + " draws, counted " + std::to_string(n_draws));
  set_masks(batch, step, late, n_masks, words);
}

void ShapeStepBuilder::begin(const KvManager& kv, int vocab, Step& step, int n_masks, size_t n_entries, int n_padding) {
  if (n_padding < 0)
    throw std::invalid_argument("batch.n_padding_tokens (" + std::to_string(n_padding) + ") must be >= 0");
  kernels::StepInput& in = step.in;
  step.n_padding = n_padding;
  step.shape_only = true;
  step.fill_masks = nullptr;
  // Every array emptied (clear) but the per-sequence and per-draw ones add() writes, which keep
  // their length through it: add() writes every element up to what finish() keeps, so growing
  // them from 0 would zero ten arrays of ~200 entries a step only to overwrite them.
  kernels::StepInput kept;
  swap_shape_arrays(in, kept);
  in.clear();
  swap_shape_arrays(in, kept);
  const bool paged = kv.kind() == KvKind::paged;
  const int block_size = paged ? static_cast<int>(kv.unit_slots()) : 1;
  if (block_size < 1) throw std::logic_error("KvManager::unit_slots() must be >= 1");
  in.kv_kind = paged ? kernels::KvLayoutKind::paged : kernels::KvLayoutKind::naive;
  in.block_size = paged ? block_size : 16;
  in_ = &in;
  vocab_ = vocab;
  n_masks_ = n_masks;
  n_entries_ = 0;
  n_draws_ = 0;
  row_ = 0;
  decode_only_ = true;
  // Sized for the entries and one draw each, written by index (grown when more come), cut to
  // what was added by finish().
  in.query_start.resize(n_entries + 1);
  in.context_lens.resize(n_entries);
  in.seq_ids.resize(n_entries);
  resize_draws(in, n_entries);
  in.query_start[0] = 0;
}

bool ShapeStepBuilder::add_any(const BatchEntry& entry) {
  kernels::StepInput& in = *in_;
  const Sequence* seq = entry.seq;
  const size_t e = n_entries_;
  if (entry.first_mask >= 0 && n_masks_ < 0) return false;
  n_entries_ = e + 1;
  const size_t draws = check_entry(entry, e, n_masks_);
  if (e + 1 > in.context_lens.size()) {
    in.query_start.resize(2 * e + 2);
    in.context_lens.resize(2 * e + 1);
    in.seq_ids.resize(2 * e + 1);
  }
  if (n_draws_ + draws > in.sample_rows.size()) resize_draws(in, 2 * (n_draws_ + draws));
  row_ += entry.n_new;
  decode_only_ = decode_only_ && entry.n_new == 1;
  in.query_start[e + 1] = row_;
  in.context_lens[e] = seq->n_computed + entry.n_new;
  in.seq_ids[e] = seq->id;
  if (entry.sample) n_draws_ = write_draws(in, n_draws_, entry, row_, vocab_);
  return true;
}

void ShapeStepBuilder::finish() {
  kernels::StepInput& in = *in_;
  in.query_start.resize(n_entries_ + 1);
  in.context_lens.resize(n_entries_);
  in.seq_ids.resize(n_entries_);
  resize_draws(in, n_draws_);
  in.decode_only = decode_only_ && n_entries_ > 0;
}

void check_step_shape(const kernels::StepInput& in) {
  auto bad = [](const std::string& m) { throw std::invalid_argument("shape-only step: " + m); };
  const size_t n_seqs = in.context_lens.size(), n_draws = in.sample_rows.size();
  if (in.query_start.size() != n_seqs + 1 || in.query_start.front() != 0)
    bad("query_start must hold n_seqs + 1 = " + std::to_string(n_seqs + 1) + " entries from 0");
  if (in.seq_ids.size() != n_seqs) bad("seq_ids must hold one entry per sequence");
  const int32_t* qs = in.query_start.data();
  const int32_t* ctx = in.context_lens.data();
  for (size_t s = 0; s < n_seqs; ++s) {
    const int q = qs[s + 1] - qs[s];
    if (q < 1 || ctx[s] < q) [[unlikely]] {
      if (q < 1) bad("sequence " + std::to_string(s) + " has no query rows");
      bad("context_lens[" + std::to_string(s) + "] must be >= its query rows");
    }
  }
  for (const size_t n : {in.temperature.size(), in.top_k.size(), in.top_p.size(), in.seed.size(), in.seq_key.size(),
                         in.sample_position.size(), in.mask_index.size(), in.draft_token.size(), in.draft_dist.size()})
    if (n != n_draws) bad("every per-draw array must hold one entry per draw (" + std::to_string(n_draws) + ")");
  const int n_rows = in.query_start.back(), n_masks = in.n_masks();
  const int32_t* rows = in.sample_rows.data();
  const int32_t* masks = in.mask_index.data();
  for (size_t i = 0; i < n_draws; ++i) {
    if (rows[i] < 0 || rows[i] >= n_rows || masks[i] < -1 || masks[i] >= n_masks) [[unlikely]] {
      if (rows[i] < 0 || rows[i] >= n_rows) bad("sample_rows[" + std::to_string(i) + "] out of range");
      bad("mask_index[" + std::to_string(i) + "] names no mask");
    }
  }
}

Step make_step(const Backend& backend, const Batch& batch, const KvManager& kv) {
  Step step;
  build_step_input(batch, kv, backend.config().vocab_size, step);
  return step;
}

StepOutput run_batch(Backend& backend, const Batch& batch, const KvManager& kv) {
  return backend.execute(make_step(backend, batch, kv));
}

int Batch::n_tokens() const {
  int n = 0;
  for (const auto& e : entries) n += e.n_new;
  return n;
}

}  // namespace servelab
