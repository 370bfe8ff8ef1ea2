#include "engine/backend/sim_sustained.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/backend/step_shape_json.h"

namespace servelab {

namespace {

void check_point(const SustainedPoint& p, const char* name) {
  for (const auto& [field, v] : {std::pair{"grid_s", p.grid_s}, {"cold_s", p.cold_s}, {"hot_s", p.hot_s}})
    if (!std::isfinite(v) || v <= 0.0 || v > 60.0)
      throw std::invalid_argument(std::string("sustained.") + name + "." + field + " must be in (0, 60] seconds (got " +
                                  std::to_string(v) + ")");
  if (p.shape.n_tokens < 1) throw std::invalid_argument(std::string("sustained.") + name + " needs a step of >= 1 token");
}

nlohmann::ordered_json point_json(const SustainedPoint& p) {
  nlohmann::ordered_json j = step_shape_json(p.shape);
  j["grid_s"] = p.grid_s;
  j["cold_s"] = p.cold_s;
  j["hot_s"] = p.hot_s;
  return j;
}

SustainedPoint point_from_json(const nlohmann::json& j, const std::string& name) {
  if (!j.is_object()) throw std::invalid_argument("sustained." + name + " must be an object");
  auto num = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_number()) throw std::invalid_argument("sustained." + name + " needs a number " + key);
    return j[key].get<double>();
  };
  SustainedPoint p;
  try {
    p.shape = step_shape_from_json(j, "sustained." + name);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
  p.grid_s = num("grid_s");
  p.cold_s = num("cold_s");
  p.hot_s = num("hot_s");
  return p;
}

}  // namespace

nlohmann::ordered_json sustained_json(const SustainedLoad& load) {
  nlohmann::ordered_json trace = nlohmann::ordered_json::array();
  for (const auto& [t, kind, s] : load.trace) trace.push_back({t, static_cast<int>(kind), s});
  return {{"seconds", load.seconds},        {"heavy_per_decode", load.heavy_per_decode},
          {"tau_s", load.tau_s},            {"heavy", point_json(load.heavy)},
          {"decode", point_json(load.decode)}, {"trace", std::move(trace)}};
}

SustainedLoad sustained_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("\"sustained\" must be an object");
  SustainedLoad load;
  load.heavy = point_from_json(j.value("heavy", nlohmann::json()), "heavy");
  load.decode = point_from_json(j.value("decode", nlohmann::json()), "decode");
  if (!j.contains("tau_s") || !j["tau_s"].is_number()) throw std::invalid_argument("sustained needs a number tau_s");
  load.tau_s = j["tau_s"].get<double>();
  load.heavy_per_decode = j.value("heavy_per_decode", 4);
  load.seconds = j.value("seconds", 0.0);
  if (j.contains("trace") && j["trace"].is_array())
    for (const auto& e : j["trace"])
      if (e.is_array() && e.size() == 3 && e[0].is_number() && e[1].is_number() && e[2].is_number())
        load.trace.push_back({e[0].get<double>(), e[1].get<double>(), e[2].get<double>()});
  load.validate();
  return load;
}

void SustainedLoad::validate() const {
  check_point(heavy, "heavy");
  check_point(decode, "decode");
  if (heavy_per_decode < 1 || heavy_per_decode > 1000)
    throw std::invalid_argument("sustained.heavy_per_decode must be in [1, 1000] (got " + std::to_string(heavy_per_decode) + ")");
  if (!std::isfinite(tau_s) || tau_s <= 0.0 || tau_s > 600.0)
    throw std::invalid_argument("sustained.tau_s must be in (0, 600] seconds (got " + std::to_string(tau_s) + ")");
}

SustainedState::SustainedState(const SustainedLoad& load, const RooflineTerms& terms) : load_(load), terms_(terms) {
  load_.validate();
  w_heavy_ = compute_share(load.heavy.shape);
  // The u the probe's loop settles at: the time-weighted mean of its steps' shares.
  const double heavy_time = load.heavy_per_decode * load.heavy.hot_s;
  u_probe_ = (heavy_time * w_heavy_ + load.decode.hot_s * compute_share(load.decode.shape)) /
             (heavy_time + load.decode.hot_s);
  if (!(u_probe_ > 1e-6)) u_probe_ = 1e-6;
}

double SustainedState::compute_share(const StepShape& shape) const {
  const RooflineBound b = roofline_bound(terms_, shape);
  const double bound = b.seconds();
  return bound > 0.0 ? std::clamp(b.compute_s / bound, 0.0, 1.0) : 0.0;
}

double SustainedState::factor(double w, double u) const {
  // The heavy probe's slowdown over the grid, scaled by the step's compute share over the heavy
  // step's (the clock-bound part of a step), reached as u reaches the probe's steady state.
  const SustainedPoint& h = load_.heavy;
  const double k = w_heavy_ > 0.0 ? std::clamp(w / w_heavy_, 0.0, 1.0) : 0.0;
  return 1.0 + (h.hot_s / h.grid_s - 1.0) * k * std::clamp(u / u_probe_, 0.0, 1.0);
}

double SustainedState::price(double start_s, double grid_price_s, const StepShape& shape, double ran_s) {
  const double tau = load_.tau_s;
  if (start_s > end_s_) u_ *= std::exp(-(start_s - end_s_) / tau);  // idle: u decays toward 0
  else start_s = end_s_;
  const double w = compute_share(shape);
  const double s = grid_price_s * factor(w, u_);
  const double ran = ran_s >= 0.0 ? ran_s : s;
  u_ = w + (u_ - w) * std::exp(-ran / tau);  // busy: u moves toward the step's share
  end_s_ = start_s + ran;
  return s;
}

}  // namespace servelab
