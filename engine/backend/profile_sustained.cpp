#include "engine/backend/profile_sustained.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

namespace servelab {

namespace {

double probe_median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The grid's heaviest prefill-like point: most rows, then the longest sequence.
const ProfilePoint* heavy_point(const std::vector<ProfilePoint>& points, size_t* index) {
  const ProfilePoint* best = nullptr;
  int64_t best_rows = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const ProfilePoint& p = points[i];
    if (p.n_padding > 0 || p.phase == ProfilePhase::decode || p.phase == ProfilePhase::verify) continue;
    int64_t rows = 0;
    for (const ProfilePoint::Seq& s : p.seqs) rows += s.n_new;
    if (!best || rows > best_rows || (rows == best_rows && p.max_len() > best->max_len())) {
      best = &p;
      best_rows = rows;
      *index = i;
    }
  }
  return best;
}

}  // namespace

void summarize_sustained(SustainedLoad& load) {
  std::vector<double> heavy_t, heavy_s, decode_s, heavy_hot, decode_hot;
  const double hot_from = 0.6 * load.seconds;
  for (const auto& [t, kind, s] : load.trace) {
    (kind == 0 ? heavy_s : decode_s).push_back(s);
    if (kind == 0) heavy_t.push_back(t + s);  // when the run ended
    if (t >= hot_from) (kind == 0 ? heavy_hot : decode_hot).push_back(s);
  }
  auto first = [](const std::vector<double>& v, size_t n) { return std::vector<double>(v.begin(), v.begin() + std::min(n, v.size())); };
  load.heavy.cold_s = probe_median(first(heavy_s, 3));
  load.decode.cold_s = probe_median(first(decode_s, 2));
  load.heavy.hot_s = probe_median(heavy_hot.empty() ? first(heavy_s, heavy_s.size()) : heavy_hot);
  load.decode.hot_s = probe_median(decode_hot.empty() ? first(decode_s, decode_s.size()) : decode_hot);
  // tau: the heavy runs (a running median of 3) first 63% of the way from cold to hot.
  const double cold = load.heavy.cold_s, hot = load.heavy.hot_s, target = cold + 0.632 * (hot - cold);
  load.tau_s = 0.02;
  for (size_t i = 1; i + 1 < heavy_s.size(); ++i) {
    const double m = probe_median({heavy_s[i - 1], heavy_s[i], heavy_s[i + 1]});
    if (hot >= cold ? m >= target : m <= target) {
      load.tau_s = std::max(0.02, heavy_t[i]);
      break;
    }
  }
}

std::optional<SustainedLoad> profile_sustained(ProfileRunner& runner, const ProfilePlan& plan,
                                               const std::vector<ProfileSample>& samples, const ProfileOptions& options,
                                               const std::function<void(const std::string&)>& progress) {
  size_t hi = 0;
  const ProfilePoint* heavy = heavy_point(plan.points, &hi);
  const ProfilePoint* decode = lead_in_point(plan.points, options);
  if (!heavy || !decode || samples.size() != plan.points.size()) return std::nullopt;
  const size_t di = static_cast<size_t>(decode - plan.points.data());
  SustainedLoad load;
  load.seconds = options.sustained_s;
  load.heavy.shape = samples[hi].shape;
  load.heavy.grid_s = samples[hi].step_s;
  load.decode.shape = samples[di].shape;
  load.decode.grid_s = samples[di].step_s;
  if (progress)
    progress("sustained load: " + heavy->describe() + " back to back, " + decode->describe() + " after every " +
             std::to_string(load.heavy_per_decode) + ", for " + std::to_string(options.sustained_s) + " s");
  std::this_thread::sleep_for(std::chrono::duration<double>(std::min(1.0, options.sustained_s / 2)));
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  while (since() < options.sustained_s) {
    for (int k = 0; k < load.heavy_per_decode; ++k) {
      const double t = since();
      load.trace.push_back({t, 0.0, runner.run(*heavy, 0, 1, 0.0).times_s.front()});
    }
    const double t = since();
    load.trace.push_back({t, 1.0, runner.run(*decode, 0, 1, 0.0).times_s.front()});
  }
  summarize_sustained(load);
  load.validate();
  return load;
}

std::string sustained_table(const SustainedLoad& l) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "sustained load (%.1f s, %d heavy steps a decode): heavy %lld rows %.3f ms cold / %.3f grid / %.3f hot "
                "(%.3fx the grid); decode %lld seqs %.3f / %.3f / %.3f ms (%.3fx); tau %.3f s\n",
                l.seconds, l.heavy_per_decode, static_cast<long long>(l.heavy.shape.n_tokens), l.heavy.cold_s * 1e3,
                l.heavy.grid_s * 1e3, l.heavy.hot_s * 1e3, l.heavy.hot_s / l.heavy.grid_s,
                static_cast<long long>(l.decode.shape.n_seqs), l.decode.cold_s * 1e3, l.decode.grid_s * 1e3,
                l.decode.hot_s * 1e3, l.decode.hot_s / l.decode.grid_s, l.tau_s);
  return buf;
}

}  // namespace servelab
