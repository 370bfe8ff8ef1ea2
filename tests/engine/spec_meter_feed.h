#pragma once
// Feeds a SpecRateMeter by hand (tests of the measured rule): one step of the choice it made, with
// rates the test sets.
#include "engine/spec/adaptive.h"

namespace servelab {

/// One step of `choice` at `batch` sequences asked. Plain: `batch` tokens at plain_rate tokens/s.
/// Drafts for all: `batch + accepted` tokens at spec_rate, `accepted` of `drafted` draft tokens
/// standing. A probe: the step of next_probe_size(batch) = n of them drafting, with n / batch of those
/// drafts (whole numbers in the tests) and of the time the step for all spends beyond plain, which
/// record_probe scales back to spec_rate.
inline void feed_meter(SpecRateMeter& m, int batch, SpecChoice choice, double plain_rate, double spec_rate,
                       int drafted = 0, int accepted = 0) {
  const double plain_s = batch / plain_rate, spec_s = (batch + accepted) / spec_rate;
  if (choice == SpecChoice::plain) return m.record(batch, false, batch, plain_s);
  if (choice == SpecChoice::drafts) return m.record(batch, true, batch + accepted, spec_s);
  const int n = m.next_probe_size(batch);
  m.record_probe(batch, ProbeStep{n, batch, plain_s + (spec_s - plain_s) * n / batch, 0.0, 0.0, drafted * n / batch,
                                  accepted * n / batch});
}

}  // namespace servelab
