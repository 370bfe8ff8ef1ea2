#pragma once
// When and how much to speculate. Two rules, both cheap enough to run every step:
// - per sequence, k follows its acceptance (Hugging Face assisted generation's schedule): +2
//   after a verification that accepted every draft, -1 after one that rejected any, in [1, k_max];
// - per step, drafts are proposed only when they pay at this batch: with α_s a sequence's
//   acceptance so far, its expected tokens from k_s drafts are (1 - α_s^(k_s+1)) / (1 - α_s); the
//   step speculates when Σ E_s / (T_verify + T_draft) > B / T_decode, the three priced by the cost
//   model (a decode step of the B sequences, the verification step of their 1 + k_s rows, and
//   k_max decode steps of the draft model, zero for n-gram). A larger batch moves decode from
//   bandwidth-bound towards compute-bound, T_verify / T_decode grows towards (B + Σk) / B, and
//   the rule turns speculation off;
// - from measurement (SpecRateMeter), which replaces the priced rule where it is on: what a step
//   with drafts (or a probe of a few, scaled to the batch) and one without actually yielded
//   (tokens per second of wall time, drafting included) is kept per batch size; once both have
//   been seen the faster one runs (drafts by a margin), and the other is tried again now and then. A real backend whose verification or drafting costs more than the roofline
//   says (eager multi-row steps beside graphed decodes, a slow draft) turns speculation off where
//   it measured a loss.
#include <memory>
#include <optional>
#include <span>

#include "engine/backend/cost_model.h"

namespace servelab {

/// k for the next verification of a sequence that drafted n_drafted tokens at k and had
/// n_accepted of them accepted.
int next_num_drafts(int k, int n_drafted, int n_accepted, int k_max);

/// Expected tokens one verification yields from k drafts accepted independently with
/// probability alpha each: 1 + alpha + ... + alpha^k.
double expected_tokens(double alpha, int k);

/// A sequence about to draw: its context (tokens after the step without drafts), its drafts k,
/// and its acceptance rate so far.
struct DrawingSeq {
  int context = 0;
  int k = 0;
  double alpha = 0.0;
};

struct SpecPricers;

/// The cost side of the per-step rule.
struct SpecPricing {
  SimCostModel cost;                 ///< prices the target's steps (and the draft's)
  ModelConfig target;
  std::optional<ModelConfig> draft;  ///< the draft model (self, draft_model); none for n-gram
  /// The step pricers of the three above, built by price_speculation from copies of them and
  /// kept (shared by later copies of this object) until the models' names or shapes or the cost
  /// model's kind, source, device figures, degree, formats or scale change; an edit of a profile's
  /// fit in place is not seen (build a new SpecPricing). Building them walks both models' tensor
  /// lists and refits the draft's rounds: ~4 ms of host time on the shared 2-core VM, which every
  /// priced verdict paid before (on the H200 in the step after each prefill, measured:
  /// results/sim-validation/README.md); a verdict now costs 5-30 us there, the key most of it.
  mutable std::shared_ptr<const SpecPricers> pricers;
};

/// The rule's figures for one step: seconds of plain decode, of verification, of drafting, and
/// the expected tokens with and without drafts.
struct SpecVerdict {
  double decode_s = 0.0, verify_s = 0.0, draft_s = 0.0;
  double tokens_plain = 0.0, tokens_spec = 0.0;
  bool speculate() const { return tokens_spec * decode_s > tokens_plain * (verify_s + draft_s); }
};

/// Prices one step of `seqs` with and without their drafts.
SpecVerdict price_speculation(const SpecPricing& pricing, std::span<const DrawingSeq> seqs);

/// What the measured rule runs in a step: no drafts; drafts for every sequence asked, their
/// accepted tokens kept; or a probe.
enum class SpecChoice { plain, probe, drafts };

/// A probe step as SpecRateMeter::record_probe reads it: `n_probed` of the sequences asked drafted
/// (those whose draft had least to catch up), each kept only its first draw, so the step emitted
/// `tokens` (one a sequence: what the plain step emits) in `seconds`, drafting (`draft_s`, of it
/// `catch_up_s` the draft's one-off catch-up) included; `accepted` of the `drafted` draft tokens
/// would have stood.
struct ProbeStep {
  int n_probed = 0;
  int tokens = 0;
  double seconds = 0.0, draft_s = 0.0, catch_up_s = 0.0;
  int drafted = 0, accepted = 0;
};

/// The measured per-step rule: per batch bucket (sequences asked for drafts, rounded up to a power
/// of two: the count a step is asked and recorded under), an exponential average of the tokens per
/// second that decode steps with drafts and without yielded. A bucket first runs plain steps, then
/// probes, kWarm steps each (the first of each not counted: a decode graph's eager first run, a
/// probe's catch-up on whole prompts; and plain's rate is the faster of its counted warm-up steps,
/// since on cuda the second captures the graph: 8.8-10.6 ms against 5.4-6.0 steady for llama2-7b
/// at 32-64 sequences on an H200, which averaged in made plain look slow and wrong drafts win);
/// then the faster (drafts only by more than kMargin), with the other tried once every kExplore
/// steps so the choice follows acceptance as it changes (every kExploreFar steps while the loser
/// yields under 1/kFar of the winner).
/// Drafts are measured by probes wherever the bucket does not (yet) run them: a probe drafts only
/// for some of the B sequences asked, those whose draft has least to catch up, so its catch-up is
/// bounded by theirs; and each keeps only the first draw of its verification (the token the plain
/// step draws: exact, and no sequence moves ahead of the others, so a closed loop's requests keep
/// finishing together). A bucket's probes take two sizes in turn, large_probe_size(B) first (it
/// catches up every sequence the small ones will take), then probe_size(B): what a probe took
/// beyond the plain step (catch-up taken off) is a part fixed per step plus a part per sequence
/// drafting, and the two sizes tell them apart (a verification step leaves the decode graphs on the
/// GPU: on an H200, llama2-7b at 64 users, a probe of 16 took 6-7 ms beyond plain's 6.0 and drafts
/// for all 64 took 8.8, which scaling by 64 / 16 read as 26 ms). Its rate is the step for all it
/// estimates: the plain step's time from the bucket's plain rate plus the fixed part plus B times
/// the per-sequence part (until both sizes are measured, B / n_probed times what this probe took
/// beyond plain), for the plain tokens plus B / n_probed times the drafts that would have stood.
/// Only a bucket measured (or following a neighbour) in favour of drafts drafts for all and keeps
/// what stands; its steps are recorded as they ran, catch-up included.
/// Where drafts lose, each counted probe that confirms the loss (its own estimate at or below
/// the plain rate; in the warm-up, one of kConfirmDrafts draft tokens or more) doubles the interval
/// to the next exploration, up to kExploreMax, and so does a bucket turned
/// back from drafts by its own drafting steps after a probe found them winning (each such turn pays
/// a full catch-up); the interval goes back to kExplore or kExploreFar when an exploring probe
/// measures a gain (its estimate above the plain rate) that the average has not yet taken in.
/// A bucket not yet measured takes the choice of a neighbour within two buckets that is decided by
/// more than kFar, rather than warming up both (a closed loop draining from 64 users passes
/// through every smaller bucket); it measures the other choice at that neighbour's interval
/// until it is decided itself.
class SpecRateMeter {
 public:
  static constexpr int kWarm = 3;  ///< plain steps, then probes, a bucket runs before it is decided
  static constexpr int kExplore = 32;
  static constexpr int kExploreFar = 128;
  static constexpr int kExploreMax = 4096;
  static constexpr double kFar = 1.25;
  static constexpr double kWeight = 0.25;       ///< of the newest step in the average
  /// Drafts run for all only where they yield more than kMargin times plain's rate: drafting costs
  /// what a decode step's rate does not see. On an H200 (llama2-7b, 32 users of equal output
  /// lengths, acceptance 0.29) a run whose average put drafts ahead drafted for 12% of its steps at
  /// 0.99x plain's rate, and moving sequences out of step turned one prefill step per round into
  /// 76 mixed steps: TPOT p50 1.033x plain (results/gpu/spec/h200-2026-11-30-7d8bfbd-two-sizes).
  static constexpr double kMargin = 1.1;

  static constexpr int kConfirmDrafts = 32;  ///< a warm-up probe's draft tokens that let it back exploring off
  static constexpr int kProbeMin = 4;           ///< a probe drafts for at least this many sequences (all, below)
  static constexpr int kProbeShare = 4;         ///< and for at least 1 / kProbeShare of them

  /// Whether both choices of `batch`'s bucket have been measured.
  bool decided(int batch) const;
  /// What the next step, with `batch` sequences asked for drafts, runs.
  SpecChoice choose(int batch);
  /// The sequences a small probe of `batch` drafts for: max(min(batch, kProbeMin), ceil(batch / kProbeShare)).
  static int probe_size(int batch);
  /// A large probe's: min(batch, 2 probe_size(batch)).
  static int large_probe_size(int batch);
  /// The sequences the next probe of `batch`'s bucket drafts for: large first, then small and
  /// large in turn (by the probes recorded).
  int next_probe_size(int batch) const;
  /// A decode step (no prefill rows) ran for which `batch` sequences were asked (the count
  /// choose() was given), plain or with drafts for all: `tokens` emitted in `seconds`, drafting
  /// included.
  void record(int batch, bool with_drafts, int tokens, double seconds);
  /// A probe ran as a decode step for `batch` asked (ProbeStep): recorded as the step with drafts
  /// for all that it estimates. Ignored before the bucket's plain rate is measured.
  void record_probe(int batch, const ProbeStep& probe);
  /// The averaged tokens per second of a bucket's steps with or without drafts; 0 before any.
  double rate(int batch, bool with_drafts) const;
  /// Steps between a decided bucket's explorations of the losing choice now.
  int explore_interval(int batch) const;

 private:
  /// What a probe of n sequences drafting took beyond the plain step, catch-up taken off.
  struct ProbePoint {
    int n = 0;
    double extra_s = 0.0;
  };
  struct Bucket {
    double rate[2] = {0.0, 0.0};  // [without, with]
    ProbePoint probes[2];         // the newest [small, large] probe
    bool next_large = true;
    int seen[2] = {0, 0};
    int steps = 0;
    int since = 0;             // steps since its last exploration (decided buckets)
    int backoff = 0;           // the interval while drafts lose (0: kExplore or kExploreFar)
  };
  static int bucket_of(int batch);
  static bool is_decided(const Bucket& b) { return b.seen[0] >= kWarm && b.seen[1] >= kWarm; }
  static bool drafts_win(const Bucket& b) { return b.rate[1] > kMargin * b.rate[0]; }
  /// What drafts for all `batch` would take beyond the plain step: probe `p`'s extra_s scaled by
  /// the bucket's two probe points (fixed plus per sequence) or, with one size measured, by batch / p.n.
  static double extra_for_all(const Bucket& b, int batch, const ProbePoint& p);
  /// Adds a step's rate to its side of the bucket and moves the backoff (record's common part).
  void add(Bucket& b, bool with_drafts, double rate, bool probe, int drafted);
  /// Steps between explorations of a decided bucket's losing choice.
  static int interval_of(const Bucket& b);
  /// The nearest bucket within two of `i` whose choice is decided by more than kFar, or null.
  const Bucket* clear_neighbour(int i) const;
  Bucket buckets_[12];  // 1, 2, 4, ..., 2048 and above
};

}  // namespace servelab
